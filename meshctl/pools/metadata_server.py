"""An instance-metadata endpoint for emulated cloud instances: what the cloud's own metadata
service tells an instance about itself, for several instances on one machine, each under a
path of its own (``http://127.0.0.1:PORT/<key>``, given to its startup script as
``MESHCTL_METADATA_URL``). It serves the subset ``meshctl.boot.metadata`` reads:

- AWS (IMDSv2): ``PUT /latest/api/token`` (a session token, then required in the
  ``X-aws-ec2-metadata-token`` header), ``GET /latest/meta-data/instance-id``,
  ``placement/availability-zone``, ``placement/region``, ``local-ipv4``;
- GCE (``Metadata-Flavor: Google`` required): ``/computeMetadata/v1/instance/name``, ``zone``
  (``projects/<number>/zones/<zone>``), ``network-interfaces/0/ip``,
  ``service-accounts/default/token``, ``/computeMetadata/v1/project/project-id``.

Anything else answers 404, and a request without the header its flavour needs 401 (AWS) or
403 (GCE), as the real services do.
"""

from __future__ import annotations

import json
import secrets
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True, slots=True)
class Entry:
    provider: str
    instance_id: str  # GCE: "<zone>/<name>"
    zone: str
    region: str  # AWS region; GCE: the project
    address: str


class MetadataServer:
    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        self._tokens: set[str] = set()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def url(self, key: str, entry: Entry) -> str:
        """Serve ``entry`` under ``key`` (started on first use); its base URL."""
        with self._lock:
            if self._server is None:
                self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
                threading.Thread(target=self._server.serve_forever, daemon=True).start()
            self.entries[key] = entry
            port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}/{key}"

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def answer(self, method: str, path: str, headers: Any) -> tuple[int, str]:
        key, _, rest = path.lstrip("/").partition("/")
        entry = self.entries.get(key)
        if entry is None:
            return 404, "not found"
        if entry.provider == "aws":
            return self._aws(method, "/" + rest, headers, entry)
        return self._gce("/" + rest, headers, entry)

    def _aws(self, method: str, path: str, headers: Any, entry: Entry) -> tuple[int, str]:
        if method == "PUT" and path == "/latest/api/token":
            token = secrets.token_urlsafe(24)
            self._tokens.add(token)
            return 200, token
        if headers.get("X-aws-ec2-metadata-token") not in self._tokens:
            return 401, "unauthorized"
        found = {
            "/latest/meta-data/instance-id": entry.instance_id,
            "/latest/meta-data/placement/availability-zone": entry.zone,
            "/latest/meta-data/placement/region": entry.region,
            "/latest/meta-data/local-ipv4": entry.address,
        }
        return (200, found[path]) if path in found else (404, "not found")

    def _gce(self, path: str, headers: Any, entry: Entry) -> tuple[int, str]:
        if headers.get("Metadata-Flavor") != "Google":
            return 403, "Missing Metadata-Flavor:Google header."
        token = json.dumps({"access_token": "emulated", "expires_in": 3599, "token_type": "Bearer"})
        base = "/computeMetadata/v1"
        found = {
            f"{base}/instance/name": entry.instance_id.rsplit("/", 1)[-1],
            f"{base}/instance/zone": f"projects/000000000000/zones/{entry.zone}",
            f"{base}/instance/network-interfaces/0/ip": entry.address,
            f"{base}/instance/service-accounts/default/token": token,
            f"{base}/project/project-id": entry.region,
        }
        return (200, found[path]) if path in found else (404, "not found")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._reply(*server.answer("GET", self.path, self.headers))

            def do_PUT(self) -> None:
                self._reply(*server.answer("PUT", self.path, self.headers))

            def _reply(self, status: int, text: str) -> None:
                body = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler
