"""A fungible request's decision (``Request.options``: one request per model it may be met
as, fastest first): a free place for any option first, in their order; then preemption or a
launch for each; else it waits as the first that could run. None could ever run: unschedulable,
with every option's reason. Pure, like the cycle whose stages it runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Literal

from meshctl.scheduler.plan import Decision
from meshctl.scheduler.request import Request
from meshctl.scheduler.snapshot import Pending

# Of a decision: ``place`` stops after the placement (None: no place now, though one could
# be), ``act`` tries only preemption and a launch (None: neither), ``wait`` only waits.
Stage = Literal["all", "place", "act", "wait"]
DecideOne = Callable[[Pending, Stage], Decision | None]


def decide_any(job: Pending, decide_one: DecideOne) -> Decision:
    variants = [replace(job, request=option) for option in job.request.options]
    blocked: list[tuple[Pending, Decision]] = []
    open_: list[Pending] = []
    for variant in variants:
        decision = decide_one(variant, "place")
        if decision is None:
            open_.append(variant)
        elif decision.status == "placed":
            return decision
        else:
            blocked.append((variant, decision))
    for variant in open_:
        decision = decide_one(variant, "act")
        if decision is not None:
            return decision
    if open_:
        decision = decide_one(open_[0], "wait")
        assert decision is not None
        return decision
    waiting = [d for _, d in blocked if d.status != "unschedulable"]
    if waiting:
        return waiting[0]
    reasons = "; ".join(f"as {_option(v.request)}: {d.reason}" for v, d in blocked)
    blockers = {d.blocked_by for _, d in blocked}  # one for every option: that; else its size
    blocker = blockers.pop() if len(blockers) == 1 else None
    return Decision(
        job.job_id, "unschedulable", f"no option fits ({reasons})", blocked_by=blocker or "size"
    )


def _option(request: Request) -> str:
    """One option of a fungible request, as a message says it: 6 x MI300X."""
    return f"{request.gpus:g} x {' or '.join(request.accelerator_names) or 'any'}"
