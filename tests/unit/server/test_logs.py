"""A job's log read a piece at a time through the API server: what each read returns, and the
CLI's follower printing every byte once, across attempts."""

from __future__ import annotations

from typing import Any

import pytest

from meshctl.app.logs import log_slice

pytestmark = pytest.mark.unit

LOG = "step 1 ok\nloss 0.5 → 0.4\n".encode()
ARROW = LOG.index("→".encode())
SLICES = [
    # id, the log as read, offset asked, text returned, next offset
    pytest.param(LOG, 0, LOG.decode(), len(LOG), id="whole"),
    pytest.param(LOG, 10, LOG[10:].decode(), len(LOG), id="from-an-offset"),
    pytest.param(LOG, len(LOG), "", len(LOG), id="nothing-new"),
    pytest.param(LOG[: ARROW + 1], 0, LOG[:ARROW].decode(), ARROW, id="a-character-cut-in-two"),
    pytest.param(LOG[: ARROW + 2], ARROW, "", ARROW, id="still-cut"),
    pytest.param(LOG, ARROW, LOG[ARROW:].decode(), len(LOG), id="the-cut-one-whole"),
    pytest.param(b"short\n", 50, "short\n", 6, id="past-the-end-another-log"),
    pytest.param(b"\xff\xfebad\n", 0, "\ufffd\ufffdbad\n", 6, id="not-utf-8"),
    pytest.param(b"", 0, "", 0, id="empty"),
]


@pytest.mark.parametrize(("data", "offset", "text", "end"), SLICES)
def test_a_log_is_read_from_an_offset_to_its_last_whole_character(
    data: bytes, offset: int, text: str, end: int
) -> None:
    assert log_slice(data, offset) == (text, end)


class Server:
    """An API server whose job's log grows between reads, and gets a second attempt."""

    def __init__(self, reads: list[tuple[str, int, bytes]]) -> None:
        self.reads = reads  # the job's state, its latest attempt, that attempt's log, per read
        self.logs: dict[int, bytes] = {}
        self.state, self.asked = "running", 0

    def call(self, method: str, path: str, **query: Any) -> dict[str, Any]:
        if path == "/v1/jobs/j":
            self.state, number, log = self.reads[min(self.asked, len(self.reads) - 1)]
            self.asked += 1
            self.logs[number] = log
            return {"id": "j-1", "state": self.state}
        if path == "/v1/jobs/j-1":
            return self.call(method, "/v1/jobs/j")
        assert path == "/v1/jobs/j-1/logs", path
        number = query["attempt"] or max(self.logs)
        text, end = log_slice(self.logs[number], query["offset"])
        return {"attempt": number, "text": text, "offset": end}


def test_following_through_the_server_prints_each_byte_once_across_attempts(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from meshctl.cli import jobs_cmd

    monkeypatch.setattr(jobs_cmd.time, "sleep", lambda _: None)
    first, second = "one\ntwo → ".encode(), b"again\n"
    server = Server([
        ("running", 1, b""),
        ("running", 1, first[:5]),
        ("running", 1, first[:-2]),  # the arrow cut in two
        ("running", 1, first),
        ("running", 2, second[:3]),  # requeued: a new attempt's log
        ("succeeded", 2, second),
    ])  # fmt: skip
    jobs_cmd._follow_remote(server, "j", None)  # type: ignore[arg-type]
    assert capsys.readouterr().out == (first + second).decode()
