"""The differential check: every scenario through the controller (its loop over fake pools,
the fake cloud and a virtual clock) and through the simulator (its engine on the
controller's tick) must take the same actions at the same cycles. The table names what each
scenario is about; Hypothesis draws more (jobs of every size, failures, burst pools with spot
notices, priorities, budgets, deadlines, limits)."""

from __future__ import annotations

import logging
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.differential import Outcome, run
from tests.differential.table import TABLE, generate

pytestmark = pytest.mark.unit


def _same(outcome: Outcome, seed: str = "") -> None:
    """Both sides took the same actions; ``seed``: a drawn scenario's, said when they did not
    (``generate(random.Random(seed))`` draws it again)."""
    assert outcome.controller, "the scenario did nothing"
    mismatches = outcome.mismatches
    said = [f"controller {a}  simulator {b}" for a, b in mismatches]
    assert not mismatches, "\n".join([*([f"seed {seed!r}"] if seed else []), *said])


class _Refused(logging.Handler):
    """Keeps what the loop says of transitions outside the job-state table."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.said: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "job-state table" in record.getMessage():
            self.said.append(record.getMessage())


@pytest.fixture(scope="module")
def outcomes() -> dict[str, tuple[Outcome, list[str]]]:
    """Every named scenario run once, with the transitions the loop refused."""
    logger = logging.getLogger("meshctl.controller")
    found = {}
    for scenario in TABLE:
        handler = _Refused()
        logger.addHandler(handler)
        try:
            found[scenario.name] = (run(scenario), handler.said)
        finally:
            logger.removeHandler(handler)
    return found


@pytest.mark.parametrize("name", [s.name for s in TABLE])
def test_the_controller_and_the_simulator_take_the_same_actions(outcomes, name: str) -> None:
    outcome, refused = outcomes[name]
    _same(outcome)
    assert refused == []  # every transition it made is one the job-state table allows


# 25 drawn scenarios a run, about 6 s each: in five batches, so that the suite's two workers
# share them and no one test runs for minutes
@pytest.mark.parametrize("batch", range(5))
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False))
def test_random_scenarios_take_the_same_actions_on_both_sides(
    batch: int, rng: random.Random
) -> None:
    # each batch its own scenarios, also where Hypothesis derandomizes (its CI profile seeds
    # every parametrization of a test alike)
    seed = f"{batch}:{rng.getrandbits(64)}"
    _same(run(generate(random.Random(seed))), seed)


def test_the_table_covers_the_lifecycle(outcomes) -> None:
    """What the differential check is held to: each part of the lifecycle in some scenario."""
    kinds = set()
    for outcome, _ in outcomes.values():
        kinds |= {entry[1] for entry in outcome.controller}
        kinds |= {f"leave:{e[3]}" for e in outcome.controller if e[1] == "leave"}
        kinds |= {f"fail:{e[3]}" for e in outcome.controller if e[1] == "fail"}
        kinds |= {f"budget:{e[3]}" for e in outcome.controller if e[1] == "budget"}
        kinds |= {"backfill" for e in outcome.controller if e[1] == "start" and e[5]}
    assert len(TABLE) >= 20
    assert kinds >= {
        "start",
        "finish",
        "requeue",
        "launch",
        "teardown",
        "leave:preempted",
        "leave:evicted",
        "fail:deadline",
        "fail:max_runtime",
        "fail:max_restarts",
        "budget:warn",
        "budget:exceeded",
        "backfill",
    }


def test_a_pool_s_grow_grace_brings_an_elastic_job_back_sooner_on_both_sides(outcomes) -> None:
    """The same loan and growth, in a pool whose grow grace is 5 s instead of the default 30:
    both the controller and the simulator restart the growing job 20 to 30 s sooner."""

    def regrown(name: str, side: str) -> float:
        outcome, _ = outcomes[name]
        starts = [e[0] for e in getattr(outcome, side) if e[1] == "start" and e[2] == "e"]
        assert len(starts) == 3, starts  # on three nodes, on two, on three again
        return float(starts[-1])

    for side in ("controller", "simulator"):
        default = regrown("an-elastic-job-lends-a-node-and-grows-back", side)
        graced = regrown("an-elastic-job-grows-back-after-its-pool-s-grace", side)
        assert 20.0 <= default - graced <= 30.0, (side, default, graced)


def test_the_policies_rule_for_jobs_without_runtimes_moves_the_burst_on_both_sides(
    outcomes,
) -> None:
    """On-prem full of jobs that declared no runtime: each is assumed to run 2 h more, so the
    60 s gate opens as w arrives (20 s); with the policies' 30 s it opens once they have run
    longer than 60 s (as long again), at 70 s. The same on both sides (issue 45: as long
    again as they had run, the wait was 20 s and the gate stayed shut)."""

    def launched(name: str, side: str) -> float:
        outcome, _ = outcomes[name]
        [at] = [e[0] for e in getattr(outcome, side) if e[1] == "launch" and e[2] == "w"]
        return float(at)

    for side in ("controller", "simulator"):
        assert launched("a-pool-full-of-jobs-without-runtimes-opens-the-burst-gate", side) == 20.0
        set_by_policy = "the-policies-set-what-a-job-without-a-runtime-is-assumed-to-run"
        assert launched(set_by_policy, side) == 70.0


def test_a_lender_takes_its_quota_back_within_the_grace_and_two_cycles_on_both_sides(
    outcomes,
) -> None:
    """The borrower's 8 jobs (of a higher class) fill both nodes; the lender's 2-GPU job
    comes at 500 s and reclaims two of them (grace 30 s): it starts by 550 s, and nothing is
    taken again (no ping-pong). A lender that reclaims from lower priorities only waits until
    the borrower's jobs end."""
    for side in ("controller", "simulator"):
        outcome, _ = outcomes["a-lender-reclaims-from-a-borrower-of-higher-priority"]
        log = getattr(outcome, side)
        [start] = [e[0] for e in log if e[1] == "start" and e[2] == "l"]
        taken = [e[2] for e in log if e[1] == "leave"]
        assert 500.0 < start <= 500.0 + 30.0 + 2 * 10.0, side
        assert len(taken) == 2, (side, taken)
        assert all(t.startswith("b") for t in taken), (side, taken)
        outcome, _ = outcomes["a-lender-that-reclaims-from-lower-priority-only-waits"]
        log = getattr(outcome, side)
        assert [e for e in log if e[1] == "leave"] == []
        assert [e[0] for e in log if e[1] == "start" and e[2] == "l"] == [3000.0]
