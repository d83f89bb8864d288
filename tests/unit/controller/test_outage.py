"""The state store away: the controller's cycles fail on it and resume when it answers,
and the log says so once per outage, in a line, not a traceback per cycle."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from meshctl.controller.outage import Outage
from meshctl.state import MemoryStore, StoreError

from .test_loop import Clock, FakePool, controller

pytestmark = pytest.mark.unit


def test_an_outage_is_said_when_it_starts_and_when_it_ends() -> None:
    outage = Outage()
    assert outage.answered(10.0) is None  # no outage: nothing to say
    assert outage.failed("state store x: connection refused", 20.0) == (
        "state store unavailable: state store x: connection refused; the cycles resume when "
        "it answers"
    )
    assert outage.failed("state store x: connection refused", 21.0) is None
    assert outage.failed("state store x: the database system is starting up", 22.0) is None
    assert (
        outage.answered(25.5) == "state store answers again after 5.5 s (3 cycles failed meanwhile)"
    )
    assert outage.answered(26.0) is None
    assert outage.failed("disk I/O error", 30.0) is not None  # a new outage is said again


def test_a_loop_whose_store_is_away_logs_it_once_and_cycles_again_when_it_answers(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = controller(MemoryStore(), FakePool(), Clock())
    cycle, calls, stop = loop.cycle, list[int](), threading.Event()

    def a_store_away_for_three_cycles() -> Any:
        calls.append(1)
        if len(calls) <= 3:
            raise StoreError("state store postgresql://db: the database system is starting up")
        if len(calls) >= 5:
            stop.set()
        return cycle()

    monkeypatch.setattr(loop, "cycle", a_store_away_for_three_cycles)
    with caplog.at_level(logging.INFO, logger="meshctl.controller"):
        runner = threading.Thread(target=loop.run, args=(0.01, stop), kwargs={"watch": False})
        runner.start()
        runner.join(60)
    assert not runner.is_alive()
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert said[0] == (
        "WARNING",
        "state store unavailable: state store postgresql://db: the database system is starting "
        "up; the cycles resume when it answers",
    )
    assert said[1][0] == "INFO"
    assert said[1][1].startswith("state store answers again after ")
    assert said[1][1].endswith(" s (3 cycles failed meanwhile)")
    assert not [r for r in caplog.records if r.exc_info]  # no traceback
    assert len(said) == 2
