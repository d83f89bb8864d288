"""``meshctl explain JOB.yaml``: where the scheduler would put a job now, or why it would wait.

Until the controller keeps jobs, this explains a job file against the mesh as configured (or
at a ``MeshState`` moment): the policy verdict, then one scheduling cycle with the job pending.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from meshctl.cli.context import app_context, read_moment
from meshctl.cli.options import (
    JobFileArgument,
    MomentOption,
    NowOption,
    OutputOption,
    PoliciesOption,
)
from meshctl.cli.render import Column, Output

if TYPE_CHECKING:
    from meshctl.scheduler import Decision, Plan


def explain(
    ctx: typer.Context,
    job_file: JobFileArgument,
    mesh_file: MomentOption = None,
    policies: PoliciesOption = None,
    now: NowOption = None,
    output: OutputOption = Output.table,
) -> None:
    """Why a job runs where it would run, or why it would wait: filters, scores, burst, quota."""
    from meshctl.policy import bind, mesh_snapshot
    from meshctl.policy.tenancy import hourly_headroom, hours_left_in_month
    from meshctl.scheduler import FromPolicyEngine, Pending, Request, schedule
    from meshctl.scheduler.build import snapshot_from_mesh

    context = app_context(ctx)
    m = read_moment(context, job_file, mesh_file, policies, now)
    catalogs, name = context.catalog_map(), m.job.metadata.name
    bound = bind(m.policies, mesh_snapshot(m.mesh, catalogs, m.state), m.now)
    verdict = bound.evaluate(m.job)
    at_s = m.now.timestamp()
    pend = Pending(
        name,
        m.job.spec.team,
        verdict.priority,
        Request.of(m.job),
        at_s,
        m.job.spec.limits.max_runtime_s,
    )
    hours = hours_left_in_month(m.now)
    headroom = {
        p.name: hourly_headroom(verdict.budgets, p.name, p.provider, hours)
        for p in m.mesh.spec.pools
    }
    snap = snapshot_from_mesh(m.mesh, catalogs, m.state, [pend], at_s, headroom)
    plan = schedule(snap, FromPolicyEngine(bound, {name: m.job}, {}))
    _render(plan.decisions[name], plan, output)


def _render(decision: Decision, plan: Plan, output: Output) -> None:
    from dataclasses import asdict

    from meshctl.cli import render

    actions = [{"action": type(a).__name__.lower(), **asdict(a)} for a in plan.actions]
    if output is not Output.table:
        data: dict[str, Any] = asdict(decision) | {
            "summary": decision.summary(),
            "actions": actions,
        }
        data["filtered"] = dict(decision.filtered)
        render.emit_data(data, output)
        return
    render.say(f"[bold]{render.esc(decision.job_id)}[/]: {render.esc(decision.summary())}")
    if decision.candidates:
        rows = [
            {
                "nodes": ", ".join(c.nodes),
                "total": round(c.total, 3),
                **{name: round(value, 3) for name, value in c.scores},
            }
            for c in decision.candidates
        ]
        scorers = [name for name, _ in decision.candidates[0].scores]
        render.emit(
            rows,
            [
                Column("nodes", "Nodes"),
                Column("total", "Score", "right"),
                *(Column(s, s, "right") for s in scorers),
            ],
            output,
            title="Top candidates (scores in [0, 1])",
        )
    if decision.filtered:
        rows = [{"reason": why, "nodes": n} for why, n in decision.filtered.most_common()]
        render.emit(
            rows,
            [Column("nodes", "Nodes", "right"), Column("reason", "Filtered out")],
            output,
            title=f"{decision.nodes_considered:,} nodes considered"
            + (f"; {decision.exhausted} ran out" if decision.exhausted else ""),
        )
    for action in actions:
        if action["action"] != "place":
            render.say(render.esc(f"Plan: {action}"))
