"""How a sweep is shown and written: ``mean ± half-width`` per unit, sweep.json and a chart per
figure; and how the Ray side words a run that did not finish (without a cluster: Ray's
errors are told apart by name)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from meshctl.cli.sim.view import shown
from meshctl.sim.run import write_sweep
from meshctl.sim.run.rayrun import attempts_of, embedded, reason_of
from meshctl.sim.run.sweep import Estimate, Finished, RunKey, Sweep

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("estimate", "unit", "text"),
    [
        pytest.param(Estimate(8, 0.4734, 0.0123), "share", "47.3% ± 1.2 pts", id="share"),
        pytest.param(Estimate(8, 5400.0, 600.0), "s", "90.0 min ± 10.0 min", id="seconds"),
        pytest.param(Estimate(8, 81397.0, 2500.4), "usd", "$81,397 ± $2,500", id="usd"),
        pytest.param(Estimate(8, 1089.25, 40.0), "hours", "1,089.2 h ± 40 h", id="hours"),
        pytest.param(Estimate(2, 78.5, 133.4), "count", "78.5 ± 133.4", id="count"),
        pytest.param(Estimate(4, 0.0, 0.0), "count", "0 ± 0", id="zero"),
        # one run: the value alone, as compare shows it
        pytest.param(Estimate(1, 2031.0, None), "count", "2,031", id="one-run"),
        pytest.param(Estimate(1, 0.995, None), "share", "99.5%", id="one-share"),
    ],
)
def test_shown(estimate, unit, text) -> None:
    assert shown(estimate, unit) == text


def test_write_sweep_writes_sorted_json_and_a_chart_per_figure(tmp_path: Path) -> None:
    finished = tuple(
        Finished(RunKey(p, "synthetic", s), {"goodput": g, "preemptions": s})
        for p, g in (("a", 0.9), ("b", 0.95)) for s in (0, 1)
    )  # fmt: skip
    swept = Sweep(("a", "b"), ("synthetic",), (0, 1), finished)
    written = write_sweep(swept, tmp_path)
    text = (tmp_path / "sweep.json").read_text()
    assert list(json.loads(text)) == ["figures", "runs", "sweep", "unfinished"]  # sorted
    charts = sorted(p.name for p in written if p.suffix == ".png")
    assert charts == ["goodput.png", "preemptions.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in written if p.suffix == ".png")


class WorkerCrashedError(Exception):
    """Named as Ray's: the worker running the task died."""


class RayTaskError(Exception):  # Ray's wrapper of what the task raised, its ``cause``
    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"ray wrapper\nTraceback ...\n{cause}")
        self.cause = cause


@pytest.mark.parametrize(
    ("error", "reason", "attempts"),
    [
        pytest.param(
            WorkerCrashedError("The worker died unexpectedly.\nCheck the logs."),
            "its worker died (WorkerCrashedError): The worker died unexpectedly.",
            4,  # every try: 1 + 3 retries
            id="worker-died",
        ),
        pytest.param(
            RayTaskError(ValueError("no trace named nope\nmore")),
            "ValueError: no trace named nope",
            1,  # the run's own error: not retried
            id="run-raised",
        ),
        pytest.param(RuntimeError(""), "RuntimeError: RuntimeError", 1, id="no-words"),
    ],
)
def test_an_unfinished_run_says_why_in_one_line(error, reason, attempts) -> None:
    assert reason_of(error) == reason
    assert attempts_of(error, retries=3) == attempts


def test_no_embedded_pool_up_is_none(tmp_path: Path) -> None:
    assert embedded(tmp_path / "run", ["onprem"]) is None
