"""The node agent: probes the node every ``interval_s`` in a thread of its own and answers
``GET /v1/probe`` with the latest probe, its verdict and its age.

Every request needs the cluster's token (``Authorization: Bearer <token>``): without it, or
with another, the answer is 401. The agent only ever reads: it takes no other path, no other
method (405) and no body, and runs nothing it is sent. The HTTP server is the standard
library's (a thread per request); an answer is a copy of the latest probe, so a slow probe
never holds up the controller's pull.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from meshctl.agent.probe import Limits, Probe, Xid, unique, xids_in
from meshctl.agent.sources import GpuSource, KernelLog, disks, nics

log = logging.getLogger("meshctl.agent")

PATH = "/v1/probe"
DEFAULT_PORT = 9109
DEFAULT_INTERVAL_S = 5.0
KERNEL_EVERY_S = 0.5  # the kernel log is read this often between probes (XIDs)


class Agent:
    """What one node's probes found, probed again every ``interval_s`` by ``run``."""

    def __init__(
        self,
        node: str,
        limits: Limits,
        gpu: GpuSource | None,
        kernel: KernelLog,
        disk_paths: Sequence[str] = (),
        nic_names: Sequence[str] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.node, self.limits, self.gpu, self.kernel = node, limits, gpu, kernel
        self.disk_paths, self.nic_names, self.clock = tuple(disk_paths), tuple(nic_names), clock
        self.started_s = clock()
        self.probes = 0
        self._seen_xids: dict[Xid, None] = {}  # NVML events: kept once seen
        self._latest: Probe | None = None
        self._lock = threading.Lock()

    def probe(self) -> Probe:
        """Probe the node now; the result is also what the agent serves from now on."""
        started = time.perf_counter()
        gpus, lost, gpu_error = [], [], None
        if self.gpu is not None:
            reading = self.gpu.read()
            gpus, lost, gpu_error = reading.gpus, reading.lost, reading.error
            self._seen_xids.update(dict.fromkeys(reading.xids))
        probe = Probe(
            node=self.node,
            at_s=self.clock(),
            took_ms=0.0,
            source=self.gpu.name if self.gpu is not None else "none",
            gpus=tuple(gpus),
            lost=tuple(lost),
            disks=tuple(disks(self.disk_paths)),
            nics=tuple(nics(self.nic_names)),
            gpu_error=gpu_error,
        )
        probe = self._with_kernel_log(probe)
        probe = replace(probe, took_ms=round((time.perf_counter() - started) * 1000, 3))
        with self._lock:
            self._latest = probe
            self.probes += 1
        return probe

    def follow_kernel_log(self) -> None:
        """Between probes: read the kernel log again, and serve a new XID at once."""
        with self._lock:
            latest = self._latest
        if latest is None:
            return
        fresh = self._with_kernel_log(latest)
        if fresh.xids != latest.xids or fresh.errors != latest.errors:
            with self._lock:
                self._latest = replace(fresh, at_s=self.clock())

    def _with_kernel_log(self, probe: Probe) -> Probe:
        text, why = self.kernel.read()
        xids = unique([*self._seen_xids, *xids_in(text)])
        return replace(probe, xids=xids, errors=(why,) if why is not None else ())

    def answer(self) -> dict[str, Any]:
        """What ``GET /v1/probe`` returns: the latest probe, its verdict, and how old it is."""
        with self._lock:
            latest = self._latest
        probe = latest if latest is not None else self.probe()
        now = self.clock()
        return probe.to_json(self.limits) | {
            "age_s": round(max(0.0, now - probe.at_s), 3),
            "agent": {"pid": os.getpid(), "started_at_s": self.started_s, "probes": self.probes},
        }

    def run(self, interval_s: float, stop: threading.Event) -> None:
        """Probe every ``interval_s`` until ``stop`` is set; a failing probe is logged."""
        while not stop.is_set():
            try:
                self.probe()
            except Exception:
                log.exception("probe failed")
            stop.wait(interval_s)


def serve(agent: Agent, host: str, port: int, token: str) -> ThreadingHTTPServer:
    """An HTTP server for ``agent`` bound to ``host:port`` (port 0: any free one); the caller
    runs ``serve_forever``."""
    if not token:
        raise ValueError("the agent needs a token: it never answers without one")
    expected = f"Bearer {token}".encode()

    class Handler(BaseHTTPRequestHandler):
        server_version = "meshctl-agent"

        def _authorised(self) -> bool:
            given = self.headers.get("Authorization", "").encode()
            if hmac.compare_digest(given, expected):
                return True
            self._send(401, {"error": "a bearer token is required (the cluster's token)"})
            return False

        def do_GET(self) -> None:
            if not self._authorised():
                return
            if self.path.split("?", 1)[0] != PATH:
                self._send(404, {"error": f"the agent answers {PATH} only"})
                return
            self._send(200, agent.answer())

        def _refuse(self) -> None:
            if self._authorised():
                self._send(405, {"error": "the agent only answers GET"})

        do_POST = do_PUT = do_DELETE = do_PATCH = _refuse

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status == 401:
                self.send_header("WWW-Authenticate", "Bearer")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s " + format, self.address_string(), *args)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server
