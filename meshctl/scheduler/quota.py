"""Whether a job would take its team past its quota: GPU memory, then GPUs beyond what the
team may borrow from its cohort now (``meshctl.policy.tenancy``). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from meshctl.model.policy import TeamQuota
from meshctl.policy.tenancy import TeamUsages, borrowable_gpus
from meshctl.scheduler.request import Request


def over_quota(
    team: str,
    req: Request,
    used: Sequence[float],  # the team's GPUs, CPUs, memory GiB, GPU memory GiB in use
    quotas: Mapping[str, TeamQuota],
    usage: TeamUsages,
) -> str | None:
    """Why the job waits for its team's quota; None when it fits."""
    quota = quotas.get(team)
    if quota is None:
        return None
    if quota.gpu_memory_gib is not None:
        memory = used[3] + req.gpu_memory_gib * req.total_gpus
        if memory > quota.gpu_memory_gib + 1e-9:
            return (
                f"team {team} over its GPU memory quota: {memory:g} GiB > {quota.gpu_memory_gib:g}"
            )
    need = used[0] + req.total_gpus
    if need <= quota.gpus + 1e-9:
        return None
    borrowable = borrowable_gpus(team, quotas, usage)
    if need - quota.gpus <= borrowable + 1e-9:
        return None
    return f"team {team} over quota: {need:g} GPUs > {quota.gpus:g} + {borrowable:g} borrowable"
