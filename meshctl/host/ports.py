"""Ports for the servers meshctl starts on this machine (a local pool's Ray nodes, the emulated
pools, Ray Serve's proxy; the test suite's emulators and databases), each free when it is handed
out and still free when its server binds it seconds later.

A port the kernel hands out for ``bind(0)`` is in its ephemeral range, the range it also draws
the local port of every outgoing connection from: between a port chosen so and a server's bind
(a Ray node binds its agent's ports only after its raylet is up, ten seconds on a loaded
machine), any connection could take it, and Ray's dashboard agent, refused its port, stays up
without the job API ("No available agent to submit job"). So ports are drawn from below that
range, where no connection is given a port, and each is leased for ``LEASE_S`` in a file that
every process here shares (under a lock), so two servers starting at once never get the same
one. Standard library only."""

from __future__ import annotations

import fcntl
import json
import os
import random
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

LEASE_S = 600.0  # a port handed out is not handed out again for this long: ample to bind it
FIRST = 20000  # Ray's workers take 10002-19999 by default (--min/max-worker-port)
RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LEASES = Path(tempfile.gettempdir()) / f"meshctl-ports-{os.getuid()}.json"  # one per user


def free_port() -> int:
    """A port nothing on this machine listens on, nor will be handed out again soon."""
    [port] = free_ports(1)
    return port


def free_ports(count: int) -> list[int]:
    return PortLeases(LEASES, span()).take(count)


def span(range_file: Path = RANGE_FILE) -> range:
    """Ports below the kernel's ephemeral range, from FIRST; above it where there is no room
    below (a machine whose ephemeral range starts low)."""
    try:
        low, high = (int(p) for p in range_file.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    if low - FIRST >= 1000:
        return range(FIRST, low)
    return range(high + 1, 65536)


class PortLeases:
    """The ports handed out in the last ``lease_s``, in ``path`` (JSON: port -> when it may be
    handed out again), read and written under an exclusive lock on ``path`` + ``.lock``."""

    def __init__(
        self,
        path: Path,
        ports: range,
        lease_s: float = LEASE_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path, self.ports, self.lease_s, self.clock = path, ports, lease_s, clock

    def take(self, count: int) -> list[int]:
        lock = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            now = self.clock()
            leased = {p: t for p, t in self._read().items() if t > now}
            taken = self._draw(count, leased)
            leased.update((p, now + self.lease_s) for p in taken)
            self._write(leased)
            return taken
        finally:
            os.close(fd)  # and with it the lock

    def _draw(self, count: int, leased: dict[int, float]) -> list[int]:
        taken: list[int] = []
        tries = 0
        while len(taken) < count:
            tries += 1
            if tries > 20 * len(self.ports):
                raise OSError(f"no free port in {self.ports.start}-{self.ports.stop - 1}")
            port = random.choice(self.ports)
            if port not in leased and port not in taken and bindable(port):
                taken.append(port)
        return taken

    def _read(self) -> dict[int, float]:
        try:
            raw = json.loads(self.path.read_text())
            return {int(p): float(t) for p, t in raw.items()}
        except (OSError, ValueError, AttributeError):
            return {}  # none yet, or a file cut short: the bind check still holds

    def _write(self, leased: dict[int, float]) -> None:
        partial = self.path.with_name(f"{self.path.name}.{os.getpid()}")
        partial.write_text(json.dumps({str(p): round(t, 1) for p, t in sorted(leased.items())}))
        os.replace(partial, self.path)


def bindable(port: int) -> bool:
    """Whether a server could bind ``port`` on every address now (no socket holds it: listening
    or connected, on loopback or the node's address)."""
    with socket.socket() as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True
