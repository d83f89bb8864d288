"""The node agent: probes the node every ``interval_s`` in a thread of its own and answers
``GET /v1/probe`` with the latest probe, its verdict and its age.

XIDs count from the agent's start, within a window (``xids.py``); ``POST /v1/xids/clear`` is
the operator's clear, once the GPU is repaired or reset: every XID seen so far stops counting,
and the answer says how many did (``{"cleared": n}``).

With a data cache (``meshctl.data.cache``), it also keeps the node's datasets:

- ``POST /v1/prefetch`` ``{"datasets": [{"location", "endpoint_url"}], "peers": [url]}``:
  fetch them into the cache in the background (202); the probe's ``cache`` says how it went;
- ``POST /v1/pins`` ``{"locations": [...]}``: what jobs on this node need (never evicted);
- ``GET /v1/data/<key>`` and ``GET /v1/data/<key>/files/<path>``: a complete entry's manifest
  and files, for the other nodes of the pool (peer fetch).

Every request needs the cluster's token (``Authorization: Bearer <token>``): without it, or
with another, the answer is 401. The agent runs nothing it is sent: it only reads its node,
and writes nothing but datasets into its cache folder. The HTTP server is the standard
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from meshctl.agent.probe import Limits, Probe
from meshctl.agent.sources import GpuReading, GpuSource, KernelLog, disks, nics
from meshctl.agent.xids import XidLog

if TYPE_CHECKING:
    from meshctl.data.cache import NodeCache

log = logging.getLogger("meshctl.agent")

PATH = "/v1/probe"
PREFETCH_PATH, PINS_PATH, DATA_PATH = "/v1/prefetch", "/v1/pins", "/v1/data"
CLEAR_PATH = "/v1/xids/clear"
MAX_BODY = 64 * 1024
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
        kernel: KernelLog | None,
        disk_paths: Sequence[str] = (),
        nic_names: Sequence[str] = (),
        clock: Callable[[], float] = time.time,
        cache: NodeCache | None = None,
    ) -> None:
        # kernel None: the log is never read (an emulated node's GPUs log no XID)
        self.node, self.limits, self.gpu, self.kernel = node, limits, gpu, kernel
        self.cache = cache
        self._fetches = ThreadPoolExecutor(max_workers=2, thread_name_prefix="prefetch")
        self.disk_paths, self.nic_names, self.clock = tuple(disk_paths), tuple(nic_names), clock
        self.started_s = clock()
        self.probes = 0
        self.xids = XidLog(limits.xid_window_s)
        self._latest: Probe | None = None
        # held while the XIDs are counted and the probe they go in is stored: a clear between
        # the two would be undone by the probe
        self._lock = threading.Lock()

    def probe(self) -> Probe:
        """Probe the node now; the result is also what the agent serves from now on."""
        started = time.perf_counter()
        reading = self.gpu.read() if self.gpu is not None else GpuReading()
        probe = Probe(
            node=self.node,
            at_s=0.0,
            took_ms=0.0,
            source=self.gpu.name if self.gpu is not None else "none",
            gpus=tuple(reading.gpus),
            lost=tuple(reading.lost),
            disks=tuple(disks(self.disk_paths)),
            nics=tuple(nics(self.nic_names)),
            gpu_error=reading.error,
        )
        kernel_log = self._read_kernel()
        with self._lock:
            now = self.clock()
            self.xids.nvml(reading.xids, now)
            took_ms = round((time.perf_counter() - started) * 1000, 3)
            probe = replace(self._counted(probe, kernel_log, now), at_s=now, took_ms=took_ms)
            self._latest = probe
            self.probes += 1
        return probe

    def follow_kernel_log(self) -> None:
        """Between probes: read the kernel log again, and serve a new XID at once."""
        if self.kernel is None:
            return
        kernel_log = self.kernel.read()
        with self._lock:
            latest = self._latest
            if latest is None:  # the first probe reads it first: the agent's start
                return
            fresh = self._counted(latest, kernel_log, self.clock())
            if fresh.xids != latest.xids or fresh.errors != latest.errors:
                self._latest = replace(fresh, at_s=self.clock())

    def _read_kernel(self) -> tuple[str, str | None] | None:
        return self.kernel.read() if self.kernel is not None else None

    def _counted(
        self, probe: Probe, kernel_log: tuple[str, str | None] | None, now: float
    ) -> Probe:
        """``probe`` with the XIDs that count now, after a read of the kernel log (one that
        failed leaves what the last read found, and says why; None: not read). Under
        ``_lock``."""
        text, why = kernel_log if kernel_log is not None else ("", None)
        if kernel_log is not None and why is None:
            self.xids.kernel(text, now)
        errors = (why,) if why is not None else ()
        return replace(probe, xids=self.xids.counted(now), errors=errors)

    def clear_xids(self) -> dict[str, Any]:
        """The operator's clear (``POST /v1/xids/clear``): every XID seen so far stops
        counting, those in the kernel log now included; served at once."""
        text, why = self.kernel.read() if self.kernel is not None else ("", None)
        with self._lock:
            now = self.clock()
            cleared = self.xids.clear(text if why is None else None, now)
            if self._latest is not None:
                self._latest = replace(self._latest, xids=self.xids.counted(now))
        log.info("XIDs cleared by the operator: %d counted", cleared)
        return {"cleared": cleared, "at_s": now}

    def answer(self) -> dict[str, Any]:
        """What ``GET /v1/probe`` returns: the latest probe, its verdict, and how old it is."""
        with self._lock:
            latest = self._latest
        probe = latest if latest is not None else self.probe()
        now = self.clock()
        found = probe.to_json(self.limits) | {
            "age_s": round(max(0.0, now - probe.at_s), 3),
            "agent": {"pid": os.getpid(), "started_at_s": self.started_s, "probes": self.probes},
        }
        if self.cache is not None:
            found["cache"] = self.cache.inventory()
        return found

    def prefetch(self, body: dict[str, Any]) -> list[str]:
        """Fetch the datasets named into the cache, in the background; the locations taken.
        ValueError when the request is malformed."""
        if self.cache is None:
            raise ValueError("this agent keeps no data cache (start it with --cache-dir)")
        datasets, peers = body.get("datasets"), body.get("peers", [])
        if not isinstance(datasets, list) or not isinstance(peers, list):
            raise ValueError('expected {"datasets": [{"location": ...}], "peers": [...]}')
        taken = []
        for d in datasets:
            if not isinstance(d, dict) or not isinstance(d.get("location"), str):
                raise ValueError('each dataset needs a "location" (a string)')
            endpoint = d.get("endpoint_url")
            peer_urls = [str(u) for u in peers]
            self._fetches.submit(self._fetch, d["location"], endpoint, peer_urls)
            taken.append(d["location"])
        return taken

    def _fetch(self, location: str, endpoint: str | None, peers: list[str]) -> None:
        from meshctl.data.cache import CacheError

        assert self.cache is not None
        try:
            self.cache.ensure(location, endpoint, peers)
        except CacheError as err:
            log.warning("prefetch of %s failed: %s", location, err)
        except Exception:
            log.exception("prefetch of %s failed", location)

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
            path = self.path.split("?", 1)[0]
            if path == PATH:
                self._send(200, agent.answer())
            elif path.startswith(DATA_PATH + "/") and agent.cache is not None:
                self._data(unquote(path[len(DATA_PATH) + 1 :]))
            else:
                self._send(404, {"error": f"the agent answers {PATH} and {DATA_PATH}/ only"})

        def _data(self, rest: str) -> None:
            """An entry's manifest (``<key>``) or one of its files (``<key>/files/<path>``)."""
            assert agent.cache is not None
            key, _, relative = rest.partition("/files/")
            entry = agent.cache.entry(key)
            if entry is None:
                self._send(404, {"error": f"{key}: not held here"})
                return
            if not rest.count("/"):
                self._send(200, entry.to_json())
                return
            found = agent.cache.file(key, relative)
            if found is None or ".." in relative.split("/"):
                self._send(404, {"error": f"{key}: no file {relative}"})
                return
            try:
                stream = found.open("rb")
            except OSError:
                self._send(404, {"error": f"{key}: {relative} is gone"})
                return
            with stream:
                size = os.fstat(stream.fileno()).st_size
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(size))
                self.end_headers()
                while chunk := stream.read(1024 * 1024):
                    self.wfile.write(chunk)

        def do_POST(self) -> None:
            if not self._authorised():
                return
            path = self.path.split("?", 1)[0]
            if path == CLEAR_PATH:  # no body: nothing it is sent is read
                self._send(200, agent.clear_xids())
                return
            if path not in (PREFETCH_PATH, PINS_PATH):
                posts = f"{PREFETCH_PATH}, {PINS_PATH} and {CLEAR_PATH}"
                self._send(405, {"error": f"the agent takes POST at {posts} only"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._send(413, {"error": f"a request body is at most {MAX_BODY} bytes"})
                return
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("expected a JSON object")
                if path == PINS_PATH:
                    locations = body.get("locations")
                    if agent.cache is None or not isinstance(locations, list):
                        raise ValueError('expected {"locations": [...]} and a data cache')
                    agent.cache.pin(str(x) for x in locations)
                    self._send(200, {"pinned": len(locations)})
                    return
                self._send(202, {"prefetching": agent.prefetch(body)})
            except ValueError as err:  # JSON errors are ValueErrors too
                self._send(400, {"error": str(err).splitlines()[0]})

        def _refuse(self) -> None:
            if self._authorised():
                self._send(
                    405, {"error": "the agent answers GET, and POST for its data cache and XIDs"}
                )

        do_PUT = do_DELETE = do_PATCH = _refuse

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
