"""The load generator against real loopback HTTP servers: exact counts, no timing asserted."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from meshctl import loadgen
from meshctl.loadgen import Outcome
from tests.conftest import closed_port

pytestmark = pytest.mark.unit


class Handler(BaseHTTPRequestHandler):
    """200, or 503 for every ``fail_every``-th request (by arrival); ``/slow`` never answers
    in time."""

    counter = itertools.count(1)
    fail_every = 0
    bodies: list[bytes] = []  # noqa: RUF012  (one server per test: reset by the fixture)
    release = threading.Event()

    def do_GET(self) -> None:
        if self.path == "/slow":
            self.release.wait(5)
        n = next(self.counter)
        failing = self.fail_every and n % self.fail_every == 0
        self.send_response(503 if failing else 200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def do_POST(self) -> None:
        self.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.do_GET()

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, type[Handler]]]:
    class handler(Handler):  # state of its own
        counter = itertools.count(1)
        bodies: list[bytes] = []  # noqa: RUF012
        release = threading.Event()

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    finally:
        handler.release.set()
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize(
    ("schedule", "count"),
    [
        ([(1, 5)], 5),
        ([(1, 5), (2, 10)], 25),  # 5 + 2 s x 10
        ([(0.5, 3)], 2),  # 1.5 rounded to even
        ([(1, 0), (1, 4)], 4),  # a silent step only shifts the next
        ([], 0),
    ],
)
def test_a_schedule_sends_duration_times_rate_evenly_spaced(
    schedule: list[tuple[float, float]], count: int
) -> None:
    times = loadgen.arrivals(schedule)
    assert len(times) == count
    assert times == sorted(times)


def test_arrivals_of_a_step_start_where_the_previous_step_ends() -> None:
    assert loadgen.arrivals([(1, 2), (1, 4)]) == [0.0, 0.5, 1.0, 1.25, 1.5, 1.75]


def test_all_ok_against_a_server_that_answers_200(server: tuple[str, type[Handler]]) -> None:
    url, _ = server
    result = loadgen.run(url, [(1, 20)], timeout_s=5)
    assert (result.total, result.ok, result.failed) == (20, 20, 0)
    assert result.failures == {}
    assert [s.sent for s in result.seconds] == [20]
    assert result.p50_ms is not None
    assert result.p99_ms is not None
    assert result.p50_ms <= result.p99_ms


def test_503s_are_counted_as_failures_exactly(server: tuple[str, type[Handler]]) -> None:
    url, handler = server
    handler.fail_every = 4
    result = loadgen.run(url, [(1, 10), (1, 10)], timeout_s=5)
    assert (result.total, result.ok, result.failed) == (20, 15, 5)
    assert result.failures == {"HTTP 503": 5}
    assert [s.sent for s in result.seconds] == [10, 10]
    assert sum(s.failed for s in result.seconds) == 5
    assert all(s.ok + s.failed == s.sent for s in result.seconds)


def test_a_request_past_its_timeout_fails(server: tuple[str, type[Handler]]) -> None:
    url, _ = server
    result = loadgen.run(url + "/slow", [(1, 3)], timeout_s=0.3)
    assert (result.total, result.failed) == (3, 3)
    assert result.failures == {"timeout": 3}
    assert result.p50_ms is None


def test_a_refused_connection_fails() -> None:
    result = loadgen.run(f"http://127.0.0.1:{closed_port()}/", [(1, 4)], timeout_s=2)
    assert (result.total, result.failed) == (4, 4)
    assert all("refused" in why.lower() for why in result.failures), result.failures


def test_a_body_is_posted(server: tuple[str, type[Handler]]) -> None:
    url, handler = server
    result = loadgen.run(url, [(1, 2)], body=b'{"x": [1]}', timeout_s=5)
    assert result.ok == 2
    assert handler.bodies == [b'{"x": [1]}'] * 2


def test_stop_ends_the_schedule_early(server: tuple[str, type[Handler]]) -> None:
    url, _ = server
    stop = threading.Event()
    stop.set()
    result = loadgen.run(url, [(60, 10)], stop=stop)
    assert result.total == 0


def test_per_second_percentiles_are_of_the_ok_requests_only() -> None:
    outcomes = [Outcome(0.1, True, 10.0, ""), Outcome(0.5, True, 30.0, ""),
                Outcome(0.9, False, 1.0, "HTTP 503"), Outcome(2.2, True, 5.0, "")]  # fmt: skip
    result = loadgen.summarize(outcomes)
    first, empty, third = result.seconds
    assert (first.sent, first.ok, first.failed, first.p50_ms, first.p99_ms) == (3, 2, 1, 10, 30)
    assert (empty.sent, empty.p50_ms) == (0, None)
    assert (third.sent, third.p50_ms) == (1, 5.0)
    assert (result.total, result.failed, result.p50_ms) == (4, 1, 10.0)


def test_the_command_prints_the_result_as_json(
    server: tuple[str, type[Handler]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = server
    assert loadgen.main([url, "--step", "1:4", "--step", "0.5:4", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["total"], printed["ok"], printed["failed"]) == (6, 6, 0)
    assert [s["sent"] for s in printed["seconds"]] == [4, 2]


@pytest.mark.parametrize("text", ["10", "a:b", "1:2:3"])
def test_a_bad_step_is_refused(text: str) -> None:
    with pytest.raises(SystemExit):
        loadgen.main(["http://127.0.0.1:1/", "--step", text])
