"""The client's side of a shared mesh: which API server to talk to, and talking to it.

``MESHCTL_SERVER`` and ``MESHCTL_TOKEN`` name the server and the token; else what ``meshctl
login`` saved in ``$MESHCTL_HOME/credentials.json`` (0600). With neither, every command works
locally, on the state store in the home, as it always has. ``MESHCTL_CA_FILE``: the
certificate authority of a server whose certificate is not signed by a public one.

The server's answers are the CLI's own ``-o json`` shapes, so a remote command renders them as
a local one does. A 4xx answer is the request's fault: its one line, exit 2; a server that is
down or fails is exit 1.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from meshctl.errors import CommandError, InvalidRequestError

CREDENTIALS = "credentials.json"
TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Remote:
    """An API server and the token to call it with."""

    url: str
    token: str

    def call(
        self, method: str, path: str, body: Any = None, timeout_s: float = TIMEOUT_S, **query: Any
    ) -> Any:
        """The JSON answer of ``method path``; errors as exit 2 (4xx) or exit 1."""
        params = {k: v for k, v in query.items() if v is not None}
        url = self.url.rstrip("/") + path + (f"?{urllib.parse.urlencode(params)}" if params else "")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s, context=_tls()) as answer:
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as err:
            raise _refusal(self.url, err) from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            if data is not None and isinstance(reason, BrokenPipeError | ConnectionResetError):
                raise CommandError(
                    f"server {self.url}: it closed the connection while the request "
                    f"({len(data) / 2**20:.1f} MiB) was sent: over its --max-upload?"
                ) from None
            raise CommandError(f"server {self.url}: cannot reach it: {reason}") from None


def job_path(ref: str, *rest: str) -> str:
    """``/v1/jobs/REF[/REST...]``, the reference quoted whole (an id, a name, a prefix)."""
    return resource_path("jobs", ref, *rest)


def resource_path(collection: str, ref: str, *rest: str) -> str:
    """``/v1/COLLECTION/REF[/REST...]``, the reference quoted whole."""
    return "/".join([f"/v1/{collection}", urllib.parse.quote(ref, safe=""), *rest])


def _tls() -> ssl.SSLContext | None:
    cafile = os.environ.get("MESHCTL_CA_FILE")
    return ssl.create_default_context(cafile=cafile) if cafile else None


def _refusal(url: str, err: urllib.error.HTTPError) -> Exception:
    try:
        said = json.loads(err.read()).get("error") or err.reason
    except (ValueError, AttributeError, OSError):
        said = err.reason
    if err.code == 401:
        return InvalidRequestError(f"server {url}: {said}")
    if 400 <= err.code < 500:
        return InvalidRequestError(f"{said}")
    return CommandError(f"server {url}: HTTP {err.code}: {said}")


def remote(home: Path) -> Remote | None:
    """The server this CLI talks to, or None: local."""
    url, token = os.environ.get("MESHCTL_SERVER", ""), os.environ.get("MESHCTL_TOKEN", "")
    if url or token:
        if not (url and token):
            missing = "MESHCTL_TOKEN" if url else "MESHCTL_SERVER"
            raise InvalidRequestError(f"{missing}: set it too, or unset both to work locally")
        return Remote(_checked_url("MESHCTL_SERVER", url), token)
    saved = home / CREDENTIALS
    try:
        raw = json.loads(saved.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise InvalidRequestError(f"{saved}: unreadable ({err}); meshctl login again") from None
    if not isinstance(raw, dict) or not raw.get("server") or not raw.get("token"):
        raise InvalidRequestError(f"{saved}: expected server and token; meshctl login again")
    return Remote(str(raw["server"]), str(raw["token"]))


def _checked_url(field: str, url: str) -> str:
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise InvalidRequestError(f"{field}: expected http(s)://HOST:PORT, got {url!r}")
    return url.rstrip("/")


def login(home: Path, url: str, token: str) -> dict[str, Any]:
    """Check the token against the server, then save both (0600); who the token is."""
    from meshctl.state.private import private_home, write_private

    found = Remote(_checked_url("URL", url), token)
    who: dict[str, Any] = found.call("GET", "/v1/whoami")
    private_home(home)
    write_private(home / CREDENTIALS, json.dumps({"server": found.url, "token": token}))
    return who


def logout(home: Path) -> bool:
    """Forget the saved server and token; whether there were any."""
    try:
        (home / CREDENTIALS).unlink()
    except FileNotFoundError:
        return False
    return True


def pack(folder: Path, ignored: Sequence[str]) -> str:
    """A folder as the body's ``working_dir``: base64 of a gzipped tar of its contents, less
    what matches ``ignored`` (the patterns a local submission leaves out too)."""
    from meshctl.controller.packages import archive

    return base64.b64encode(archive(folder, ignored)).decode()
