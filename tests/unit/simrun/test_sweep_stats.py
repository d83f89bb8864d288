"""A sweep's statistics (``meshctl.sim.run.sweep``): Student t intervals checked by hand, the
figures read from reports, the summary per policy set, the document, the seeds flag; and
properties: the mean lies in its interval, identical values give a zero-width interval, a
shift moves the mean and not the width."""

from __future__ import annotations

import ast
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshctl.sim.run import sweep
from meshctl.sim.run.sweep import (
    Estimate,
    Finished,
    RunKey,
    Sweep,
    Unfinished,
    document,
    estimate,
    parse_seeds,
    summary,
    t_975,
    value_of,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("values", "n", "mean", "half_width"),
    [
        # one run: its value, no interval
        pytest.param([4.0], 1, 4.0, None, id="one"),
        # mean 2, s = sqrt(2) (deviations -1, 1 squared, over 1), t(1) = 12.7062:
        # 12.7062 * 1.4142 / 1.4142 = 12.7062
        pytest.param([1.0, 3.0], 2, 2.0, 12.7062, id="two"),
        # mean 3, s = sqrt((4 + 1 + 0 + 1 + 4) / 4) = 1.5811, t(4) = 2.7764:
        # 2.7764 * 1.5811 / sqrt(5) = 1.9632
        pytest.param([1.0, 2.0, 3.0, 4.0, 5.0], 5, 3.0, 1.9632, id="five"),
        # identical: zero width, whatever n
        pytest.param([0.25] * 7, 7, 0.25, 0.0, id="identical"),
    ],
)
def test_estimate_by_hand(values, n, mean, half_width) -> None:
    e = estimate(values)
    assert (e.n, e.mean) == (n, pytest.approx(mean))
    if half_width is None:
        assert e.half_width is None
        assert e.low is None
        assert e.high is None
    else:
        assert e.half_width == pytest.approx(half_width, abs=1e-4)
        assert e.low == pytest.approx(mean - half_width, abs=1e-4)


@pytest.mark.parametrize(
    ("df", "quantile"),
    [
        pytest.param(1, 12.7062, id="1"),
        pytest.param(9, 2.2622, id="9"),
        pytest.param(30, 2.0423, id="30-table"),
        # beyond the table, the expansion against published values
        pytest.param(31, 2.0395, id="31"),
        pytest.param(40, 2.0211, id="40"),
        pytest.param(60, 2.0003, id="60"),
        pytest.param(120, 1.9799, id="120"),
        pytest.param(10**6, 1.9600, id="normal"),
    ],
)
def test_t_quantile(df, quantile) -> None:
    assert t_975(df) == pytest.approx(quantile, abs=1e-4)


def test_t_quantile_needs_a_degree_of_freedom() -> None:
    with pytest.raises(ValueError, match="expected 1 or more, got 0"):
        t_975(0)


REPORT: dict[str, Any] = {
    "meta": {"seed": 1},
    "jobs": {"arrived": 10, "finished": 9},
    "utilisation": {"onprem": 0.5},
    "classes": {
        "critical": {"queueing_delay": {"n": 0, "mean_s": 0.0}},
        "all": {"queueing_delay": {"n": 9, "mean_s": 30.0}},
    },
    "goodput": 0.99,
    "flag": True,
}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        pytest.param("jobs.finished", 9.0, id="nested"),
        pytest.param("goodput", 0.99, id="top"),
        pytest.param("classes.all.queueing_delay.mean_s", 30.0, id="class"),
        # a class with no jobs has no wait, not a wait of 0 s
        pytest.param("classes.critical.queueing_delay.mean_s", None, id="no-jobs"),
        pytest.param("data.stall_share", None, id="missing"),
        pytest.param("meta", None, id="not-a-number"),
        pytest.param("flag", None, id="bool"),
    ],
)
def test_value_of(key, value) -> None:
    assert value_of(REPORT, key) == value


def report(utilisation: float, spend: float, cloud: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"utilisation": {"onprem": utilisation}}
    if cloud:
        body["cloud_spend_usd"] = {"total": spend}
    return body


def two_sets() -> Sweep:
    """Two policy sets, three seeds; one run of burst did not finish."""
    finished = (
        Finished(RunKey("onprem", "philly", 0), report(0.5, 0.0)),
        Finished(RunKey("onprem", "philly", 1), report(0.6, 0.0)),
        Finished(RunKey("onprem", "philly", 2), report(0.7, 0.0)),
        Finished(RunKey("burst", "philly", 2), report(0.4, 300.0), attempts=2),
        Finished(RunKey("burst", "philly", 0), report(0.4, 100.0)),
    )
    lost = (Unfinished(RunKey("burst", "philly", 1), "its worker died", 4),)
    return Sweep(("onprem", "burst"), ("philly",), (0, 1, 2), finished, lost, {"days": 1.0})


def test_summary_is_per_figure_and_policy_set() -> None:
    rows = {figure.key: by for figure, by in summary(two_sets())}
    assert list(rows) == ["utilisation.onprem", "cloud_spend_usd.total"]  # FIGURES' order
    onprem = rows["utilisation.onprem"]["onprem"]
    assert (onprem.n, onprem.mean) == (3, pytest.approx(0.6))
    # s = 0.1, t(2) = 4.3027: 4.3027 * 0.1 / sqrt(3) = 0.2484
    assert onprem.half_width == pytest.approx(0.2484, abs=1e-4)
    burst = rows["cloud_spend_usd.total"]["burst"]
    assert (burst.n, burst.mean) == (2, 200.0)  # the unfinished run counts nowhere
    assert rows["utilisation.onprem"]["burst"].half_width == 0.0


def test_document_orders_runs_and_lists_the_unfinished() -> None:
    doc = document(two_sets())
    assert doc["sweep"] == {"days": 1.0, "policy_sets": ["onprem", "burst"],
                            "traces": ["philly"], "seeds": [0, 1, 2],
                            "groups": ["onprem", "burst"], "runs": 6, "finished": 5}  # fmt: skip
    runs = [(r["policies"], r["seed"], r["attempts"]) for r in doc["runs"]]
    assert runs == [("onprem", 0, 1), ("onprem", 1, 1), ("onprem", 2, 1),
                    ("burst", 0, 1), ("burst", 2, 2)]  # fmt: skip
    assert doc["unfinished"] == [{"policies": "burst", "trace": "philly", "seed": 1,
                                  "attempts": 4, "reason": "its worker died"}]  # fmt: skip
    spend = doc["figures"]["cloud_spend_usd.total"]
    assert spend["unit"] == "usd"
    assert spend["groups"]["burst"] == {"n": 2, "mean": 200.0, "half_width": 1270.62,
                                        "low": -1070.62, "high": 1470.62}  # fmt: skip


def test_several_traces_make_a_column_per_set_and_trace() -> None:
    finished = tuple(
        Finished(RunKey(p, t, s), report(u, 0.0))
        for p in ("a", "b") for t in ("philly", "itp") for s, u in ((0, 0.1), (1, 0.3))
    )  # fmt: skip
    swept = Sweep(("a", "b"), ("philly", "itp"), (0, 1), finished)
    by = {f.key: g for f, g in summary(swept)}["utilisation.onprem"]
    assert list(by) == ["a @ philly", "a @ itp", "b @ philly", "b @ itp"]
    assert by["b @ itp"].n == 2


@pytest.mark.parametrize(
    ("text", "seeds"),
    [
        pytest.param("0..3", [0, 1, 2, 3], id="range"),
        pytest.param("7", [7], id="one"),
        pytest.param("1,2,5", [1, 2, 5], id="list"),
        pytest.param("0..1, 10", [0, 1, 10], id="mixed"),
    ],
)
def test_parse_seeds(text, seeds) -> None:
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("a..b", "expected a range A..B or a comma list", id="words"),
        pytest.param("", "got ''", id="empty"),
        pytest.param("3..1", "with A <= B, got '3..1'", id="backwards"),
        pytest.param("0..3,2", "expected each seed once, got 2 twice", id="twice"),
        pytest.param("0..100000", "at most 100,000 seeds", id="too-many"),
    ],
)
def test_bad_seeds_say_what_was_expected(text, message) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        parse_seeds(text)


values = st.lists(
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=1, max_size=40
)


@settings(max_examples=200, deadline=None)
@given(values)
def test_the_mean_lies_in_its_interval(xs: list[float]) -> None:
    e = estimate(xs)
    assert min(xs) - 1e-6 <= e.mean <= max(xs) + 1e-6
    if len(xs) < 2:
        assert e.half_width is None
    else:
        assert e.half_width is not None
        assert e.half_width >= 0
        assert e.low is not None
        assert e.high is not None
        assert e.low <= e.mean <= e.high


@settings(max_examples=100, deadline=None)
@given(st.floats(min_value=-1e9, max_value=1e9, allow_nan=False), st.integers(2, 50))
def test_identical_values_have_a_zero_width_interval(x: float, n: int) -> None:
    assert estimate([x] * n) == Estimate(n, pytest.approx(x), 0.0)


@settings(max_examples=100, deadline=None)
@given(values.filter(lambda xs: len(xs) > 1), st.floats(-1e3, 1e3, allow_nan=False))
def test_a_shift_moves_the_mean_not_the_width(xs: list[float], shift: float) -> None:
    before, after = estimate(xs), estimate([x + shift for x in xs])
    assert after.mean == pytest.approx(before.mean + shift, abs=1e-6)
    assert before.half_width is not None
    assert after.half_width is not None
    assert math.isclose(after.half_width, before.half_width, rel_tol=1e-6, abs_tol=1e-3)


def test_the_statistics_module_is_pure() -> None:
    """Standard library only (no Ray, no meshctl adapters, no files or clock)."""
    tree = ast.parse(Path(sweep.__file__).read_text())
    imported = {
        (node.module or "").split(".")[0] if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}
    assert not imported & {"os", "time", "pathlib", "io", "subprocess", "socket"}
