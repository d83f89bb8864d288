"""A train job whose node died goes on inside its attempt on a free node of its pool, when it
can; otherwise it is evicted and resumes from its latest checkpoint in a new attempt.

It can when its driver, and with it Ray Train's controller, lives off its workers' nodes
(``drivers_apart``: its pool has a head that takes no work) and every node it lost has a
stand-in: a node of the same pool, up, in service and wholly free, that holds what the job
held on the lost one (``stand_ins``). The smallest that does is taken (fewest GPUs, then CPUs,
memory, then name), so large nodes stay free for large jobs. Ray Train then starts the job's
workers again on the new nodes from its latest checkpoint (``meshctl.workload.train.nominations``):
the work since that checkpoint is lost, as on any failure, but the job does not wait in the
queue again and keeps its other nodes. Pure: the controller and the simulator each say which
nodes they see free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from meshctl.model.mesh import CloudPoolBase, LocalPool, Pool
from meshctl.scheduler import Allocation


@dataclass(frozen=True, slots=True)
class Free:
    """A node of the pool that is up, in service and holds nothing: what it has."""

    name: str
    gpus: int
    cpus: float
    memory_gib: float


def drivers_apart(pool: Pool) -> bool:
    """Whether jobs' drivers can run where no job's workers do: a local pool's head takes no
    work; a cloud pool with a ``head_node_type`` has a head of its own. An existing Ray
    cluster's head is its own business: no."""
    if isinstance(pool, LocalPool):
        return True
    if isinstance(pool, CloudPoolBase):
        return pool.head_node_type is not None
    return False


def replaceable_pool(pool: Pool) -> bool:
    """Whether a train job in ``pool`` with the pool's checkpoint storage may have a dead node
    replaced inside its attempt (the simulator's test; the controller's also accepts a job's
    own storage)."""
    return drivers_apart(pool) and pool.checkpoint_storage is not None


def stand_ins(
    allocations: Sequence[Allocation], lost: Sequence[str], free: Sequence[Free]
) -> tuple[Allocation, ...] | None:
    """The job's allocations with each lost node's moved to a free node that holds it, in
    their order; None when one of them has none."""
    left = sorted(free, key=lambda f: (f.gpus, f.cpus, f.memory_gib, f.name))
    out = []
    for held in allocations:
        if held.node not in lost:
            out.append(held)
            continue
        found = next((f for f in left if _holds(f, held)), None)
        if found is None:
            return None
        left.remove(found)
        indices = tuple(range(len(held.gpu_indices)))
        out.append(replace(held, node=found.name, gpu_indices=indices))
    return tuple(out)


def _holds(node: Free, held: Allocation) -> bool:
    return (
        node.gpus >= len(held.gpu_indices)
        and node.cpus >= held.cpus
        and node.memory_gib >= held.memory_gib
    )
