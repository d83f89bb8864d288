"""The loop over a real MemoryStore and an in-memory pool: crash points, cancel, events.

The pool here is a stand-in for a Ray cluster's Jobs API (a dict of submissions); the same
scenarios run against real Ray clusters in tests/integration/controller.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from meshctl.controller.deciding.decide import Rules
from meshctl.controller.loop import Controller
from meshctl.controller.submit import Admission, enqueue
from meshctl.model import Job
from meshctl.pools.emulated import node_name
from meshctl.pools.observed import ObservedJob, PoolObservation, Submission
from meshctl.pools.ray import LogChunk, PoolUnavailable
from meshctl.scheduler.plan import Decision
from meshctl.state import (
    AttemptRecord,
    InstanceRecord,
    JobRecord,
    JobState,
    MemoryStore,
    PoolRecord,
)
from tests import builders
from tests.builders import (
    aws_pool,
    batch_document,
    observed_node,
    observed_pool,
    resources,
)
from tests.conftest import wait_until

from .test_decide import MESH

pytestmark = pytest.mark.unit


class Crash(BaseException):
    """The controller process dying at this point."""


@dataclass
class FakePool:
    jobs: dict[str, ObservedJob] = field(default_factory=dict)
    submitted: list[str] = field(default_factory=list)
    crash_after_submit: bool = False
    logs: dict[str, bytes] = field(default_factory=dict)  # driver logs, by submission id

    def observe(self) -> PoolObservation:
        nodes = (observed_node(n, ray_node_id=n) for n in ("n1", "n2"))
        return observed_pool("onprem", *nodes, jobs=self.jobs.values())

    def submit(self, submission: Submission) -> str:
        if submission.submission_id in self.jobs:
            return "adopted"
        self.submitted.append(submission.submission_id)
        self.jobs[submission.submission_id] = ObservedJob(submission.submission_id, "PENDING")
        if self.crash_after_submit:
            raise Crash()
        return "submitted"

    def stop(self, submission_id: str) -> bool:
        self.jobs[submission_id] = ObservedJob(submission_id, "STOPPED")
        return True

    def read_log(self, submission_id: str, offset: int, limit: int) -> LogChunk | None:
        data = self.logs.get(submission_id)
        return None if data is None else LogChunk(data[offset : offset + limit], len(data))

    def finish(self, status: str = "SUCCEEDED") -> None:
        for sid in self.jobs:
            if self.jobs[sid].status in ("PENDING", "RUNNING"):
                self.jobs[sid] = ObservedJob(sid, status)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def queue(store: MemoryStore, name: str = "a", gpus: float = 1) -> JobRecord:
    job = Job.model_validate(batch_document(name, resources=resources(gpus)))
    admission = Admission(0, None, Decision(name, "placed"))
    return enqueue(store, job, admission, None, Path("/no-packages"), 1_800_000_000.0)


def controller(store: MemoryStore, pool: FakePool, clock: Clock) -> Controller:
    return Controller(store, Rules(MESH, {}, None), {"onprem": pool}, clock=clock)


def test_a_crash_between_submit_and_record_runs_the_job_exactly_once() -> None:
    store, pool, clock = MemoryStore(), FakePool(crash_after_submit=True), Clock()
    record = queue(store)
    with pytest.raises(Crash):
        controller(store, pool, clock).cycle()
    [attempt] = store.list(AttemptRecord)
    assert attempt.state == "submitting"  # recorded before Ray heard of it
    pool.crash_after_submit = False
    restarted = controller(store, pool, clock)
    restarted.cycle()  # adopts the submission Ray already has
    restarted.cycle()
    assert pool.submitted == [f"meshctl-{record.id}-1"]
    assert store.get(JobRecord, record.id).state is JobState.DISPATCHED  # type: ignore[union-attr]
    pool.finish()
    restarted.cycle()
    assert store.get(JobRecord, record.id).state is JobState.SUCCEEDED  # type: ignore[union-attr]
    assert len(store.list(AttemptRecord)) == 1


def test_a_crash_after_recording_but_before_submitting_submits_once_on_restart() -> None:
    store, pool, clock = MemoryStore(), FakePool(), Clock()
    record = queue(store)

    def die(submission: Submission) -> str:
        raise Crash()

    broken = FakePool()
    broken.submit = die  # type: ignore[method-assign]
    with pytest.raises(Crash):
        controller(store, broken, clock).cycle()
    assert pool.submitted == []
    again = controller(store, pool, clock)
    again.cycle()
    again.cycle()
    assert pool.submitted == [f"meshctl-{record.id}-1"]


def test_every_transition_is_an_event_in_order() -> None:
    store, pool, clock = MemoryStore(), FakePool(), Clock()
    record = queue(store)
    loop = controller(store, pool, clock)
    loop.cycle()
    pool.jobs = {k: ObservedJob(k, "RUNNING") for k in pool.jobs}
    loop.cycle()
    pool.finish()
    loop.cycle()
    kinds = [e.kind for e in store.events(job_id=record.id)]
    assert kinds == [
        "job.pending",
        "job.admitted",
        "job.dispatched",
        "job.running",
        "job.succeeded",
    ]


def test_cancelling_a_running_job_stops_it_and_it_stays_cancelled() -> None:
    store, pool, clock = MemoryStore(), FakePool(), Clock()
    record = queue(store)
    loop = controller(store, pool, clock)
    loop.cycle()
    current = store.get(JobRecord, record.id)
    assert current is not None
    store.update(replace(current, state=JobState.CANCELLED), expected_version=current.version)
    loop.cycle()
    assert pool.jobs[f"meshctl-{record.id}-1"].status == "STOPPED"
    loop.cycle()
    assert store.get(JobRecord, record.id).state is JobState.CANCELLED  # type: ignore[union-attr]
    [attempt] = store.list(AttemptRecord)
    assert attempt.state == "stopped"


def test_a_decision_is_recorded_once_until_it_changes() -> None:
    store, pool, clock = MemoryStore(), FakePool(), Clock()
    first = queue(store, "first", gpus=4)
    queue(store, "second", gpus=4)
    third = queue(store, "third", gpus=4)
    loop = controller(store, pool, clock)
    for _ in range(3):
        loop.cycle()
    assert [d.outcome for d in store.decisions(job_id=third.id)] == ["pending"]
    assert [d.outcome for d in store.decisions(job_id=first.id)] == ["placed"]


def test_a_submission_its_pool_keeps_refusing_fails_the_job_and_frees_its_gpus() -> None:
    store, clock = MemoryStore(), Clock()
    record = queue(store)

    class Refusing(FakePool):
        def submit(self, submission: Submission) -> str:
            raise RuntimeError("HTTP 400: runtime_env is invalid")

    loop = controller(store, Refusing(), clock)
    for _ in range(10):
        loop.cycle()
    job = store.get(JobRecord, record.id)
    assert job is not None
    assert job.state is JobState.FAILED
    [attempt] = store.list(AttemptRecord)
    assert (attempt.state, attempt.detail.submit_errors) == ("failed", 5)
    assert "refused it 5 times" in store.events(job_id=record.id)[-1].message


def test_a_pool_that_cannot_take_a_submission_yet_makes_the_job_wait_not_fail() -> None:
    """A head whose job agent is still starting answers HTTP 500 "No available agent to
    submit job, please try again later" for as long as it takes (seconds on a loaded machine:
    more than MAX_SUBMIT_ERRORS cycles at 0.5 s). The job waits, its attempt says why, and
    it is submitted once the agent is up, as its first attempt. Meanwhile the pool is shown
    degraded, with Ray's words; once it takes the submission, up again."""
    store, clock = MemoryStore(), Clock()
    record = queue(store)
    agent = "Request failed with status code 500: No available agent to submit job"

    class Starting(FakePool):
        refusals = 12

        def submit(self, submission: Submission) -> str:
            if self.refusals:
                self.refusals -= 1
                raise PoolUnavailable(f"onprem: submit {submission.submission_id}: {agent}")
            return super().submit(submission)

    pool = Starting()
    loop = controller(store, pool, clock)
    while pool.refusals:
        loop.cycle()
        waiting = store.get(JobRecord, record.id)
        assert waiting is not None
        assert waiting.state is JobState.ADMITTED
    [attempt] = store.list(AttemptRecord)
    assert attempt.detail.submit_errors == 0
    assert attempt.reason.startswith("waiting for its pool: ")
    assert "No available agent" in attempt.reason
    degraded = store.get(PoolRecord, "onprem")
    assert degraded is not None
    assert (degraded.state, degraded.observed["error"]) == (
        "degraded",
        f"onprem: submit meshctl-{record.id}-1: {agent}",
    )
    assert degraded.observed["available"] is True  # still placed on: its jobs wait there
    for _ in range(2):  # the next submission: next cycle, or the one after
        loop.cycle()
    dispatched = store.get(JobRecord, record.id)
    assert dispatched is not None
    assert dispatched.state is JobState.DISPATCHED
    assert pool.submitted == [f"meshctl-{record.id}-1"]
    [attempt] = store.list(AttemptRecord)
    assert (attempt.state, attempt.reason) == ("pending", "submitted")  # no longer waiting
    loop.cycle()
    up = store.get(PoolRecord, "onprem")
    assert up is not None
    assert (up.state, up.observed["error"]) == ("up", "")


def clouds_mesh(max_nodes: int = 2, head: str | None = None) -> tuple[Any, Any, Any, Any]:
    """Two AWS pools (east, west) over fake clouds, the shipped catalogs and policies;
    ``head``: the pools' head_node_type."""
    from meshctl.catalog import load_catalogs
    from meshctl.clouds.fake import FakeCloud
    from meshctl.files.policies import read_policy_files
    from meshctl.policy.compiled import compile_policies
    from tests.conftest import ROOT

    pools = [
        aws_pool(name, region=region, max_nodes=max_nodes, zones=[f"{region}a", f"{region}b"],
                 labels={"tier": "burst"}, idle_minutes=1,
                 **({"head_node_type": head} if head else {}))
        for name, region in (("east", "us-east-1"), ("west", "us-west-2"))
    ]  # fmt: skip
    mesh = builders.mesh(*pools)
    catalogs = {f.provider: f.catalog for f in load_catalogs()}
    shipped = compile_policies(read_policy_files([ROOT / "policies"]).policies)
    return mesh, catalogs, shipped, {"east": FakeCloud(), "west": FakeCloud()}


def bursting(max_nodes: int = 2) -> tuple[MemoryStore, Clock, Any, Controller, Any]:
    from meshctl.controller.burst import Burst

    mesh, catalogs, shipped, clouds = clouds_mesh(max_nodes)
    store, clock = MemoryStore(), Clock()
    burst = Burst(store, mesh, catalogs, clouds, None)
    loop = Controller(store, Rules(mesh, catalogs, shipped), {}, clock=clock, burst=burst)
    return store, clock, clouds, loop, burst


def test_a_preempted_instance_is_never_revived_and_a_new_one_replaces_it() -> None:
    store, clock, clouds, loop, _ = bursting()
    queue(store, "spill")
    loop.cycle()
    [first] = clouds["east"].list_instances("m")
    clouds["east"].interrupt(first.id)
    clock.now += 120  # past the listing lag
    loop.cycle()  # seen preempted: terminated, left
    loop.cycle()  # the job is still queued: a new generation of its request
    states = {r.id: r.state for r in store.list(InstanceRecord)}
    assert states[first.id] == "interrupted"
    assert [s for i, s in states.items() if i != first.id] == ["ready"]
    assert first.id not in {i.id for i in clouds["east"].list_instances("m")}


def test_a_types_cap_counts_the_instances_already_running() -> None:
    store, _, clouds, loop, _ = bursting(max_nodes=1)
    queue(store, "one")
    queue(store, "two")
    for _ in range(3):
        loop.cycle()
    assert len(clouds["east"].list_instances("m")) == 1  # east's cap of one g6.xlarge holds
    assert len(clouds["west"].list_instances("m")) == 1  # the second job went west


def test_a_queued_job_that_can_never_run_does_not_keep_an_idle_pool_up() -> None:
    store, clock, clouds, loop, _ = bursting()
    spill = queue(store, "spill")
    loop.cycle()
    assert clouds["east"].list_instances("m")
    current = store.get(JobRecord, spill.id)
    assert current is not None
    store.update(replace(current, state=JobState.CANCELLED), expected_version=current.version)
    queue(store, "huge", gpus=64)  # no pool can ever hold it
    clock.now += 3600
    loop.cycle()
    assert clouds["east"].list_instances("m") == []
    assert {r.state for r in store.list(InstanceRecord)} == {"terminating"}  # asked to go
    loop.cycle()  # the next watch sees it gone: confirmed
    assert {r.state for r in store.list(InstanceRecord)} == {"terminated"}


def test_a_region_out_of_capacity_fails_over_to_the_next_eligible_pool() -> None:
    """Every zone of us-east-1 is out of g6.xlarge: the launch fails there, the stock-out is
    remembered, and the next cycle's plan launches in us-west-2 instead."""
    from meshctl.app.jobdata import offers_tried
    from meshctl.controller.burst import Burst

    mesh, catalogs, shipped, clouds = clouds_mesh()
    east, west = clouds["east"], clouds["west"]
    east.stock_out("us-east-1a")
    east.stock_out("us-east-1b")
    store, clock = MemoryStore(), Clock()
    record = queue(store, "spill")
    burst = Burst(store, mesh, catalogs, {"east": east, "west": west}, None)
    loop = Controller(store, Rules(mesh, catalogs, shipped), {}, clock=clock, burst=burst)
    loop.cycle()
    assert east.list_instances("m") == []
    assert ("east", "g6.xlarge") in burst.blocked(clock.now)
    loop.cycle()
    [instance] = west.list_instances("m")
    assert (instance.zone, instance.labels["job"]) == ("us-west-2a", record.id)
    kinds = [e.kind for e in store.events()]
    assert kinds.count("instance.refused") == 2  # both zones of us-east-1
    assert "instance.launched" in kinds
    tried = offers_tried(store.events(job_id=record.id))  # what explain lists
    assert [(o["pool"], o["zone"], o["node_type"], o["outcome"]) for o in tried] == [
        ("east", "us-east-1a", "g6.xlarge", "stock-out"),
        ("east", "us-east-1b", "g6.xlarge", "stock-out"),
        ("west", "us-west-2a", "g6.xlarge", "launched"),
    ]


def test_a_spot_notice_marks_the_instance_reclaiming_until_it_is_taken_back() -> None:
    store, _, clouds, loop, burst = bursting()
    queue(store, "spill")
    loop.cycle()
    [instance] = clouds["east"].list_instances("m")
    clouds["east"].notice(instance.id)
    loop.cycle()
    [record] = store.list(InstanceRecord)
    assert record.state == "reclaiming"
    [(where, deadline)] = burst.reclaiming().items()
    assert where == ("east", node_name(instance.id))
    assert deadline == record.updated_at_s + clouds["east"].notice_s
    assert [e.kind for e in store.events()].count("instance.notice") == 1
    loop.cycle()  # still under notice: nothing new
    assert [e.kind for e in store.events()].count("instance.notice") == 1
    clouds["east"].interrupt(instance.id)
    loop.cycle()
    assert store.get(InstanceRecord, instance.id).state == "interrupted"  # type: ignore[union-attr]
    assert burst.reclaiming() == {}


@pytest.mark.parametrize(
    ("storage", "written"),
    [("file://{tmp}/ckpt", True), (None, False)],
    ids=["written where its checkpoints are", "no checkpoint storage: only an event"],
)
def test_a_checkpoint_request_is_written_for_the_job_to_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, storage: str | None, written: bool
) -> None:
    from meshctl import workload
    from meshctl.controller.deciding.decide import CheckpointRequest, Step

    store, clock = MemoryStore(), Clock()
    uri = storage.format(tmp=tmp_path) + "/a" if storage else None
    loop = controller(store, FakePool(), clock)
    step = Step(checkpoints=[CheckpointRequest("a", 2, uri, None, "spot notice", clock.now + 60)])
    assert loop.apply(step, clock.now) == []
    [event] = store.events()
    assert event.kind == "job.checkpoint-request"
    if not written:
        assert "no checkpoint storage" in event.message
        return
    monkeypatch.setenv("MESHCTL_CHECKPOINT_URI", str(uri))
    monkeypatch.setenv("MESHCTL_ATTEMPT", "2")
    request = workload.checkpoint_requested(every_s=0)
    assert request is not None
    assert (request["reason"], request["deadline_s"]) == ("spot notice", clock.now + 60)
    monkeypatch.setenv("MESHCTL_ATTEMPT", "3")  # the next attempt: the request was not for it
    assert workload.checkpoint_requested(every_s=0) is None


def test_a_slow_launch_runs_beside_the_cycle_and_is_started_once() -> None:
    import threading

    from meshctl.clouds.fake import FakeCloud

    class Slow(FakeCloud):
        def __init__(self) -> None:
            super().__init__()
            self.release, self.started = threading.Event(), 0

        def launch(self, request: Any) -> Any:
            self.started += 1
            assert self.release.wait(30), "never released"
            return super().launch(request)

    store, _, clouds, loop, burst = bursting()
    burst.background = True
    clouds["east"] = burst.clouds["east"] = Slow()  # type: ignore[index]
    queue(store, "spill")
    try:
        for _ in range(3):  # the cycles go on while the provider takes its time
            loop.cycle()
        assert (clouds["east"].started, store.list(InstanceRecord)) == (1, [])
        assert burst.launching()
        clouds["east"].release.set()
    finally:
        clouds["east"].release.set()
        burst.close()
    [record] = store.list(InstanceRecord)
    assert record.state == "ready"
    assert not burst.launching()


def test_a_health_signal_takes_a_node_out_of_service_and_back() -> None:
    from meshctl.state import NodeRecord

    store, clock, signals = MemoryStore(), Clock(), {"onprem/n1": "GPU XID 79"}
    loop = Controller(store, Rules(MESH, {}, None), {"onprem": FakePool()}, clock=clock,
                      health=lambda: signals)  # fmt: skip
    loop.cycle()  # the nodes are recorded
    loop.cycle()  # and the signal acted on
    node = store.get(NodeRecord, "onprem/n1")
    assert node is not None
    assert (node.state, node.detail.failures, node.detail.reason) == (
        "unhealthy",
        1,
        "GPU XID 79",
    )
    signals.clear()
    loop.cycle()
    node = store.get(NodeRecord, "onprem/n1")
    assert node is not None
    assert (node.state, node.detail.failures) == ("ready", 1)  # a failure stays counted
    kinds = [e.kind for e in store.events()]
    assert (kinds.count("node.unhealthy"), kinds.count("node.healthy")) == (1, 1)


class Agents:
    """What the nodes' agents say this cycle (the controller's pull, without HTTP): a node
    neither unhealthy nor suspect is healthy."""

    def __init__(self) -> None:
        self.unhealthy: dict[str, str] = {}
        self.suspect: dict[str, str] = {}

    def pull(self, observations: Any, now: float) -> Any:
        from meshctl.agent.watch import AgentReport, AgentStatus

        nodes = [f"{p}/{n.name}" for p, seen in observations.items() for n in seen.nodes]
        status = {
            key: AgentStatus("http://agent", "unhealthy" if key in self.unhealthy else "healthy")
            for key in nodes
            if key not in self.suspect
        }
        return AgentReport(dict(self.unhealthy), dict(self.suspect), status)


def test_an_agent_s_verdict_the_operator_overruled_is_ignored_until_it_changes() -> None:
    from meshctl.state import NodeRecord

    store, clock, agents = MemoryStore(), Clock(), Agents()
    overruled: dict[str, str] = {}
    loop = Controller(store, Rules(MESH, {}, None), {"onprem": FakePool()}, clock=clock,
                      agents=agents, overruled=lambda: overruled,  # type: ignore[arg-type]
                      forget_overruled=lambda key: overruled.pop(key))  # fmt: skip

    def state() -> str:
        node = store.get(NodeRecord, "onprem/n1")
        assert node is not None
        return node.state

    loop.cycle()  # the nodes are recorded
    agents.unhealthy["onprem/n1"] = "agent: XID 79 on GPU 0000:1b:00"
    loop.cycle()
    assert state() == "unhealthy"
    overruled["onprem/n1"] = "agent: XID 79 on GPU 0000:1b:00"  # nodes health --healthy
    loop.cycle()
    assert state() == "ready"
    agents.unhealthy["onprem/n1"] = "agent: XID 48 on GPU 0000:1b:00"  # something else
    loop.cycle()
    assert state() == "unhealthy"


def test_an_overruled_verdict_is_forgotten_once_the_agent_says_healthy() -> None:
    """The node was mended: the same words, said again later, take it out again."""
    from meshctl.state import NodeRecord

    store, clock, agents = MemoryStore(), Clock(), Agents()
    xid = "agent: XID 79 on GPU 0000:1b:00"
    overruled: dict[str, str] = {"onprem/n1": xid}
    loop = Controller(store, Rules(MESH, {}, None), {"onprem": FakePool()}, clock=clock,
                      agents=agents, overruled=lambda: overruled,  # type: ignore[arg-type]
                      forget_overruled=lambda key: overruled.pop(key))  # fmt: skip
    agents.unhealthy["onprem/n1"] = xid
    loop.cycle()
    assert overruled == {"onprem/n1": xid}  # still what the agent says: still ignored
    del agents.unhealthy["onprem/n1"]
    loop.cycle()
    assert overruled == {}  # healthy again: nothing left to ignore
    agents.unhealthy["onprem/n1"] = xid
    loop.cycle()
    node = store.get(NodeRecord, "onprem/n1")
    assert node is not None
    assert node.state == "unhealthy"


def test_a_node_lost_is_counted_as_a_failure_of_its_pool() -> None:
    from meshctl.state import NodeRecord

    class Dying(FakePool):
        alive = True

        def observe(self) -> PoolObservation:
            seen = super().observe()
            first = replace(seen.nodes[0], alive=self.alive)
            return replace(seen, nodes=(first, *seen.nodes[1:]))

    store, clock, pool = MemoryStore(), Clock(), Dying()
    loop = controller(store, pool, clock)
    loop.cycle()
    pool.alive = False
    loop.cycle()
    node = store.get(NodeRecord, "onprem/n1")
    assert node is not None
    assert node.detail.failures == 1
    assert node.detail.first_seen_s is not None
    assert node.detail.first_seen_s < clock.now
    assert [e.kind for e in store.events()].count("node.lost") == 1


def test_restarts_ray_train_recovered_from_become_events_once(tmp_path: Path) -> None:
    from meshctl.workload.train.progress import Recorder, record_start

    uri = f"file://{tmp_path}/t"
    recorder = Recorder(uri, None, 1)
    record_start(uri, None, 1, None)
    recorder.reported({"step": 9}, "/ck/9")
    recorder.failed("worker 0: RayActorError('died')\nmore lines")
    store, clock = MemoryStore(), Clock()
    loop = controller(store, FakePool(), clock)
    doc = {"failures": recorder.document["failures"]}
    loop.progress.restarts("t", 1, doc)
    assert [e.kind for e in store.events()] == []  # not resumed yet: nothing to tell
    recorder.reported({"step": 10}, None)  # the workers are back
    doc = {"failures": recorder.document["failures"]}
    loop.progress.restarts("t", 1, doc)
    loop.progress.restarts("t", 1, doc)
    again = controller(store, FakePool(), clock)  # a restarted controller says it no more
    again.progress.restarts("t", 1, doc)
    [event] = store.events()
    assert event.kind == "train.restarted"
    assert "failure at step 9 (worker 0: RayActorError('died'))" in event.message


def test_a_cordoned_node_that_was_unhealthy_comes_back_cordoned_and_counts_once() -> None:
    from meshctl.state import NodeRecord

    store, clock, signals = MemoryStore(), Clock(), {}
    loop = Controller(store, Rules(MESH, {}, None), {"onprem": FakePool()}, clock=clock,
                      health=lambda: signals)  # fmt: skip
    loop.cycle()
    node = store.get(NodeRecord, "onprem/n1")
    assert node is not None
    store.update(replace(node, state="cordoned"), expected_version=node.version)  # the operator
    signals["onprem/n1"] = "GPU XID 79"
    loop.cycle()
    node = store.get(NodeRecord, "onprem/n1")
    assert node is not None
    store.update(replace(node, state="cordoned"), expected_version=node.version)  # again, as
    loop.cycle()  # `nodes cordon` would while the signal is still there: the same failure
    node = store.get(NodeRecord, "onprem/n1")
    assert node is not None
    assert (node.state, node.detail.failures) == ("unhealthy", 1)
    signals.clear()
    loop.cycle()
    node = store.get(NodeRecord, "onprem/n1")
    assert node is not None
    assert node.state == "cordoned"  # what the operator had it at


def test_a_drain_deadline_drains_the_node_and_requeues_its_job() -> None:
    from meshctl.state import NodeRecord

    store, pool, clock = MemoryStore(), FakePool(), Clock()
    loop = controller(store, pool, clock)
    record = queue(store, gpus=4)
    loop.cycle()  # placed, on n1 (the first of two empty nodes)
    loop.cycle()
    [tried] = store.list(AttemptRecord)
    node_id = f"onprem/{tried.detail.allocations[0].node}"
    pool.jobs[tried.submission_id] = ObservedJob(tried.submission_id, "RUNNING")
    node = store.get(NodeRecord, node_id)
    assert node is not None
    detail = replace(node.detail, deadline_s=clock.now + 3)
    store.update(replace(node, state="draining", detail=detail), expected_version=node.version)
    loop.cycle()
    assert store.get(NodeRecord, node_id).state == "draining"  # type: ignore[union-attr]
    for _ in range(6):
        loop.cycle()
    node = store.get(NodeRecord, node_id)
    assert node is not None
    assert node.state == "drained"
    assert pool.jobs[tried.submission_id].status == "STOPPED"
    job = store.get(JobRecord, record.id)
    assert job is not None
    assert job.state is JobState.DISPATCHED
    first, again = sorted(store.list(AttemptRecord), key=lambda a: a.number)
    assert (first.state, again.number) == ("stopped", 2)
    assert f"onprem/{again.detail.allocations[0].node}" != node_id  # not where it drained
    drained = [e for e in store.events() if e.kind == "node.drained"]
    assert [e.message for e in drained] == [f"{node_id}: drain deadline passed; 1 job evicted"]


def test_a_hold_keeps_queued_jobs_queued_until_it_is_lifted() -> None:
    store, pool, clock = MemoryStore(), FakePool(), Clock()
    why: list[str] = ["the mesh is draining"]
    loop = Controller(store, Rules(MESH, {}, None), {"onprem": pool}, clock=clock,
                      hold=lambda: why[0] if why else None)  # fmt: skip
    record = queue(store)
    loop.cycle()
    loop.cycle()
    assert (store.list(AttemptRecord), pool.submitted) == ([], [])
    assert store.decisions(job_id=record.id)[-1].outcome == "held"
    why.clear()
    loop.cycle()
    assert pool.submitted == [f"meshctl-{record.id}-1"]


def running_with_log(
    tmp_path: Path, log: bytes
) -> tuple[MemoryStore, FakePool, Controller, JobRecord, str]:
    """A loop copying logs into ``tmp_path``, and a job of it running that has written
    ``log``, copied once: the store, the pool, the loop, the job and its submission id."""
    from meshctl.controller.logs import LogCopier

    store, pool, clock = MemoryStore(), FakePool(), Clock()
    loop = Controller(store, Rules(MESH, {}, None), {"onprem": pool}, clock=clock,
                      logs=LogCopier(tmp_path))  # fmt: skip
    record = queue(store)
    loop.cycle()
    sid = f"meshctl-{record.id}-1"
    pool.jobs[sid] = ObservedJob(sid, "RUNNING")
    pool.logs[sid] = log
    loop.cycle()
    return store, pool, loop, record, sid


def test_the_loop_copies_the_driver_log_of_a_running_job(tmp_path: Path) -> None:
    from meshctl.controller.logs import read_copy

    _, pool, loop, record, sid = running_with_log(tmp_path, b"hello\n")
    assert read_copy(tmp_path, record.id, 1) == b"hello\n"
    pool.logs[sid] += b"bye\n"
    pool.finish()
    loop.cycle()  # it ended: its log is read to the end
    loop.cycle()
    assert read_copy(tmp_path, record.id, 1) == b"hello\nbye\n"


def test_cloud_spend_is_charged_per_pool_and_team_from_the_launch_on() -> None:
    """The spend the budget rules read and the pool record shows: an instance's hours at its
    type's price (g6.xlarge in us-east-1: 0.8048 USD an hour in the shipped catalog), charged
    to the team of the job it was launched for; a pool launched in this cycle shows 0 now."""
    from meshctl.state import PoolRecord

    store, clock, _, loop, _ = bursting()
    queue(store, "spill")
    loop.cycle()  # launches one g6.xlarge in east
    east = store.get(PoolRecord, "east")
    assert east is not None
    assert (east.observed["spend_usd"], east.observed["spend_usd_by_team"]) == (
        0.0,
        {"default": 0.0},
    )
    clock.now += 3599  # the next cycle is one hour after the launch
    loop.cycle()
    east = store.get(PoolRecord, "east")
    assert east is not None
    assert (east.observed["spend_usd"], east.observed["spend_usd_by_team"]) == (
        0.8048,
        {"default": 0.8048},
    )
    world = loop.world(clock.now)  # the moment that cycle read
    assert (world.spend_usd, world.team_spend_usd) == ({"east": 0.8048}, {"default": 0.8048})


@pytest.mark.parametrize(
    ("token_file", "why"),
    [
        pytest.param("missing", "No such file or directory", id="no such file"),
        pytest.param(".", "Is a directory", id="a folder"),
    ],
)
def test_a_ray_pool_whose_token_file_cannot_be_read_is_unavailable_and_says_why(
    tmp_path: Path, token_file: str, why: str
) -> None:
    """The controller says what the one-off check (meshctl pools check) says, not a guess."""
    from meshctl.controller.runtime import driven, unavailable
    from meshctl.model import Mesh

    path = tmp_path / token_file
    lab = builders.ray_pool("lab", "http://127.0.0.1:9", auth={"token_file": str(path)})
    document = MESH.model_dump(mode="json")
    document["spec"]["pools"].append(lab)
    mesh = Mesh.model_validate(document)
    loop = Controller(
        MemoryStore(), Rules(mesh, {}, None), {}, clock=Clock(),
        resolve=lambda: driven(mesh, tmp_path),
    )  # fmt: skip
    expected = f"token file {path}: {why}"
    assert loop.cycle().unavailable["lab"] == expected
    ray_pool = mesh.pool("lab")
    assert ray_pool is not None
    assert unavailable(ray_pool, tmp_path) == expected


def test_a_budget_crossing_is_an_event_once_and_the_heartbeat_shows_every_budget(tmp_path) -> None:
    from tests.differential.run import controller_side
    from tests.differential.table import TABLE

    [scenario] = [s for s in TABLE if s.name == "a-budget-warns-then-stops-bursting"]
    store = MemoryStore()
    controller_side(scenario, tmp_path, store)
    said = [(e.kind, e.data["budget"]) for e in store.events() if e.kind.startswith("budget.")]
    assert said == [("budget.warn", "cloud"), ("budget.exceeded", "cloud")]
    [exceeded] = [e for e in store.events() if e.kind == "budget.exceeded"]
    assert exceeded.message.startswith("budget cloud (pool:aws) exhausted: bursting stops:")


def test_the_heartbeat_carries_where_each_budget_stands(tmp_path) -> None:
    import json

    from meshctl.controller.burst import Burst

    mesh, catalogs, shipped, clouds = clouds_mesh(2)
    store, clock = MemoryStore(), Clock()
    beat = tmp_path / "beat.json"
    burst = Burst(store, mesh, catalogs, clouds, None)
    loop = Controller(store, Rules(mesh, catalogs, shipped), {}, clock=clock, burst=burst,
                      heartbeat=beat)  # fmt: skip
    loop.cycle()
    budgets = json.loads(beat.read_text())["budgets"]
    assert budgets, "the shipped policies have budgets"
    assert {b["state"] for b in budgets} <= {"ok", "warn", "exceeded"}
    assert all(b["spent_usd"] == 0.0 for b in budgets)  # nothing launched yet


def test_a_stalled_loop_writes_where_each_thread_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cycle stuck in a call that never returns: the loop writes every thread's stack to
    its stall file (the daemon's log), and again while it stays stuck, so that the log says
    where it is stuck."""
    import threading

    from meshctl.controller import loop as loop_module

    monkeypatch.setattr(loop_module, "STALL_S", 0.2)
    store, clock = MemoryStore(), Clock()
    loop = controller(store, FakePool(), clock)
    stuck, release, stop = threading.Event(), threading.Event(), threading.Event()

    def a_call_that_never_returns() -> None:
        stuck.set()
        release.wait(60)

    monkeypatch.setattr(loop, "cycle", a_call_that_never_returns)
    path = tmp_path / "controller.log"
    with path.open("w") as stalls:
        runner = threading.Thread(
            target=loop.run, args=(0.05, stop), kwargs={"watch": False, "stalls": stalls}
        )
        runner.start()
        try:
            assert stuck.wait(60)
            wait_until(  # written, and again while it stays stuck
                lambda: f"the stacks twice: {path.read_text()!r}",
                lambda: path.read_text().count("a_call_that_never_returns") >= 2,
            )
        finally:
            stop.set()
            release.set()
            runner.join(60)
        assert not runner.is_alive()
    assert path.read_text().startswith("Timeout (0:00:00.25")
