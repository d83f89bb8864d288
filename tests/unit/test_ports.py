"""Ports handed out to servers started on this machine (``meshctl.host.ports``): below the kernel's
ephemeral range, never one a socket holds, never the same one twice while leased, across
processes."""

from __future__ import annotations

import multiprocessing
import socket
from pathlib import Path

import pytest

from meshctl.host.ports import PortLeases, bindable, span

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("ephemeral", "expected"),
    [
        ("32768\t60999\n", range(20000, 32768)),
        ("10000 60999", range(61000, 65536)),
        (None, range(20000, 32768)),
    ],
    ids=["Linux's default: below it", "no room below: above it", "unreadable: the default"],
)
def test_ports_are_drawn_outside_the_kernels_ephemeral_range(
    tmp_path: Path, ephemeral: str | None, expected: range
) -> None:
    range_file = tmp_path / "ip_local_port_range"
    if ephemeral is not None:
        range_file.write_text(ephemeral)
    assert span(range_file) == expected


def _free_run(count: int) -> range:
    """``count`` consecutive ports in the span that nothing holds now."""
    ports = span()
    for start in range(ports.start, ports.stop - count, 97):
        if all(bindable(p) for p in range(start, start + count)):
            return range(start, start + count)
    raise AssertionError("no free run of ports")


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_a_leased_port_is_not_handed_out_again_until_its_lease_ends(tmp_path: Path) -> None:
    ports, clock = _free_run(4), _Clock()
    leases = PortLeases(tmp_path / "ports.json", ports, lease_s=600, clock=clock)
    first = leases.take(2)
    second = PortLeases(tmp_path / "ports.json", ports, lease_s=600, clock=clock).take(2)
    assert sorted(first + second) == list(ports)
    with pytest.raises(OSError, match="no free port"):
        leases.take(1)
    clock.now += 601
    assert sorted(leases.take(4)) == list(ports)  # all four again


def test_a_port_a_server_listens_on_is_never_handed_out(tmp_path: Path) -> None:
    ports = _free_run(2)
    with socket.socket() as server:
        server.bind(("127.0.0.1", ports[0]))
        server.listen()
        taken = PortLeases(tmp_path / "ports.json", ports).take(1)
    assert taken == [ports[1]]


def _take(path: str, start: int, stop: int, count: int) -> list[int]:
    return PortLeases(Path(path), range(start, stop)).take(count)


def test_processes_taking_ports_at_once_never_get_the_same_one(tmp_path: Path) -> None:
    ports = _free_run(60)
    args = [(str(tmp_path / "ports.json"), ports.start, ports.stop, 15)] * 4
    pool = multiprocessing.get_context("fork").Pool(4)
    try:
        taken = [p for got in pool.starmap(_take, args) for p in got]
    finally:
        pool.close()  # and let the workers end: no SIGTERM, whatever handles it here
        pool.join()
    assert len(taken) == len(set(taken)) == 60
