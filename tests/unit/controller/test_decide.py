"""The controller's pure core: fed-in observations and a virtual clock, no Ray, no store."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshctl.controller.deciding.decide import (
    STOP_MARGIN_S,
    UNHEALTHY_GRACE_S,
    Resubmit,
    Rules,
    Step,
    Stop,
    decide,
    pool_mtbf_s,
)
from meshctl.controller.deciding.world import JobView, TrainProgress, World
from meshctl.model import Mesh
from meshctl.model.mesh import Graces
from meshctl.model.policy import UNKNOWN_RUNTIME_S
from meshctl.pools.observed import ObservedJob, ObservedNode, PoolObservation
from meshctl.pools.ray import RayPoolClient
from meshctl.state.records import (
    AttemptDetail,
    AttemptRecord,
    Held,
    JobState,
    NodeDetail,
    NodeRecord,
)
from meshctl.workload.exits import wrapped
from tests import builders
from tests.builders import (
    batch_document,
    job_view,
    local_pool,
    mesh,
    node_group,
    observed_node,
    observed_pool,
    resources,
)

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0

MESH = mesh(
    local_pool(
        "onprem",
        *(node_group(f"n{i}", labels={"rack": f"r{i}", "switch": "s1"}) for i in (1, 2)),
        checkpoint_storage={"uri": "file:///ckpt"},
    ),
    name="t",
)
RULES = Rules(MESH, {}, None)


def pool(*jobs: ObservedJob, nodes: tuple[ObservedNode, ...] | None = None) -> PoolObservation:
    seen = nodes if nodes is not None else (observed_node("n1"), observed_node("n2"))
    return observed_pool("onprem", *seen, jobs=jobs)


def job(
    name: str = "j",
    gpus: float = 1,
    nodes: int = 1,
    state: JobState = JobState.PENDING,
    attempt: AttemptRecord | None = None,
    **spec: Any,
) -> JobView:
    spec.setdefault("resources", resources(gpus, nodes=nodes))
    document = batch_document(name, working_dir="/pkg", **spec)
    return job_view(document, state=state, at_s=NOW - 10, attempt=attempt)


def attempt(
    job_id: str = "j",
    number: int = 1,
    state: str = "running",
    nodes: tuple[str, ...] = ("n1",),
    gpus: int = 1,
    **detail: Any,
) -> AttemptRecord:
    allocations = [
        {
            "node": n,
            "gpu_indices": list(range(gpus)),
            "gpu_share": 1.0,
            "cpus": 0.5,
            "memory_gib": 1.0,
            "nic_gbps": 0.0,
        }
        for n in nodes
    ]
    return AttemptRecord(
        f"{job_id}-{number}",
        job_id,
        number,
        "onprem",
        f"meshctl-{job_id}-{number}",
        state,
        NOW - 5,
        None,
        "",
        AttemptDetail.of({"allocations": allocations, **detail}),
    )


def ray(sid: str, status: str, error_type: str | None = None, message: str = "") -> ObservedJob:
    return ObservedJob(sid, status, message, error_type, NOW - 4, None)


def world(*views: JobView, observed: PoolObservation | None = None, **kw: Any) -> World:
    return builders.world(*views, pools=(observed or pool(),), now_s=NOW, **kw)


def moves(step: Step) -> list[tuple[str, str]]:
    return [(t.job_id, t.to.value) for t in step.transitions]


# --- dispatching ---------------------------------------------------------------------------------


def test_a_queued_job_is_dispatched_with_a_deterministic_submission() -> None:
    step = decide(world(job("a")), RULES)
    [dispatch] = step.dispatches
    assert dispatch.attempt.id == "a-1"
    sub = dispatch.submission
    assert sub.submission_id == "meshctl-a-1"
    # pinned by Ray's own node id, recorded with the attempt (the pool reports n1 as id-n1)
    node = dispatch.attempt.detail.allocations[0].node
    assert dispatch.attempt.detail.ray_node_ids == (f"id-{node}",)
    assert sub.label_selector == {"ray.io/node-id": f"id-{node}"}
    assert (sub.num_gpus, sub.num_cpus, sub.memory_bytes) == (1, 0.5, 1024**3)
    env = sub.runtime_env["env_vars"]
    assert env["MESHCTL_JOB_ID"] == "a"
    assert env["MESHCTL_ATTEMPT"] == "1"
    assert env["MESHCTL_CHECKPOINT_DIR"] == "/ckpt/a"
    assert sub.runtime_env["working_dir"] == "/pkg"
    assert decide(world(job("a")), RULES).dispatches[0].submission == sub  # same world, same id


def test_a_gang_reserves_for_its_workers_on_every_node() -> None:
    step = decide(world(job("g", gpus=4, nodes=2)), RULES)
    [dispatch] = step.dispatches
    sub = dispatch.submission
    env = sub.runtime_env["env_vars"]
    assert env["MESHCTL_NODES"] in ("n1,n2", "n2,n1")
    names = env["MESHCTL_NODES"].split(",")  # the ids to pin by, in the same order
    assert env["MESHCTL_NODE_IDS"] == ",".join(f"id-{n}" for n in names)
    assert env["MESHCTL_NODE_LABEL"] == "ray.io/node-id"
    assert (sub.num_gpus, sub.num_cpus, sub.memory_bytes) == (None, None, None)


def test_a_gang_gets_a_placement_group_with_a_bundle_on_each_node_meshctl_chose() -> None:
    """reserve: workers: the entrypoint holds nothing; meshctl.workload.placement has Ray hold one
    bundle per node (the job's per-node GPUs, CPUs, memory and claims) before the command
    runs. The bundles are recorded with the attempt: a resubmission holds the same."""
    nodes = tuple(observed_node(n, claimable={"gpu_memory_gib": 320.0}) for n in ("n1", "n2"))
    step = decide(world(job("g", gpus=4, nodes=2), observed=pool(nodes=nodes)), RULES)
    [dispatch] = step.dispatches
    sub, detail = dispatch.submission, dispatch.attempt.detail
    bundle = {"CPU": 0.5, "GPU": 4.0, "memory": float(1024**3), "gpu_memory_gib": 320.0}
    assert [dict(b) for b in detail.ray_bundles] == [bundle, bundle]
    env = sub.runtime_env["env_vars"]
    assert json.loads(env["MESHCTL_BUNDLES"]) == [bundle, bundle]
    assert env["MESHCTL_PLACEMENT_GROUP_NAME"] == sub.submission_id
    assert sub.entrypoint == "python -m meshctl.workload.placement 'python x.py'"
    restored = AttemptDetail.of(json.loads(json.dumps(detail.to_json())))
    assert restored.ray_bundles == detail.ray_bundles


@pytest.mark.parametrize(
    ("spec", "bundles"),
    [
        ({}, ()),  # one node: the entrypoint holds
        ({"reserve": "entrypoint"}, ()),
        ({"reserve": "workers"}, ({"CPU": 0.5, "GPU": 1.0, "memory": float(1024**3)},)),
    ],
    ids=["single node", "entrypoint", "single node, workers"],
)
def test_a_placement_group_only_where_the_workers_hold_the_resources(
    spec: dict[str, Any], bundles: tuple[dict[str, float], ...]
) -> None:
    [dispatch] = decide(world(job("a", **spec)), RULES).dispatches
    assert dispatch.attempt.detail.ray_bundles == bundles
    if bundles:
        return

    assert "MESHCTL_BUNDLES" not in dispatch.submission.runtime_env["env_vars"]
    assert not dispatch.submission.entrypoint.startswith("python -m meshctl.workload.placement")


@pytest.mark.parametrize(
    ("gpus", "spec", "claimable", "claimed"),
    [
        (2, {}, {"gpu_memory_gib": 320.0, "nic_gbps": 100.0}, {"gpu_memory_gib": 160.0}),
        (0.5, {}, {"gpu_memory_gib": 320.0}, {"gpu_memory_gib": 40.0}),
        (0.5, {"gpu_memory_gib": "24GiB"}, {"gpu_memory_gib": 320.0}, {"gpu_memory_gib": 24.0}),
        (1, {"nic_gbps": "25Gbps"}, {"nic_gbps": 100.0}, {"nic_gbps": 25.0}),
        (1, {}, {}, {}),
    ],
    ids=["whole GPUs", "a half, its share", "a half, what it asks", "NIC", "nothing declared"],
)
def test_the_entrypoint_claims_the_gpu_memory_and_nic_its_node_declares_to_ray(
    gpus: float, spec: dict[str, Any], claimable: dict[str, float], claimed: dict[str, float]
) -> None:
    nodes = tuple(observed_node(n, claimable=claimable) for n in ("n1", "n2"))
    resources = {"gpus": gpus, "cpus": 0.5, "memory_gib": 1, **spec}
    raw = MESH.model_dump(mode="json", by_alias=True, exclude_none=True)
    for group in raw["spec"]["pools"][0]["nodes"]:
        group["nic_gbps"] = 100  # what the job's NIC share is placed against
    rules = Rules(Mesh.model_validate(raw), {}, None)
    step = decide(world(job("a", resources=resources), observed=pool(nodes=nodes)), rules)
    [dispatch] = step.dispatches
    assert dict(dispatch.attempt.detail.ray_resources) == claimed
    assert dict(dispatch.submission.resources) == claimed
    restored = AttemptDetail.of(json.loads(json.dumps(dispatch.attempt.detail.to_json())))
    assert restored.ray_resources == claimed  # recorded: a resubmission claims the same


def test_a_job_bigger_than_what_is_free_waits_while_another_runs() -> None:
    running = job("r", gpus=4, state=JobState.RUNNING, attempt=attempt("r", gpus=4))
    busy = pool(ray("meshctl-r-1", "RUNNING"))
    step = decide(world(running, job("w", gpus=4, nodes=2), observed=busy), RULES)
    assert step.dispatches == []
    decision = {d.job_id: d for d in step.decisions}["w"]
    assert decision.outcome == "pending"


def test_cordoned_and_draining_nodes_take_no_new_work() -> None:
    nodes = {
        "onprem/n1": NodeRecord("onprem/n1", "onprem", "cordoned", {}, {}, NOW),
        "onprem/n2": NodeRecord(
            "onprem/n2", "onprem", "draining", {}, {}, NOW, NodeDetail(deadline_s=NOW + 60)
        ),
    }
    step = decide(world(job("a"), nodes=nodes), RULES)
    assert step.dispatches == []
    only_n2 = {"onprem/n1": nodes["onprem/n1"]}
    [dispatch] = decide(world(job("a"), nodes=only_n2), RULES).dispatches
    assert dispatch.attempt.detail.allocations[0].node == "n2"


# --- following what Ray says ---------------------------------------------------------------------

CASES = [
    # (name, job state, attempt state, Ray status, error type, expected transitions)
    ("started", JobState.DISPATCHED, "pending", "RUNNING", None, ["running"]),
    ("still pending", JobState.DISPATCHED, "pending", "PENDING", None, []),
    ("succeeded", JobState.RUNNING, "running", "SUCCEEDED", None, ["succeeded"]),
    (
        "its command failed",
        JobState.RUNNING,
        "running",
        "FAILED",
        "JOB_ENTRYPOINT_COMMAND_ERROR",
        ["failed"],
    ),
    (
        "its supervisor died",
        JobState.RUNNING,
        "running",
        "FAILED",
        "JOB_SUPERVISOR_ACTOR_DIED",
        ["evicted", "requeued"],
    ),
    ("stopped by someone else", JobState.RUNNING, "running", "STOPPED", None, ["cancelled"]),
    ("adopted after a crash", JobState.ADMITTED, "submitting", "RUNNING", None, ["running"]),
]


@pytest.mark.parametrize(
    ("state", "tried", "status", "error", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_a_job_follows_its_ray_job(
    state: JobState, tried: str, status: str, error: str | None, expected: list[str]
) -> None:
    view = job("a", state=state, attempt=attempt("a", state=tried))
    step = decide(world(view, observed=pool(ray("meshctl-a-1", status, error))), RULES)
    assert [to for _, to in moves(step)] == expected
    # a job requeued waits from now on: the same cycle places its next attempt
    again = ["a-2"] if "requeued" in expected else []
    assert [d.attempt.id for d in step.dispatches] == again
    assert step.resubmits == []


def test_an_attempt_recorded_but_never_submitted_is_submitted_with_the_same_id() -> None:
    view = job("a", state=JobState.ADMITTED, attempt=attempt("a", state="submitting"))
    step = decide(world(view), RULES)
    assert step.resubmits == [Resubmit("a", "a-1", "onprem", step.resubmits[0].submission)]
    assert step.resubmits[0].submission.submission_id == "meshctl-a-1"
    assert step.dispatches == []


def test_a_job_its_pool_forgot_is_requeued_and_retried_as_attempt_two() -> None:
    view = job("a", state=JobState.RUNNING, attempt=attempt("a", state="running"))
    step = decide(world(view), RULES)
    assert moves(step) == [("a", "evicted"), ("a", "requeued")]


def test_past_max_restarts_a_requeue_becomes_a_failure() -> None:
    view = job(
        "a", state=JobState.RUNNING, attempt=attempt("a", number=4), limits={"max_restarts": 3}
    )
    assert moves(decide(world(view), RULES)) == [("a", "evicted"), ("a", "failed")]


def test_an_unreachable_pool_changes_nothing_and_keeps_resources_held() -> None:
    view = job("a", gpus=4, state=JobState.RUNNING, attempt=attempt("a", gpus=4, nodes=("n1",)))
    down = PoolObservation("onprem", False, "connection refused")
    step = decide(World(NOW, {"onprem": down}, (view, job("b", gpus=4))), RULES)
    assert moves(step) == []
    assert step.dispatches == []
    assert step.stops == []


def test_a_pool_with_no_cluster_any_more_lost_its_jobs() -> None:
    view = job("a", gpus=4, state=JobState.RUNNING, attempt=attempt("a", gpus=4))
    step = decide(World(NOW, {}, (view,)), RULES)  # e.g. a cloud pool's last instance went
    assert moves(step) == [("a", "evicted"), ("a", "requeued")]
    assert step.resubmits == []


def test_a_cancelled_job_still_running_is_stopped() -> None:
    view = job("a", state=JobState.CANCELLED, attempt=attempt("a"))
    step = decide(world(view, observed=pool(ray("meshctl-a-1", "RUNNING"))), RULES)
    assert step.stops == [Stop("a", "onprem", "meshctl-a-1", "cancelled")]
    assert moves(step) == []


def test_a_preempted_job_is_stopped_after_its_grace_and_then_requeued() -> None:
    grace = attempt("a", stop_at_s=NOW + 30)
    view = job("a", state=JobState.PREEMPTED, attempt=grace)
    live = pool(ray("meshctl-a-1", "RUNNING"))
    assert decide(world(view, observed=live), RULES).stops == []
    later = replace(world(view, observed=live), now_s=NOW + 31)
    assert [s.submission_id for s in decide(later, RULES).stops] == ["meshctl-a-1"]
    stopped = pool(ray("meshctl-a-1", "STOPPED"))
    assert moves(decide(world(view, observed=stopped), RULES)) == [("a", "requeued")]


@pytest.mark.parametrize(
    ("status", "error", "expected"),
    [
        ("SUCCEEDED", None, [("a", "succeeded")]),
        ("FAILED", "JOB_ENTRYPOINT_COMMAND_ERROR", [("a", "failed")]),
        ("FAILED", "JOB_SUPERVISOR_ACTOR_DIED", [("a", "requeued")]),
        ("STOPPED", None, [("a", "requeued")]),
    ],
    ids=["finished in its grace", "failed in its grace", "its node died", "stopped"],
)
def test_a_preempted_job_that_ends_on_its_own_keeps_its_outcome(
    status: str, error: str | None, expected: list[tuple[str, str]]
) -> None:
    view = job("a", state=JobState.PREEMPTED, attempt=attempt("a", stop_at_s=NOW + 30))
    step = decide(world(view, observed=pool(ray("meshctl-a-1", status, error))), RULES)
    assert moves(step) == expected


def test_a_preemptor_waits_on_the_nodes_freed_for_it_and_nobody_else_takes_them() -> None:
    victim = job(
        "v",
        gpus=4,
        state=JobState.PREEMPTED,
        attempt=attempt("v", gpus=4, nodes=("n1",), stop_at_s=NOW + 30, for_job="w"),
    )
    other = job("o", gpus=4, state=JobState.RUNNING, attempt=attempt("o", gpus=4, nodes=("n2",)))
    live = pool(ray("meshctl-v-1", "RUNNING"), ray("meshctl-o-1", "RUNNING"))
    step = decide(world(victim, other, job("w", gpus=4), observed=live), RULES)
    assert step.dispatches == []
    assert moves(step) == []  # the victim is not preempted again, its grace is not moved


class _Listed(RayPoolClient):
    """The adapter over a fixed /api/v0/nodes answer (the HTTP part is tested for real in
    tests/integration/controller)."""

    def _request(self, method: str, path: str) -> Any:
        raw = [
            {
                "node_id": "old",
                "state": "DEAD",
                "labels": {"meshctl.io/node": "n1"},
                "resources_total": {"GPU": 4},
            },
            {
                "node_id": "new",
                "state": "ALIVE",
                "labels": {"meshctl.io/node": "n1"},
                "resources_total": {"GPU": 4},
            },
            {
                "node_id": "gone",
                "state": "DEAD",
                "labels": {"meshctl.io/node": "n3"},
                "resources_total": {"GPU": 4},
            },
        ]
        if "view=summary" in path:
            return {"data": {"summary": [], "nodeLogicalResources": {}}}
        state = "DEAD" if "filter_values=DEAD" in path else "ALIVE"
        rows = [r for r in raw if r["state"] == state]
        return {"data": {"result": {"result": rows, "total": len(rows)}}}


def test_a_node_that_came_back_is_not_taken_for_dead() -> None:
    seen = _Listed("onprem", "http://127.0.0.1:9", None).nodes()
    assert [(n.name, n.ray_node_id, n.alive) for n in seen] == [
        ("n1", "new", True),
        ("n3", "gone", False),
    ]


def test_jobs_on_a_spot_instance_taken_back_are_preempted_then_requeued() -> None:
    view = job("a", state=JobState.RUNNING, attempt=attempt("a", nodes=("n1",)))
    observed = pool(ray("meshctl-a-1", "RUNNING"), nodes=(observed_node("n2"),))
    step = decide(world(view, observed=observed, interrupted=frozenset({("onprem", "n1")})), RULES)
    assert moves(step) == [("a", "preempted")]
    failed = pool(
        ray("meshctl-a-1", "FAILED", "JOB_ENTRYPOINT_COMMAND_ERROR"), nodes=(observed_node("n2"),)
    )
    taken = job("a", state=JobState.PREEMPTED, attempt=attempt("a", nodes=("n1",)))
    after = decide(world(taken, observed=failed, interrupted=frozenset({("onprem", "n1")})), RULES)
    assert moves(after) == [("a", "requeued")]


@pytest.mark.parametrize(
    ("taken_back", "placed_on"),
    [(frozenset(), "n1"), (frozenset({("onprem", "n1")}), "n2")],
    ids=["none taken back", "n1's instance taken back, Ray still lists its node"],
)
def test_nothing_new_goes_to_a_node_whose_instance_was_taken_back(
    taken_back: frozenset[tuple[str, str]], placed_on: str
) -> None:
    """The cycle that finds a spot instance gone ends its notice (it is no longer reclaiming)
    while Ray lists its node alive until the heartbeats stop: a job requeued from it must not
    be placed on it again (found by the burst spot test, which saw three attempts, not two)."""
    step = decide(world(job("b"), interrupted=taken_back), RULES)
    [placed] = step.dispatches
    assert [a.node for a in placed.attempt.detail.allocations] == [placed_on]


@pytest.mark.parametrize(
    ("left_s", "stop_in_s"),
    [(120.0, 120.0 - STOP_MARGIN_S), (5.0, 0.0)],
    ids=["AWS's two minutes", "less than the margin: stopped now"],
)
def test_jobs_on_a_spot_instance_given_notice_are_asked_to_checkpoint_and_preempted(
    left_s: float, stop_in_s: float
) -> None:
    running = job("a", state=JobState.RUNNING, attempt=attempt("a", nodes=("n1",)))
    notice = {("onprem", "n1"): NOW + left_s}
    seen = pool(ray("meshctl-a-1", "RUNNING"))
    step = decide(world(running, job("b"), observed=seen, reclaiming=notice), RULES)
    assert moves(step)[0] == ("a", "preempted")
    [grace] = [c for c in step.attempts if c.attempt_id == "a-1"]
    assert grace.stop_at_s == NOW + stop_in_s
    [request] = step.checkpoints
    assert (request.job_id, request.attempt, request.uri) == ("a", 1, "file:///ckpt/a")
    assert request.deadline_s == NOW + stop_in_s
    assert "n1 is being taken back" in request.reason
    [placed] = step.dispatches  # nothing new goes to the node being taken back
    assert [a.node for a in placed.attempt.detail.allocations] == ["n2"]


def test_a_job_asked_once_is_not_asked_again() -> None:
    preempted = job("a", state=JobState.PREEMPTED, attempt=attempt("a", stop_at_s=NOW + 90))
    notice = {("onprem", "n1"): NOW + 100}
    step = decide(
        world(preempted, observed=pool(ray("meshctl-a-1", "RUNNING")), reclaiming=notice), RULES
    )
    assert (moves(step), step.checkpoints, step.stops) == ([], [], [])


def test_a_victim_of_priority_preemption_is_asked_to_checkpoint_within_its_grace() -> None:
    from meshctl.files.policies import read_policy_files
    from meshctl.policy.compiled import compile_policies
    from tests.conftest import ROOT

    shipped = compile_policies(read_policy_files([ROOT / "policies"]).policies)
    rules = Rules(MESH, {}, shipped)
    full = [
        job(n, gpus=4, state=JobState.RUNNING, attempt=attempt(n, nodes=(node_,), gpus=4),
            criticality="best-effort")
        for n, node_ in (("x", "n1"), ("y", "n2"))
    ]  # fmt: skip
    seen = pool(ray("meshctl-x-1", "RUNNING"), ray("meshctl-y-1", "RUNNING"))
    urgent = job("urgent", criticality="standard")
    urgent = replace(urgent, record=replace(urgent.record, priority=100))
    step = decide(world(*full, urgent, observed=seen), rules)
    [(victim, _)] = [m for m in moves(step) if m[1] == "preempted"]
    [request] = step.checkpoints
    assert (request.job_id, request.uri) == (victim, f"file:///ckpt/{victim}")
    assert request.deadline_s == NOW + 30  # the anything-over-best-effort grace
    assert request.reason == "preempted for urgent"


def test_jobs_on_a_dead_node_are_evicted() -> None:
    view = job("a", state=JobState.RUNNING, attempt=attempt("a", nodes=("n1",)))
    observed = pool(
        ray("meshctl-a-1", "RUNNING"), nodes=(observed_node("n1", alive=False), observed_node("n2"))
    )
    assert ("a", "evicted") in moves(decide(world(view, observed=observed), RULES))


def test_an_evicted_gang_keeps_its_live_node_until_its_ray_job_has_stopped() -> None:
    gang = job(
        "g",
        gpus=4,
        nodes=2,
        state=JobState.RUNNING,
        attempt=attempt("g", gpus=4, nodes=("n1", "n2")),
    )
    observed = pool(
        ray("meshctl-g-1", "RUNNING"), nodes=(observed_node("n1", alive=False), observed_node("n2"))
    )
    step = decide(world(gang, job("w", gpus=4), observed=observed), RULES)
    assert moves(step) == [("g", "evicted")]
    assert step.dispatches == []  # n2 is still the gang's until Ray says it stopped
    stopped = pool(
        ray("meshctl-g-1", "STOPPED"), nodes=(observed_node("n1", alive=False), observed_node("n2"))
    )
    evicted = replace(gang, record=replace(gang.record, state=JobState.EVICTED))
    after = decide(world(evicted, job("w", gpus=4), observed=stopped), RULES)
    assert moves(after) == [("g", "requeued")]
    assert [d.job_id for d in after.dispatches] == ["w"]


def test_a_node_its_pool_no_longer_lists_counts_as_dead() -> None:
    view = job("a", state=JobState.RUNNING, attempt=attempt("a", nodes=("n9",)))
    step = decide(world(view, observed=pool(ray("meshctl-a-1", "RUNNING"))), RULES)
    assert moves(step) == [("a", "evicted")]


def drain(state: str = "draining", deadline_s: float | None = NOW - 1) -> NodeRecord:
    return NodeRecord("onprem/n1", "onprem", state, {}, {}, NOW, NodeDetail(deadline_s=deadline_s))


ON_N1 = job("a", state=JobState.RUNNING, attempt=attempt("a", nodes=("n1",)))
ON_N2 = job("b", state=JobState.RUNNING, attempt=attempt("b", nodes=("n2",)))
LEAVING = job("c", state=JobState.EVICTED, attempt=attempt("c", nodes=("n1",)))
GANG = job("g", gpus=1, nodes=2, state=JobState.RUNNING, attempt=attempt("g", nodes=("n1", "n2")))
DRAINS = [
    # (node record, jobs, evicted, node changes)
    pytest.param(drain(deadline_s=NOW + 60), [ON_N1], [], [], id="before the deadline: it runs"),
    pytest.param(
        drain(deadline_s=NOW),
        [ON_N1, ON_N2],
        [("a", "evicted")],
        [("onprem/n1", "drained", "drain deadline passed; 1 job evicted")],
        id="at the deadline: its job evicted, the node drained, others untouched",
    ),
    pytest.param(
        drain(),
        [],
        [],
        [("onprem/n1", "drained", "drain deadline passed; 0 jobs evicted")],
        id="empty at the deadline: drained",
    ),
    pytest.param(
        drain(),
        [GANG],
        [("g", "evicted")],
        [("onprem/n1", "drained", "drain deadline passed; 1 job evicted")],
        id="a gang with one node on it",
    ),
    pytest.param(
        drain("drained"),
        [ON_N1],
        [("a", "evicted")],
        [],
        id="a job on a node already drained (placed as the drain began) is evicted too",
    ),
    pytest.param(drain(deadline_s=None), [ON_N1], [], [], id="draining without a deadline: waits"),
    pytest.param(
        drain(),
        [LEAVING],
        [],
        [("onprem/n1", "drained", "drain deadline passed; 0 jobs evicted")],
        id="a job already leaving is not evicted twice",
    ),
    pytest.param(
        drain("cordoned"), [ON_N1], [], [], id="cordoned since (a deadline kept): no eviction"
    ),
]


@pytest.mark.parametrize(("record", "views", "evicted", "changes"), DRAINS)
def test_a_drain_deadline_evicts_what_still_runs_and_the_node_becomes_drained(
    record: NodeRecord,
    views: list[JobView],
    evicted: list[tuple[str, str]],
    changes: list[tuple[str, str, str]],
) -> None:
    live = pool(*(ray(f"meshctl-{v.record.id}-1", "RUNNING") for v in views))
    step = decide(world(*views, observed=live, nodes={"onprem/n1": record}), RULES)
    assert [m for m in moves(step) if m[1] == "evicted"] == evicted
    assert [(c.node, c.state, c.reason) for c in step.nodes] == changes


def test_a_drained_node_takes_no_new_work() -> None:
    step = decide(world(job("a", gpus=4), nodes={"onprem/n1": drain("drained")}), RULES)
    [dispatch] = step.dispatches
    assert dispatch.attempt.detail.allocations[0].node == "n2"
    both = {"onprem/n1": drain("drained"), "onprem/n2": replace(drain("drained"), id="onprem/n2")}
    held = decide(world(job("a"), nodes=both), RULES)
    assert held.dispatches == []
    [note] = held.decisions
    assert "2 drained" in note.summary


def test_a_hold_places_and_preempts_nothing_and_says_why() -> None:
    busy = job("low", gpus=4, state=JobState.RUNNING, attempt=attempt("low", gpus=4))
    urgent = replace(job("hi", gpus=4), record=replace(job("hi").record, priority=10_000))
    live = pool(ray("meshctl-low-1", "RUNNING"))
    held = decide(world(busy, urgent, job("q"), observed=live, hold="draining"), RULES)
    assert (held.dispatches, held.launches, moves(held)) == ([], [], [])
    assert {(n.job_id, n.outcome, n.summary) for n in held.decisions} == {
        ("hi", "held", "draining"),
        ("q", "held", "draining"),
    }


# --- invariants ----------------------------------------------------------------------------------


@st.composite
def worlds(draw: st.DrawFn) -> World:
    """Jobs running on GPUs handed out without overlap (as the controller would have), plus
    queued jobs of every shape."""
    views, live, free = [], [], {"n1": list(range(4)), "n2": list(range(4))}
    for i in range(draw(st.integers(0, 4))):
        name = draw(st.sampled_from(["n1", "n2"]))
        take = draw(st.integers(1, 4))
        if len(free[name]) < take:
            continue
        gpus, free[name] = free[name][:take], free[name][take:]
        tried = replace(
            attempt(f"r{i}", nodes=(name,)),
            detail=AttemptDetail(allocations=(Held(name, tuple(gpus), 1.0, 0.1, 0.1, 0.0),)),
        )
        views.append(job(f"r{i}", gpus=take, state=JobState.RUNNING, attempt=tried))
        live.append(ray(tried.submission_id, draw(st.sampled_from(["RUNNING", "SUCCEEDED"]))))
    for i in range(draw(st.integers(0, 6))):
        gpus = draw(st.sampled_from([0.25, 0.5, 1, 2, 4]))
        nodes = 2 if gpus == 4 and draw(st.booleans()) else 1
        state = draw(st.sampled_from([JobState.PENDING, JobState.REQUEUED]))
        views.append(job(f"q{i}", gpus=gpus, nodes=nodes, state=state))
    return world(*views, observed=pool(*live))


@settings(max_examples=200, deadline=None)
@given(worlds())
def test_dispatches_fit_what_is_free_and_name_each_queued_job_once(w: World) -> None:
    step, again = decide(w, RULES), decide(w, RULES)
    assert step.dispatches == again.dispatches
    assert step.transitions == again.transitions
    dispatched = Counter(d.job_id for d in step.dispatches)
    assert all(n == 1 for n in dispatched.values())
    assert all(job_id.startswith("q") for job_id in dispatched)
    held: dict[tuple[str, int], float] = defaultdict(float)
    seen = w.pools["onprem"].jobs
    attempts = [  # a job Ray says has finished gives its GPUs back in the same cycle
        v.attempt
        for v in w.jobs
        if v.attempt is not None and seen[v.attempt.submission_id].status == "RUNNING"
    ]
    for a in [*attempts, *(d.attempt for d in step.dispatches)]:
        for alloc in a.detail.allocations:
            for g in alloc.gpu_indices:
                held[(alloc.node, g)] += alloc.gpu_share
    assert all(share <= 1.0 + 1e-9 for share in held.values())


# --- health, hangs, train jobs ------------------------------------------------------------------


def test_an_unhealthy_node_leaves_service_and_its_jobs_checkpoint_then_move() -> None:
    running = job("a", state=JobState.RUNNING, attempt=attempt("a", nodes=("n1",)))
    nodes = {k: NodeRecord(k, "onprem", "ready", {}, {}, NOW) for k in ("onprem/n1", "onprem/n2")}
    sick = {"onprem/n1": "GPU XID 79"}
    step = decide(
        world(running, job("b"), observed=pool(ray("meshctl-a-1", "RUNNING")), nodes=nodes,
              health=sick),
        RULES,
    )  # fmt: skip
    assert [(c.node, c.state, c.reason) for c in step.nodes] == [
        ("onprem/n1", "unhealthy", "GPU XID 79")
    ]
    assert ("a", "evicted") in moves(step)
    [request] = step.checkpoints
    assert request.deadline_s == NOW + UNHEALTHY_GRACE_S
    assert "n1 is unhealthy: GPU XID 79" in request.reason
    [placed] = step.dispatches  # the new job avoids the unhealthy node
    assert [a.node for a in placed.attempt.detail.allocations] == ["n2"]


def test_a_job_on_an_unhealthy_node_gets_its_pool_s_grace_to_checkpoint() -> None:
    """mesh.yaml's ``graces.unhealthy_s``: how long the job has to checkpoint, then leaves."""
    [onprem] = MESH.spec.pools
    graced_pool = onprem.model_copy(update={"graces": Graces(unhealthy_s=5.0)})
    graced = MESH.model_copy(update={"spec": MESH.spec.model_copy(update={"pools": [graced_pool]})})
    running = job("a", state=JobState.RUNNING, attempt=attempt("a", nodes=("n1",)))
    nodes = {"onprem/n1": NodeRecord("onprem/n1", "onprem", "ready", {}, {}, NOW)}
    sick = {"onprem/n1": "GPU XID 79"}
    observed = pool(ray("meshctl-a-1", "RUNNING"))
    step = decide(
        world(running, observed=observed, nodes=nodes, health=sick), Rules(graced, {}, None)
    )
    [request] = step.checkpoints
    assert request.deadline_s == NOW + 5.0
    [change] = step.attempts
    assert change.stop_at_s == NOW + 5.0


def test_a_node_whose_probe_says_healthy_again_returns_to_service() -> None:
    nodes = {"onprem/n1": NodeRecord("onprem/n1", "onprem", "unhealthy", {}, {}, NOW)}
    step = decide(world(nodes=nodes), RULES)
    assert [(c.node, c.state) for c in step.nodes] == [("onprem/n1", "ready")]


def train_job(name: str = "t", state: JobState = JobState.RUNNING, **detail: Any) -> JobView:
    tried = attempt(name, **{"checkpoint_uri": f"file:///ckpt/{name}", **detail})
    view = job(
        name,
        state=state,
        attempt=replace(tried, started_at_s=NOW - 100),
        kind="train",
        entrypoint=None,
        train={"loop": "model:train_loop", "hang_timeout": "60s", "config": {"steps": 5}},
    )
    return view


@pytest.mark.parametrize(
    ("last_report_ago_s", "evicted"),
    [(None, False), (90.0, True), (30.0, False)],
    ids=[
        "starting: no report yet, within the start-up allowance",
        "quiet for 90 s",
        "reported 30 s ago",
    ],
)
def test_a_train_job_quiet_past_its_hang_timeout_is_stopped_and_requeued(
    last_report_ago_s: float | None, evicted: bool
) -> None:
    view = train_job()
    seen = {}
    if last_report_ago_s is not None:
        seen["t"] = TrainProgress(1, 10, 10, NOW - last_report_ago_s, 9)
    step = decide(world(view, observed=pool(ray("meshctl-t-1", "RUNNING")), progress=seen), RULES)
    assert (("t", "evicted") in moves(step)) is evicted
    if evicted:
        [change] = step.attempts
        assert change.stop_at_s == NOW  # hung: no grace


def test_a_train_job_is_submitted_as_a_trainer_with_a_stable_run_name_and_storage() -> None:
    view = replace(train_job(state=JobState.PENDING), attempt=None)
    watched = NodeDetail(first_seen_s=NOW - 7200, failures=2)
    nodes = {"onprem/n1": NodeRecord("onprem/n1", "onprem", "ready", {}, {}, NOW, watched)}
    [dispatch] = decide(world(view, nodes=nodes), RULES).dispatches
    sub = dispatch.submission
    assert sub.entrypoint == wrapped("python -m meshctl.workload.train.run")  # its exit recorded
    env = sub.runtime_env["env_vars"]
    spec = json.loads(env["MESHCTL_TRAIN"])
    assert (spec["loop"], spec["run_name"], spec["storage"]) == (
        "model:train_loop",
        "t",
        "file:///ckpt",
    )
    assert spec["nodes"] == [a.node for a in dispatch.attempt.detail.allocations]
    assert spec["per_worker"]["GPU"] == 1
    assert env["MESHCTL_POOL_MTBF_S"] == "3600"  # 2 h watched, 2 failures
    assert sub.num_gpus is None  # the workers hold the GPUs, not the entrypoint


def test_checkpoint_storage_sticks_to_the_job_whichever_pool_runs_it_next() -> None:
    stored = AttemptDetail(checkpoint_uri="s3://b/a", checkpoint_endpoint="http://s3")
    first = replace(attempt("a", state="lost"), detail=stored)
    view = job("a", state=JobState.REQUEUED, attempt=first)
    [dispatch] = decide(world(view), RULES).dispatches
    assert dispatch.attempt.detail.checkpoint_uri == "s3://b/a"
    env = dispatch.submission.runtime_env["env_vars"]
    assert env["MESHCTL_CHECKPOINT_URI"] == "s3://b/a"
    assert env["MESHCTL_CHECKPOINT_ENDPOINT_URL"] == "http://s3"


def test_pool_mtbf_is_node_hours_watched_over_failures_seen() -> None:
    nodes = {
        "onprem/n1": NodeRecord("onprem/n1", "onprem", "ready", {}, {}, NOW,
                                NodeDetail(first_seen_s=NOW - 3600, failures=1)),
        "onprem/n2": NodeRecord("onprem/n2", "onprem", "ready", {}, {}, NOW,
                                NodeDetail(first_seen_s=NOW - 3600)),
        "lab/x": NodeRecord("lab/x", "lab", "ready", {}, {}, NOW,
                            NodeDetail(first_seen_s=NOW - 60)),
    }  # fmt: skip
    assert pool_mtbf_s(world(nodes=nodes)) == {"onprem": 7200.0}  # lab: no failure seen yet


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("Job entrypoint command failed with exit code -9, last available logs ...", "requeued"),
        ("Job entrypoint command failed with exit code 137", "requeued"),
        ("Job entrypoint command failed with exit code 1, last available logs ...", "failed"),
        (
            "Job entrypoint command failed with exit code 1, last available logs:\n"
            "subprocess exit code 137",
            "failed",
        ),
    ],
    ids=["SIGKILL", "SIGKILL through a shell", "its own error", "137 only in its own log"],
)
def test_a_driver_killed_by_a_signal_is_requeued_not_failed(message: str, expected: str) -> None:
    view = job("a", state=JobState.RUNNING, attempt=attempt("a"))
    seen = pool(ray("meshctl-a-1", "FAILED", "JOB_ENTRYPOINT_COMMAND_ERROR", message))
    assert moves(decide(world(view, observed=seen), RULES))[-1] == ("a", expected)


NEVER_RAN = (
    "Job entrypoint command failed with exit code 1, last available logs (truncated):\n"
    "ray.train.ControllerError: Training failed due to controller error:\n"
    "The actor died unexpectedly before finishing this task.\n"
    "\tclass_name: TrainController\n"
    "The actor never ran - it was cancelled before it started running."
)
OWN_ERROR = (
    "Job entrypoint command failed with exit code 1, last available logs (truncated):\n"
    "ray.train.WorkerGroupError: Training failed due to worker errors:\n"
    "[Rank 0]\nValueError: the loop's own mistake"
)


@pytest.mark.parametrize(
    ("message", "progress", "expected"),
    [
        (NEVER_RAN, None, "requeued"),
        (NEVER_RAN, TrainProgress(1, 0, None, None, None, restarting_since=NOW - 5), "requeued"),
        (NEVER_RAN, TrainProgress(0, 12, 12, NOW - 200, 9), "requeued"),
        (NEVER_RAN, TrainProgress(1, 12, 12, NOW - 2, 9), "failed"),
        (OWN_ERROR, None, "failed"),
    ],
    ids=["no report: the loop never ran", "a failure recorded, no report",
         "reports of another attempt only", "it had reported: its run's failure",
         "the loop's own error before any report"],
)  # fmt: skip
def test_a_train_run_that_died_before_its_loop_ran_is_retried_not_failed(
    message: str, progress: TrainProgress | None, expected: str
) -> None:
    """A process of the run that died under it (oneMKL killing Ray Train's controller at
    start was one) is not the job's failure: evicted, requeued, counted against its
    max_restarts."""
    seen = pool(ray("meshctl-t-1", "FAILED", "JOB_ENTRYPOINT_COMMAND_ERROR", message))
    known = {"t": progress} if progress else {}
    step = decide(world(train_job(), observed=seen, progress=known), RULES)
    assert moves(step)[-1] == ("t", expected)
    if expected == "requeued":
        [evicted] = [t for t in step.transitions if t.to is JobState.EVICTED]
        assert evicted.reason == (
            "its run died before its loop ran: "
            "The actor died unexpectedly before finishing this task."
        )


def test_a_plain_job_s_died_actor_is_its_own_failure() -> None:
    view = job("a", state=JobState.RUNNING, attempt=attempt("a"))
    seen = pool(ray("meshctl-a-1", "FAILED", "JOB_ENTRYPOINT_COMMAND_ERROR", NEVER_RAN))
    assert moves(decide(world(view, observed=seen), RULES))[-1] == ("a", "failed")


def test_a_train_job_that_never_reports_is_stopped_after_the_start_up_allowance() -> None:
    view = train_job()
    stuck = replace(view, attempt=replace(view.attempt, started_at_s=NOW - 601))  # type: ignore[arg-type]
    step = decide(world(stuck, observed=pool(ray("meshctl-t-1", "RUNNING"))), RULES)
    assert ("t", "evicted") in moves(step)


@pytest.mark.parametrize(
    ("progress", "evicted"),
    [
        (None, False),
        (TrainProgress(1, 10, 10, NOW - 90, 9, restarting_since=NOW - 20), False),
        (TrainProgress(1, 10, 10, NOW - 90, 9), True),
        (TrainProgress(1, 10, 10, NOW - 90, 9, loop_ended_s=NOW - 89), False),
        (TrainProgress(1, 10, 10, NOW - 700, 9, loop_ended_s=NOW - 690), True),
        (TrainProgress(1, 10, 10, NOW - 90, 9, loop_ended_s=NOW - 95), True),
    ],
    ids=["no checkpoint storage: nothing to judge by", "Ray Train is restarting its workers",
         "quiet, and nothing is restarting",
         "the loop returned 89 s ago: Ray Train is winding down (60 + 600 s allowed)",
         "the loop returned 690 s ago: past 60 + 600 s, stuck winding down",
         "an end older than the last report (a restart since) does not count"],
)  # fmt: skip
def test_the_hang_clock_waits_where_it_cannot_judge(
    progress: TrainProgress | None, evicted: bool
) -> None:
    view = train_job(checkpoint_uri=None) if progress is None else train_job()
    view = replace(view, attempt=replace(view.attempt, started_at_s=NOW - 700))  # type: ignore[arg-type]
    seen = {"t": progress} if progress else {}
    step = decide(world(view, observed=pool(ray("meshctl-t-1", "RUNNING")), progress=seen), RULES)
    assert (("t", "evicted") in moves(step)) is evicted


# --- runtime estimates and the wait forecast ------------------------------------------------------


def test_a_waiting_job_says_what_runtime_backfill_reckons_with_and_where_it_came_from() -> None:
    from meshctl.lifecycle import Estimator

    busy = job("r", gpus=4, state=JobState.RUNNING, attempt=attempt("r", gpus=4, nodes=("n1",)))
    other = job("o", gpus=4, state=JobState.RUNNING, attempt=attempt("o", gpus=4, nodes=("n2",)))
    seen = pool(ray("meshctl-r-1", "RUNNING"), ray("meshctl-o-1", "RUNNING"))
    estimator = Estimator()
    estimator.observe_all([("t", "w", 100.0), ("t", "w", 300.0)])
    step = decide(world(busy, other, job("w", gpus=4), observed=seen, estimator=estimator), RULES)
    [note] = [d for d in step.decisions if d.job_id == "w"]
    forecast = note.explanation["forecast"]
    assert forecast["runtime_s"] == 200.0
    assert forecast["runtime"] == "mean of team t's last 2 runs of 'w'"
    # r and o started 5 s ago with nothing known: each is taken to run at least 2 h more
    # (as long again as it had run, it said 5 s: issue 45), and the forecast says so
    assert forecast["expected_wait_s"] == {"onprem": UNKNOWN_RUNTIME_S}
    assert (forecast["assumed"], forecast["blocked_by"]) == ({"onprem": 2}, None)
    unknown = decide(world(busy, other, job("x", gpus=4), observed=seen), RULES)
    [said] = [d for d in unknown.decisions if d.job_id == "x"]
    assert said.explanation["forecast"]["runtime_s"] is None
    assert said.explanation["forecast"]["runtime"].startswith("unknown: no max_runtime_s")


def _full_of(team: str = "t") -> tuple[list[JobView], PoolObservation]:
    """n1 and n2 each held whole by a job of ``team`` that declared no runtime."""
    full = [
        job(n, gpus=4, state=JobState.RUNNING, attempt=attempt(n, nodes=(node_,), gpus=4))
        for n, node_ in (("r", "n1"), ("o", "n2"))
    ]
    full = [replace(v, record=replace(v.record, team=team)) for v in full]
    return full, pool(ray("meshctl-r-1", "RUNNING"), ray("meshctl-o-1", "RUNNING"))


def test_the_policies_set_what_a_job_without_a_runtime_is_assumed_to_run() -> None:
    from tests.unit.policy.helpers import compiled

    full, seen = _full_of()
    rules = Rules(MESH, {}, compiled("forecast: {unknown_runtime_s: 15m}"))
    step = decide(world(*full, job("w", gpus=4), observed=seen), rules)
    [note] = [d for d in step.decisions if d.job_id == "w"]
    forecast = note.explanation["forecast"]
    assert (forecast["expected_wait_s"], forecast["unknown_runtime_s"]) == ({"onprem": 900.0}, 900)


def test_a_job_its_quota_holds_back_has_no_wait_forecast_only_why() -> None:
    """Issue 45: a job held back by its team's quota showed 'expected wait 0 s'."""
    from tests.unit.policy.helpers import compiled

    full, seen = _full_of("other")
    quotas = compiled("quotas: [{team: t, gpus: 2}, {team: other, gpus: 8}]")
    step = decide(world(*full[:1], job("q", gpus=2), job("w", gpus=2), observed=seen),
                  Rules(MESH, {}, quotas))  # fmt: skip
    notes = {d.job_id: d.explanation for d in step.decisions}
    assert notes["w"]["status"] == "pending"
    assert "quota" in notes["w"]["reason"]
    assert notes["w"]["forecast"]["blocked_by"] == "quota"
    assert notes["w"]["forecast"]["expected_wait_s"] == {}
