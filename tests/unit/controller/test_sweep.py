"""Provisioning that never leaks: the controller dies at each step of a launch or a teardown
(a failpoint, stopped short of SIGKILL here), a new one starts over the same store and
provider, and after one reconcile no instance runs that the store does not own; a
termination counts only once the provider confirms it. Plus the sweep's rules as tables."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from meshctl.clouds.base import Instance
from meshctl.controller import failpoints
from meshctl.controller.burst import Burst
from meshctl.controller.deciding.step import Launch, Teardown
from meshctl.controller.sweep import RETERMINATE_S, SWEEP_S, ask_again, confirmed, orphans
from meshctl.state import InstanceRecord, JobRecord, JobState, MemoryStore
from tests.unit.controller.test_loop import clouds_mesh, queue

pytestmark = pytest.mark.unit
NOW = 1_800_000_000.0


class Died(BaseException):
    """The controller's death at a failpoint (no ``except Exception`` catches it)."""


@pytest.fixture
def dying(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    def die() -> None:
        raise Died

    monkeypatch.setattr(failpoints, "die", die)
    return monkeypatch


def started(store: MemoryStore, world: tuple[Any, Any, Any, Any]) -> Burst:
    """A controller's cloud side, as a (re)start builds it: nothing in flight, a sweep due."""
    mesh, catalogs, _, clouds = world
    return Burst(store, mesh, catalogs, clouds, None)


def unowned(store: MemoryStore, clouds: dict[str, Any]) -> list[str]:
    owned = {r.id for r in store.list(InstanceRecord) if r.state in ("joining", "ready")}
    return [i.id for c in clouds.values() for i in c.list_instances("m") if i.id not in owned]


@pytest.mark.parametrize(
    ("point", "cancelled", "head", "expected"),
    [
        ("before-launch", False, None, set()),
        ("after-launch", False, None, {"ready"}),  # adopted (the job still waits), joined
        ("after-launch", True, None, {"terminated"}),  # swept: nothing waits for it any more
        ("after-join", False, None, {"ready"}),
        ("mid-teardown", False, None, {"terminated"}),
        ("after-launch", False, "m7i.large", {"ready"}),  # its own head, adopted
        ("after-launch", True, "m7i.large", {"terminated"}),
        ("after-join", False, "m7i.large", {"ready"}),  # the head; its workers come next
        ("mid-teardown", False, "m7i.large", {"terminated", "ready"}),  # the head: next time
    ],
    ids=["before the launch: nothing to find",
         "after the launch, before its record: adopted and joined",
         "after the launch, its job cancelled since: terminated",
         "after the join, before the dispatch: ready", "mid-teardown: confirmed terminated",
         "its own head launched, not recorded: adopted",
         "its own head launched, its job cancelled since: terminated",
         "its own head joined, before the workers: ready",
         "mid-teardown, the worker went: the head stays for the next teardown"],
)  # fmt: skip
def test_a_controller_killed_at_each_step_leaks_nothing_after_a_restart(
    dying: pytest.MonkeyPatch, point: str, cancelled: bool, head: str | None, expected: set[str]
) -> None:
    world = clouds_mesh(head=head)
    clouds = world[3]
    store = MemoryStore()
    job = queue(store, "spill")
    want = Launch(job.id, "east", "g6.xlarge", 1, False, 0.8, f"burst-{job.id}-1")
    if point == "mid-teardown":
        assert started(store, world).launch(want, NOW) is None
    dying.setenv("MESHCTL_FAILPOINT", point)
    first = started(store, world)
    ids = tuple(r.id for r in store.list(InstanceRecord))
    step = (
        (lambda: first.teardown(Teardown("east", ids, "idle"), NOW + 1))
        if point == "mid-teardown"
        else (lambda: first.launch(want, NOW))
    )
    with pytest.raises(Died):
        step()
    dying.delenv("MESHCTL_FAILPOINT")
    if cancelled:
        current = store.get(JobRecord, job.id)
        assert current is not None
        store.update(replace(current, state=JobState.CANCELLED), expected_version=current.version)
    again = started(store, world)
    again.watch(NOW + 2)  # the reconcile
    assert unowned(store, clouds) == []
    again.watch(NOW + 3)  # what was asked to go is confirmed gone
    assert {r.state.value for r in store.list(InstanceRecord)} == expected


def instance(id_: str, job: str | None = "j", state: str = "running") -> Instance:
    labels = {"mesh": "m", "pool": "east", "request": f"burst-{job}-1"}
    if job:
        labels["job"] = job
    return Instance(id_, "east", "g6.xlarge", "us-east-1a", state, False, f"burst-{job}-1",  # type: ignore[arg-type]
                    NOW, "", labels)  # fmt: skip


def record(id_: str, state: str = "ready", updated_at_s: float = NOW) -> InstanceRecord:
    return InstanceRecord(id_, "east", "aws", "burst-j-1", "g6.xlarge", state, NOW, updated_at_s)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("listed", "in_flight", "job_state", "fate"),
    [
        (instance("i-1"), False, JobState.PENDING, "adopt"),
        (instance("i-1"), False, JobState.REQUEUED, "adopt"),
        (instance("i-1"), False, JobState.SUCCEEDED, "terminate"),
        (instance("i-1"), False, None, "terminate"),
        (instance("i-1", job=None), False, None, "terminate"),
        (instance("i-1"), True, JobState.PENDING, None),
        (instance("i-0"), False, JobState.PENDING, None),
        (instance("i-1", state="terminated"), False, None, None),
    ],
    ids=["its job waits: adopted", "its job was requeued: adopted",
         "its job is done: terminated", "its job is gone: terminated",
         "no job at all: terminated", "its launch is in flight here: left alone",
         "a record owns it: left alone", "terminated already: left alone"],
)  # fmt: skip
def test_what_becomes_of_an_instance_no_record_accounts_for(
    listed: Instance, in_flight: bool, job_state: JobState | None, fate: str | None
) -> None:
    found = orphans([listed], {"i-0": record("i-0")}, lambda _: in_flight, lambda _: job_state)
    assert [o.fate for o in found] == ([fate] if fate else [])


@pytest.mark.parametrize(
    ("listed", "updated_ago_s", "done", "again"),
    [
        (None, 0.0, True, False),
        (instance("i-0", state="terminated"), 0.0, True, False),
        (instance("i-0", state="stopping"), 600.0, False, False),
        (instance("i-0"), RETERMINATE_S - 1, False, False),
        (instance("i-0"), RETERMINATE_S, False, True),
    ],
    ids=["no longer listed: confirmed", "listed terminated: confirmed",
         "stopping: on its way, not asked again", "running, asked just now: wait",
         "still running long after the ask: asked again"],
)  # fmt: skip
def test_a_termination_counts_once_the_provider_confirms_it(
    listed: Instance | None, updated_ago_s: float, done: bool, again: bool
) -> None:
    going = record("i-0", "terminating", NOW - updated_ago_s)
    assert confirmed(going, listed) is done
    assert ask_again(going, listed, NOW) is again


def test_a_watch_between_sweeps_reads_open_instances_only_not_their_history() -> None:
    """The instances meshctl ended stay in the store for the ledger; a watch reads them only
    when it sweeps (every ``SWEEP_S``), to tell an orphan from an instance it ended."""
    from tests.unit.controller.test_history import Counting

    world = clouds_mesh()
    store = MemoryStore()
    store.create_all([record(f"i-old{n}", "terminated", NOW - 86_400) for n in range(200)])
    store.create_all([record("i-1", "ready")])
    counting = Counting(store)
    burst = Burst(counting, *world[:2], world[3], None)  # type: ignore[arg-type]
    burst.watch(NOW)  # the first watch sweeps
    swept = counting.read["list InstanceRecord"]
    assert swept >= 201
    counting.read.clear()
    burst.watch(NOW + SWEEP_S / 2)
    assert counting.read["list InstanceRecord"] == 1
    counting.read.clear()
    burst.watch(NOW + SWEEP_S)  # the next sweep
    assert counting.read["list InstanceRecord"] >= 201
