"""Services in the controller's decide (pure): replicas placed one by one as units of their
own, scaled by their traffic, borrowing from elastic training and giving back."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from meshctl.controller.deciding.decide import Rules, decide
from meshctl.controller.deciding.services import replica_id, service_of
from meshctl.controller.deciding.world import JobView, ServeSeen, World
from meshctl.policy import compile_policies
from meshctl.policy.compiled import Source
from meshctl.pools.observed import ObservedJob, PoolObservation
from meshctl.state.records import AttemptDetail, AttemptRecord, Held, JobState
from tests.builders import (
    job_document,
    job_view,
    local_pool,
    mesh,
    node_group,
    observed_node,
    observed_pool,
)

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0
L4 = {"model": "L4", "memory_gib": "24GiB"}
MESH = mesh(
    local_pool(
        "onprem",
        *(node_group(f"n{i}", gpus=1, accelerator=L4) for i in (1, 2, 3)),
        checkpoint_storage={"uri": "file:///ckpt"},
    ),
    name="t",
)
POLICY = """\
apiVersion: meshctl/v1
kind: Policy
metadata: {name: p}
spec:
  priority_classes: [{name: serve, value: 100}, {name: train, value: 10}]
  default_priority_class: {inference: serve, train: train}
  preemption:
    - {name: surge, when: 'job.service', victims: 'victim.elastic', grace_s: 20s}
"""


def rules() -> Rules:
    from meshctl.files import load_text

    (loaded,) = load_text(POLICY, "p.yaml")
    return Rules(MESH, {}, compile_policies([Source("p.yaml", loaded.document, loaded.lines)]))


def view(name: str, spec: dict[str, Any], state: JobState, attempt: AttemptRecord | None,
         priority: int) -> JobView:  # fmt: skip
    document = job_document(name, working_dir="", **spec)
    return job_view(document, state=state, priority=priority, at_s=NOW - 100, attempt=attempt)


SERVICE = {
    "kind": "inference",
    "serve": {"app": "app:app", "deployment": "Model", "replicas": {"min": 1, "max": 3},
              "target_ongoing_requests": 2, "upscale_delay": "30s", "downscale_delay": "60s"},
    "resources": {"gpus": 1, "cpus": 0.5, "memory_gib": 1},
}  # fmt: skip
TRAIN = {
    "kind": "train",
    "train": {"loop": "m:f", "workers": {"min": 1, "max": 2}},
    "resources": {"gpus": 1, "cpus": 0.5, "memory_gib": 1},
}


def held(node: str) -> Held:
    return Held(node, (0,), 1.0, 0.5, 1.0, 0.0)


def service_attempt(replicas: dict[str, str], **detail: Any) -> AttemptRecord:
    ids = tuple(replicas)
    return AttemptRecord(
        "svc-1", "svc", 1, "onprem", "serve-svc", "running", NOW - 90, None,
        detail=AttemptDetail(
            allocations=tuple(held(n) for n in replicas.values()), replica_ids=ids,
            next_replica=len(ids), **detail,
        ),
    )  # fmt: skip


def train_attempt(nodes: tuple[str, ...]) -> AttemptRecord:
    return AttemptRecord(
        "tr-1", "tr", 1, "onprem", "meshctl-tr-1", "running", NOW - 90, None,
        detail=AttemptDetail(allocations=tuple(held(n) for n in nodes)),
    )  # fmt: skip


def observed(*jobs: ObservedJob) -> dict[str, PoolObservation]:
    nodes = (observed_node(f"n{i}", gpus=1, accelerator=None) for i in (1, 2, 3))
    return {"onprem": observed_pool("onprem", *nodes, jobs=jobs)}


TRAINING = ObservedJob("meshctl-tr-1", "RUNNING")


def test_replica_ids_name_their_service():
    assert replica_id("svc", 3) == "svc/r3"
    assert service_of("svc/r3") == "svc"
    assert service_of("svc") is None


def test_a_new_service_gets_its_least_replicas_and_is_admitted():
    svc = view("svc", SERVICE, JobState.PENDING, None, 100)
    step = decide(World(NOW, observed(), (svc,)), rules())
    (change,) = step.services
    assert (change.replica_ids, change.wanted, change.pool) == (("svc/r0",), 1, "onprem")
    assert [(t.job_id, t.to) for t in step.transitions] == [("svc", JobState.ADMITTED)]
    assert step.dispatches == []  # no Ray job: Serve runs it


def test_a_surge_scales_out_after_the_delay_by_borrowing_from_elastic_training():
    svc = view("svc", SERVICE, JobState.RUNNING, service_attempt({"svc/r0": "n1"},
               replicas_wanted=1), 100)  # fmt: skip
    train = view("tr", TRAIN, JobState.RUNNING, train_attempt(("n2", "n3")), 10)
    busy = {"svc": ServeSeen("RUNNING", running=1, ongoing=6.0)}  # 6 in flight: 3 replicas
    first = World(NOW, observed(TRAINING), (svc, train), serve=busy)
    step = decide(first, rules())
    (change,) = step.services  # above target since now: not yet
    assert (change.wanted, change.scaling.above_since_s) == (1, NOW)
    svc = replace(svc, attempt=service_attempt({"svc/r0": "n1"}, replicas_wanted=1,
                                               above_since_s=NOW))  # fmt: skip
    later = replace(first, now_s=NOW + 30, jobs=(svc, train))
    step = decide(later, rules())
    assert step.services[0].wanted == 3
    # the training job lends one node (never below its least of one); the third replica waits
    assert [(t.job_id, t.to) for t in step.transitions] == [("tr", JobState.PREEMPTED)]
    assert step.transitions[0].reason.startswith("lending 1 node(s) to svc/r1")
    (change,) = [c for c in step.attempts if c.lent]
    assert change.lent in ((("n2", "svc/r1"),), (("n3", "svc/r1"),))
    (loan,) = step.loans
    assert (loan.lender, loan.borrower, loan.closed_at_s) == ("tr", "svc/r1", None)
    waits = {d.job_id: d for d in step.decisions}
    assert waits["svc"].outcome == "preempting"


def test_scaling_in_lets_borrowed_replicas_go_first_and_their_loans_close():
    from meshctl.state.records import LoanRecord

    svc = view("svc", SERVICE, JobState.RUNNING,
               service_attempt({"svc/r0": "n1", "svc/r1": "n2"}, replicas_wanted=2,
                               below_since_s=NOW - 60), 100)  # fmt: skip
    train = view("tr", TRAIN, JobState.RUNNING, train_attempt(("n3",)), 10)
    loan = LoanRecord("tr:n2:1", "tr", "svc/r1", "onprem", "n2", 1.0, NOW - 500)
    quiet = {"svc": ServeSeen("RUNNING", running=2, ongoing=0.5)}
    world = World(NOW, observed(TRAINING), (svc, train), loans=(loan,), serve=quiet)
    step = decide(world, rules())
    (change,) = step.services
    assert change.replica_ids == ("svc/r0",)  # r1 borrowed: it goes first
    (closed,) = step.loans
    assert (closed.id, closed.closed_at_s) == ("tr:n2:1", NOW)
    # the lender is below its size now: it grows back onto n2 (checkpoint, stop, resume)
    (grow,) = [c for c in step.attempts if c.grows_onto]
    assert grow.grows_onto == ("n2",)


@pytest.mark.parametrize(
    ("serve_says", "recorded"),
    [("id-n3", "n3"), ("id-n2", "n1")],
    ids=["moved to a free node: followed", "on a node training holds: meshctl's stands"],
)
def test_meshctl_follows_where_serve_runs_a_replica_unless_another_job_holds_it(
    serve_says: str, recorded: str
) -> None:
    svc = view("svc", SERVICE, JobState.RUNNING, service_attempt({"svc/r0": "n1"},
               replicas_wanted=1), 100)  # fmt: skip
    train = view("tr", TRAIN, JobState.RUNNING, train_attempt(("n2",)), 10)
    seen = {"svc": ServeSeen("RUNNING", running=1, ongoing=1.0, nodes=(serve_says,))}
    step = decide(World(NOW, observed(TRAINING), (svc, train), serve=seen), rules())
    changes = [c for c in step.services if c.job_id == "svc"]
    where = changes[0].allocations[0].node if changes else "n1"
    assert where == recorded


def test_a_replica_whose_node_is_down_goes_and_is_placed_again():
    svc = view("svc", SERVICE, JobState.RUNNING, service_attempt({"svc/r0": "n1"},
               replicas_wanted=1), 100)  # fmt: skip
    pools = observed()
    nodes = tuple(replace(n, alive=n.name != "n1") for n in pools["onprem"].nodes)
    pools = {"onprem": replace(pools["onprem"], nodes=nodes)}
    seen = {"svc": ServeSeen("RUNNING", running=0, ongoing=1.0)}
    step = decide(World(NOW, pools, (svc,), serve=seen), rules())
    (change,) = step.services
    assert change.replica_ids == ("svc/r1",)  # r0 went with n1; r1 took a node that is up
    assert change.allocations[0].node in ("n2", "n3")
    assert "svc/r0 gone: its node is down" in change.why


def test_a_pool_that_does_not_answer_keeps_its_replicas():
    svc = view("svc", SERVICE, JobState.RUNNING, service_attempt({"svc/r0": "n1"},
               replicas_wanted=1), 100)  # fmt: skip
    pools = {"onprem": PoolObservation("onprem", False, "connection refused")}
    step = decide(World(NOW, pools, (svc,)), rules())
    assert all(c.replica_ids == ("svc/r0",) for c in step.services)
