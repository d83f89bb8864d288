"""A gate in front of an HTTP server (a Ray dashboard) that answers one kind of request
itself, with an error, until opened: the test's way to start a service late. Everything else
is forwarded unchanged.

    with Gate(cluster.dashboard) as gate:     # gate.address: give it to the client
        gate.refuse("POST", "/api/jobs/", 500, NO_AGENT)  # a head whose job agent is not up
        ...
        gate.open()                            # the job agent is up
        gate.refused                           # the requests answered with the error
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

NO_AGENT = "No available agent to submit job, please try again later"  # Ray's words


class Gate:
    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.rule: tuple[str, str, int, str] | None = None  # method, path, status, body
        self.refused: list[tuple[str, str]] = []
        self.server: ThreadingHTTPServer | None = None
        self.address = ""

    def refuse(self, method: str, path: str, status: int, body: str) -> None:
        self.rule = (method, path, status, body)

    def open(self) -> None:
        self.rule = None

    def __enter__(self) -> Gate:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.address = f"http://127.0.0.1:{self.server.server_address[1]}"
        return self

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        gate = self

        class Forward(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._pass()

            def do_HEAD(self) -> None:
                self._pass()

            def do_PUT(self) -> None:
                self._pass()

            def do_POST(self) -> None:
                self._pass()

            def do_DELETE(self) -> None:
                self._pass()

            def _pass(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                rule = gate.rule
                if rule and self.command == rule[0] and self.path.split("?")[0] == rule[1]:
                    gate.refused.append((self.command, self.path))
                    self._send(rule[2], rule[3].encode(), "text/plain")
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                request = urllib.request.Request(
                    gate.target + self.path, data=body or None, headers=headers,
                    method=self.command,
                )  # fmt: skip
                try:
                    with urllib.request.urlopen(request, timeout=60) as reply:
                        self._send(reply.status, reply.read(), reply.headers.get("Content-Type"))
                except urllib.error.HTTPError as err:
                    self._send(err.code, err.read(), err.headers.get("Content-Type"))
                except OSError:  # nothing answers behind the gate: nor does the gate
                    self.close_connection = True

            def _send(self, status: int, payload: bytes, ctype: str | None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype or "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

        return Forward
