"""Provisioning that never leaks: what the cloud side does with instances its provider lists
and its records do not account for, and with terminations not yet confirmed. Pure.

A controller can die between any two steps of a launch or a teardown. What it leaves behind
is found by comparing the provider's listing (instances tagged with this mesh) with the
store, on the first ``watch`` after a start and every ``SWEEP_S`` after that:

- an instance no record owns, whose launch is not in flight here (the controller died
  between the launch and its record): **adopted** when its job still waits (recorded
  ``joining``, then joined as any other), else **terminated** (recorded ``terminating``);
- a record ``terminating`` (recorded before the provider was asked): ``terminated`` once the
  provider no longer lists the instance or lists it terminated; asked again while it is
  still listed running ``RETERMINATE_S`` after the last ask (the controller died before the
  call, or the call was lost).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from meshctl.clouds.base import Instance
from meshctl.state.records import Event, InstanceRecord, InstanceState, JobState

SWEEP_S = 60.0  # how often a pool with no live record is listed for leaks
RETERMINATE_S = 30.0  # a termination the provider has not carried out is asked again
WAITING = frozenset({JobState.PENDING, JobState.ADMITTED, JobState.REQUEUED})


@dataclass(frozen=True, slots=True)
class Orphan:
    instance: Instance
    fate: Literal["adopt", "terminate"]
    why: str


def orphans(
    listed: Iterable[Instance],
    records: Mapping[str, InstanceRecord],
    in_flight: Callable[[str], bool],
    job_state: Callable[[str], JobState | None],
) -> list[Orphan]:
    """The listed instances no record owns (by id), whose launch is not in flight, each
    with its fate: adopted for a job that still waits, else terminated."""
    found = []
    for instance in listed:
        if instance.id in records or instance.state in ("terminated", "preempted"):
            continue
        if in_flight(instance.request_id):
            continue  # launched just now, recorded in a moment
        job = instance.labels.get("job")
        state = job_state(job) if job else None
        if state in WAITING:
            why = f"launched for {job}, which still waits; its record was never written"
            found.append(Orphan(instance, "adopt", why))
        else:
            owner = f"its job {job} is {state.value}" if job and state else "no job waits for it"
            found.append(Orphan(instance, "terminate", f"owned by no record; {owner}"))
    return found


def confirmed(record: InstanceRecord, listed: Instance | None) -> bool:
    """Whether a ``terminating`` instance is gone for good at its provider."""
    return listed is None or listed.state in ("terminated", "preempted")


def ask_again(record: InstanceRecord, listed: Instance | None, now_s: float) -> bool:
    """Whether to ask the provider again to terminate a ``terminating`` instance."""
    if confirmed(record, listed) or listed is None or listed.state == "stopping":
        return False
    return now_s - record.updated_at_s >= RETERMINATE_S


def recorded(orphan: Orphan, pool: str, provider: str, now: float) -> tuple[InstanceRecord, Event]:
    """The record an orphan gets (``joining`` when adopted, else ``terminating``) and the
    event that says so."""
    instance, adopt = orphan.instance, orphan.fate == "adopt"
    state = InstanceState.JOINING if adopt else InstanceState.TERMINATING
    record = InstanceRecord(
        instance.id, pool, provider, instance.request_id, instance.node_type, state,
        instance.launched_at_s or now, now, spot=instance.spot,
    )  # fmt: skip
    kind = "instance.adopted" if adopt else "instance.swept"
    message = f"{instance.id} in {pool}: {orphan.why}"
    return record, Event(now, kind, instance.labels.get("job"), message)
