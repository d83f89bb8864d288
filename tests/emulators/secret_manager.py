"""Secret Manager's REST API (v1), the subset meshctl uses, served by the GCE emulator beside
Compute (``GceEmulator.secrets``): no public emulator exists.

  POST /v1/projects/{p}/secrets?secretId=S         create; 409 ALREADY_EXISTS when it exists
  POST /v1/projects/{p}/secrets/{s}:addVersion     {"payload": {"data": base64}}; 404 if no secret
  GET  /v1/projects/{p}/secrets/{s}/versions/latest:access   the newest version's payload

``value(project, name)`` reads the newest version back (decoded) for a test;
``versions(project, name)`` counts them (a rotation adds one).
"""

from __future__ import annotations

import base64
from typing import Any

from tests.emulators.gce_resources import ApiError

Json = dict[str, Any]
_S = r"/v1/projects/(?P<project>[^/]+)/secrets"
ROUTES = [
    ("POST", _S, "create"),
    ("POST", _S + r"/(?P<secret>[^/:]+):addVersion", "add_version"),
    ("GET", _S + r"/(?P<secret>[^/:]+)/versions/latest:access", "access"),
]


class SecretManager:
    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], list[str]] = {}  # (project, name) -> base64 data

    def create(self, project: str, query: dict[str, str], body: Json) -> Json:
        name = query.get("secretId", "")
        if not name:
            raise ApiError(400, "badRequest", "secretId is required")
        if (project, name) in self.secrets:
            raise ApiError(
                409, "alreadyExists", f"Secret [projects/{project}/secrets/{name}] already exists."
            )
        self.secrets[(project, name)] = []
        return {"name": f"projects/{project}/secrets/{name}", "labels": body.get("labels", {})}

    def add_version(self, project: str, secret: str, query: dict[str, str], body: Json) -> Json:
        versions = self._of(project, secret)
        versions.append(str(body.get("payload", {}).get("data", "")))
        return {"name": f"projects/{project}/secrets/{secret}/versions/{len(versions)}"}

    def access(self, project: str, secret: str, query: dict[str, str], body: Json) -> Json:
        versions = self._of(project, secret)
        if not versions:
            raise ApiError(404, "notFound", f"Secret [{secret}] has no version.")
        name = f"projects/{project}/secrets/{secret}/versions/{len(versions)}"
        return {"name": name, "payload": {"data": versions[-1]}}

    def value(self, project: str, name: str) -> str | None:
        versions = self.secrets.get((project, name))
        return base64.b64decode(versions[-1]).decode() if versions else None

    def versions(self, project: str, name: str) -> int:
        return len(self.secrets.get((project, name), []))

    def _of(self, project: str, secret: str) -> list[str]:
        if (project, secret) not in self.secrets:
            raise ApiError(
                404, "notFound", f"Secret [projects/{project}/secrets/{secret}] not found."
            )
        return self.secrets[(project, secret)]
