"""A train job whose node died goes on inside its attempt on a free node (``leaving.dead_nodes``
through ``lifecycle.effects.lost_nodes``): decided (pure), then applied (the attempt's new
nodes and event in the store, the run's new pins beside its checkpoints)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from meshctl.controller.deciding.decide import Replacement, decide
from meshctl.controller.deciding.dispatch import REPLACE_WAIT_S
from meshctl.controller.loop import Controller
from meshctl.lifecycle.effects import UNHEALTHY_GRACE_S
from meshctl.model import Job
from meshctl.pools.observed import ObservedJob, ObservedNode, PoolObservation
from meshctl.state import AttemptRecord, JobRecord, JobState, MemoryStore
from meshctl.state.records import Held
from meshctl.workload.train.nominations import nominated
from tests.builders import job_document, observed_node, observed_pool, resources
from tests.unit.controller.test_decide import (
    MESH,
    NOW,
    RULES,
    attempt,
    job,
    moves,
    pool,
    ray,
    world,
)

pytestmark = pytest.mark.unit

TRAIN = {"kind": "train", "entrypoint": None, "train": {"loop": "model:train_loop"}}


def train_job(state: JobState = JobState.PENDING, **kw: Any) -> Any:
    return job("t", gpus=4, state=state, **TRAIN, **kw)


def running_train(**detail: Any) -> Any:
    ran = attempt("t", nodes=("n1",), gpus=4, ray_node_ids=["id-n1"],
                  checkpoint_uri="file:///ckpt/t", replaceable=True, **detail)  # fmt: skip
    return train_job(JobState.RUNNING, attempt=ran)


DEAD, N2 = observed_node("n1", alive=False), observed_node("n2")
THREE = (DEAD, N2, observed_node("n3"))


def test_a_train_job_in_a_pool_with_a_head_of_its_own_runs_its_driver_there() -> None:
    [dispatch] = decide(world(train_job()), RULES).dispatches
    assert dispatch.attempt.detail.replaceable
    assert dispatch.submission.label_selector == {"meshctl.io/role": "head"}
    spec = json.loads(dispatch.submission.runtime_env["env_vars"]["MESHCTL_TRAIN"])
    assert spec["replace_wait_s"] == REPLACE_WAIT_S
    assert spec["node_ids"] == list(dispatch.attempt.detail.ray_node_ids)


@pytest.mark.parametrize(
    ("view", "why"),
    [
        pytest.param(job("b", gpus=4), "not a train job", id="batch"),
        pytest.param(job("e", gpus=4, nodes=2, **{**TRAIN, "train": {
            "loop": "model:train_loop", "workers": {"min": 1, "max": 2}}}),
            "elastic: it resizes between attempts", id="elastic"),
    ],
)  # fmt: skip
def test_other_jobs_keep_their_driver_on_their_first_node(view: Any, why: str) -> None:
    [dispatch] = decide(world(view), RULES).dispatches
    assert not dispatch.attempt.detail.replaceable, why
    first = dispatch.attempt.detail.ray_node_ids[0]
    assert dispatch.submission.label_selector == {"ray.io/node-id": first}


def test_a_dead_node_under_a_train_job_is_replaced_by_a_free_one_inside_the_attempt() -> None:
    observed = pool(ray("meshctl-t-1", "RUNNING"), ray("meshctl-b-1", "RUNNING"), nodes=THREE)
    waiting = job("w", gpus=4)  # fits only where the replacement goes, n3 (n2 is held)
    busy = job("b", gpus=4, state=JobState.RUNNING, attempt=attempt("b", nodes=("n2",), gpus=4))
    step = decide(world(running_train(), busy, waiting, observed=observed), RULES)
    assert moves(step) == []  # no eviction, no requeue
    [found] = step.replacements
    assert found == Replacement(
        "t", "t-1", 1, "onprem",
        (Held("n3", (0, 1, 2, 3), 1.0, 0.5, 1.0, 0.0),), ("id-n3",),
        "file:///ckpt/t", None, "node n1 is dead; n3 replaces it inside the attempt",
    )  # fmt: skip
    assert step.dispatches == []  # the cycle sees n3 held already


@pytest.mark.parametrize(
    ("nodes", "others", "replaceable"),
    [
        pytest.param((DEAD, N2), True, True, id="no-free-node"),
        pytest.param(THREE, False, False, id="not-replaceable"),
        pytest.param((DEAD, N2, observed_node("n3", gpus=2)), True, True,
                     id="the-free-node-is-too-small"),
    ],
)  # fmt: skip
def test_without_a_stand_in_the_job_is_evicted(
    nodes: tuple[ObservedNode, ...], others: bool, replaceable: bool
) -> None:
    view = running_train()
    if not replaceable:
        detail = replace(view.attempt.detail, replaceable=False)
        view = replace(view, attempt=replace(view.attempt, detail=detail))
    busy = job("b", gpus=4, state=JobState.RUNNING, attempt=attempt("b", nodes=("n2",), gpus=4))
    views = (view, busy) if others else (view,)
    observed = pool(ray("meshctl-t-1", "RUNNING"), ray("meshctl-b-1", "RUNNING"), nodes=nodes)
    step = decide(world(*views, observed=observed), RULES)
    assert ("t", "evicted") in moves(step)
    assert step.replacements == []


def test_a_node_out_of_service_never_stands_in() -> None:
    from meshctl.state.records import NodeRecord

    cordoned = NodeRecord("onprem/n3", "onprem", "cordoned", {}, {}, NOW)
    observed = pool(ray("meshctl-t-1", "RUNNING"), nodes=THREE)
    step = decide(world(running_train(), observed=observed, nodes={"onprem/n3": cordoned}), RULES)
    assert [r.allocations[0].node for r in step.replacements] == ["n2"]
    unhealthy = world(
        running_train(), observed=observed, health={"onprem/n2": "XID 79", "onprem/n3": "XID 79"}
    )
    assert ("t", "evicted") in moves(decide(unhealthy, RULES))


SILENT = "agent: silent for over 30 s"


@pytest.mark.parametrize(
    ("replaceable", "free", "expected"),
    [
        pytest.param(True, True, "replaced", id="replaceable-with-a-free-node"),
        pytest.param(True, False, "evicted-after-a-grace", id="replaceable-no-free-node"),
        pytest.param(False, True, "evicted-after-a-grace", id="not-replaceable"),
    ],
)  # fmt: skip
def test_a_silent_node_ray_still_lists_counts_as_dead_for_a_replaceable_attempt(
    replaceable: bool, free: bool, expected: str
) -> None:
    """Its agent silent past dead_after_s: the node is dead to meshctl though Ray lists it
    alive (SIGSTOPped, partitioned). A replaceable attempt gets a stand-in at once; any other
    job (or one with no stand-in) is evicted as from an unhealthy node, after its grace."""
    view = running_train()
    if not replaceable:
        detail = replace(view.attempt.detail, replaceable=False)
        view = replace(view, attempt=replace(view.attempt, detail=detail))
    nodes = tuple(observed_node(n) for n in (("n1", "n2", "n3") if free else ("n1",)))
    observed = pool(ray("meshctl-t-1", "RUNNING"), nodes=nodes)
    silent = world(view, observed=observed, health={"onprem/n1": SILENT},
                   silent=frozenset({"onprem/n1"}))  # fmt: skip
    step = decide(silent, RULES)
    if expected == "replaced":
        assert moves(step) == []
        [found] = step.replacements
        assert found.allocations[0].node == "n2"
        assert found.reason == "node n1 is dead; n2 replaces it inside the attempt"
        return
    assert step.replacements == []
    assert ("t", "evicted") in moves(step)
    [change] = step.attempts
    assert change.stop_at_s == NOW + UNHEALTHY_GRACE_S
    assert [c.reason for c in step.checkpoints] == [f"node n1 is unhealthy: {SILENT}"]


def test_a_node_its_probe_calls_unhealthy_is_not_replaced_but_left_after_a_grace() -> None:
    """An unhealthy node (an XID error) still runs: its jobs checkpoint in their grace, then
    resume in a new attempt. Only silence (or death) replaces a node inside the attempt."""
    observed = pool(ray("meshctl-t-1", "RUNNING"), nodes=(observed_node("n1"), observed_node("n2")))
    step = decide(world(running_train(), observed=observed, health={"onprem/n1": "XID 79"}),
                  RULES)  # fmt: skip
    assert step.replacements == []
    assert ("t", "evicted") in moves(step)
    assert len(step.checkpoints) == 1


# --- applied -------------------------------------------------------------------------------------


class Pool:
    def __init__(self) -> None:
        self.alive = {"n1": True, "n2": True}
        self.jobs: dict[str, ObservedJob] = {}
        self.submissions: list[Any] = []

    def observe(self) -> PoolObservation:
        nodes = (observed_node(n, alive=up) for n, up in self.alive.items())
        return observed_pool("onprem", *nodes, jobs=self.jobs.values())

    def submit(self, submission: Any) -> str:
        self.submissions.append(submission)
        self.jobs[submission.submission_id] = ObservedJob(submission.submission_id, "RUNNING")
        return "submitted"

    def stop(self, submission_id: str) -> bool:
        self.jobs[submission_id] = ObservedJob(submission_id, "STOPPED")
        return True

    def read_log(self, submission_id: str, offset: int, limit: int) -> None:
        return None


def test_a_replacement_is_recorded_and_the_run_told_its_new_pins(tmp_path: Path) -> None:
    from meshctl.controller.deciding.step import Rules
    from meshctl.controller.submit import Admission, enqueue
    from meshctl.scheduler.plan import Decision

    uri = f"file://{tmp_path}"
    pools = [{**p.model_dump(mode="json", exclude_none=True), "checkpoint_storage": {"uri": uri}}
             for p in MESH.spec.pools]  # fmt: skip
    mesh = MESH.model_validate({**MESH.model_dump(mode="json", exclude_none=True),
                                "spec": {"pools": pools}})  # fmt: skip
    document = job_document("t", **TRAIN, resources=resources(4))
    store, ray_pool, now = MemoryStore(), Pool(), [NOW]
    parsed = Job.model_validate({**document, "spec": {k: v for k, v in document["spec"].items()
                                                       if v is not None}})  # fmt: skip
    record = enqueue(store, parsed, Admission(0, None, Decision("t", "placed")), None,
                     tmp_path / "pkg", NOW)  # fmt: skip

    def clock() -> float:
        now[0] += 1.0
        return now[0]

    loop = Controller(store, Rules(mesh, {}, None), {"onprem": ray_pool}, clock=clock)
    loop.cycle()
    [first] = store.list(AttemptRecord, job_id=record.id)
    assert first.detail.replaceable
    lost = first.detail.allocations[0].node
    other = "n2" if lost == "n1" else "n1"
    ray_pool.alive[lost] = False
    loop.cycle()
    [after] = store.list(AttemptRecord, job_id=record.id)
    assert after.number == 1
    assert [h.node for h in after.detail.allocations] == [other]
    assert after.detail.ray_node_ids == (f"id-{other}",)
    stored = store.get(JobRecord, record.id)
    assert stored is not None
    assert stored.state is JobState.RUNNING
    [event] = [e for e in store.events(job_id=record.id) if e.kind == "job.node-replaced"]
    assert event.message == f"node {lost} is dead; {other} replaces it inside the attempt"
    assert nominated(f"{uri}/{record.id}", None, 1) == (f"id-{other}",)
    assert len(ray_pool.submissions) == 1  # the same Ray job goes on
    assert after.detail.replaced == 1
    # a controller that stopped before telling the run: the next one tells it at its start
    (tmp_path / record.id / ".meshctl" / "nominated-1.json").unlink()
    again = Controller(store, Rules(mesh, {}, None), {"onprem": ray_pool}, clock=clock)
    again.cycle()
    assert nominated(f"{uri}/{record.id}", None, 1) == (f"id-{other}",)
