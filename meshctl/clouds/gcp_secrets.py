"""GCP Secret Manager's REST API (v1), for a pool's cluster token: a secret created once,
a version added each time the pool's cluster is recreated (the token rotates); the
instances read ``versions/latest`` with their own service account (``meshctl.boot.join``).
Through google-auth's authorised session with the pool's credentials, so no other client
library is needed; an emulator's endpoint replaces Google's."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

ENDPOINT = "https://secretmanager.googleapis.com"
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


def put_secret(
    credentials: Any,
    project: str,
    name: str,
    value: str,
    labels: Mapping[str, str],
    endpoint_url: str | None = None,
) -> None:
    """Create the secret (an existing one is fine) and add ``value`` as its newest version."""
    from google.auth import credentials as auth
    from google.auth.transport.requests import AuthorizedSession

    scoped: Any = auth.with_scopes_if_required
    session: Any = AuthorizedSession(scoped(credentials, SCOPES))  # type: ignore[no-untyped-call]
    base = f"{(endpoint_url or ENDPOINT).rstrip('/')}/v1/projects/{project}/secrets"
    body: Any = {"replication": {"automatic": {}}, "labels": dict(labels)}
    created = session.post(base, params={"secretId": name}, json=body, timeout=30)
    if created.status_code not in (200, 409):  # 409: it exists; a new version follows
        created.raise_for_status()
    data = base64.b64encode(value.encode()).decode()
    added = session.post(f"{base}/{name}:addVersion", json={"payload": {"data": data}}, timeout=30)
    added.raise_for_status()
