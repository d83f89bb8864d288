"""The lending ledger: which elastic job lent how many GPUs to which job, from when to when,
and the work it lost; and what the loans make of the lender's size.

A ``Shrink`` in a plan opens a loan per node lent (``open``). A loan closes when its borrower
has ended (finished, failed, cancelled: no longer running, leaving or waiting), or its lender
has (``closing``). While loans are open the lender runs with ``size`` nodes: its most, less
what it lends, never below its least; once they close it is below its size, and ``growth``
is what the scheduler is asked for to grow it back (``Pending.grows_in``): ahead of queued
work of lower priority, onto free nodes of its pool. The controller keeps the loans in its
store, the simulator in memory; both decide with these functions.

Pure: times are seconds passed in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from meshctl.lifecycle.actions import Leave
from meshctl.scheduler import Pending, Request, Running


@dataclass(frozen=True, slots=True)
class Loan:
    id: str  # "<lender>:<node>:<opened_at_s>": one per node lent
    lender: str
    borrower: str
    pool: str
    node: str
    gpus: float
    opened_at_s: float
    closed_at_s: float | None = None
    lost_gpu_s: float = 0.0  # the lender's work lost when it stopped to lend (GPU-seconds)

    @property
    def open(self) -> bool:
        return self.closed_at_s is None

    def gpu_s(self, now_s: float) -> float:
        """GPU-seconds lent so far (to its close, if closed)."""
        end = self.closed_at_s if self.closed_at_s is not None else now_s
        return max(0.0, end - self.opened_at_s) * self.gpus


def opened(leave: Leave, lender: Running, now_s: float, lost_gpu_s: float = 0.0) -> list[Loan]:
    """The loans a resize that lends opens: one per node, with the GPUs the lender held there;
    the work it loses is booked to the first."""
    gpus = {a.node: a.gpus() for a in lender.allocations}
    return [
        Loan(
            f"{lender.job_id}:{node}:{now_s:.3f}",
            lender.job_id,
            borrower,
            lender.pool,
            node,
            gpus.get(node, 0.0),
            now_s,
            lost_gpu_s=lost_gpu_s if i == 0 else 0.0,
        )
        for i, (node, borrower) in enumerate(leave.lent)
    ]


def closing(loans: Iterable[Loan], active: set[str], now_s: float) -> list[Loan]:
    """The open loans to close now, closed: their borrower or their lender is no longer
    ``active`` (running, leaving or waiting)."""
    return [
        replace(loan, closed_at_s=now_s)
        for loan in loans
        if loan.open and (loan.borrower not in active or loan.lender not in active)
    ]


def lent_nodes(loans: Iterable[Loan]) -> Counter[str]:
    """Per lender: the nodes it lends now (its open loans)."""
    return Counter(loan.lender for loan in loans if loan.open)


def size(most: int, least: int, lent: int) -> int:
    """Nodes an elastic job runs with while it lends ``lent``: its most less those, at least
    its least."""
    return max(least, most - lent)


def sized(request: Request, nodes: int) -> Request:
    """The job's request at ``nodes`` nodes (its size now)."""
    return request if request.nodes == nodes else replace(request, nodes=nodes)


def growth(job: Running, wanted: int, submitted_at_s: float) -> Pending | None:
    """What a running elastic job below ``wanted`` nodes asks the scheduler for: the nodes it
    lacks in its pool, none it holds; None at its size, or while it is leaving."""
    have = len(job.allocations)
    if job.leaving or have >= wanted:
        return None
    return Pending(
        job.job_id,
        job.team,
        job.priority,
        sized(job.request, wanted - have),
        submitted_at_s,
        grows_in=job.pool,
        holds=tuple(a.node for a in job.allocations),
    )


def totals(loans: Sequence[Loan], now_s: float) -> tuple[float, float]:
    """(GPU-hours lent, GPU-hours of work lost to lending) over these loans."""
    return (
        sum(loan.gpu_s(now_s) for loan in loans) / 3600.0,
        sum(loan.lost_gpu_s for loan in loans) / 3600.0,
    )
