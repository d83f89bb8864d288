"""``meshctl explain JOB``: why a job runs where it runs, or why it is still pending.

With a job id, the controller's own record: where the job runs and the scheduler's latest
decision about it (filters, scores, burst, quota). With a job file, a what-if against the mesh
as configured (or at a ``MeshState`` moment): the policy verdict, then one scheduling cycle
with the job pending.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import typer

from meshctl.app.context import read_moment
from meshctl.cli.context import app_context
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
    """Why a job runs where it runs, or why it waits.

    JOB is a submitted job's id (or name, or a unique id prefix): where it runs
    and the scheduler's latest decision about it, or why it waits ("gcp-spill:
    no credentials" included), with the policy hash it was decided under, and
    every cloud offer tried and what came of it.

    JOB may also be a job file: where the scheduler would place it now, or why
    it would wait: nodes filtered per reason, the resource that ran out, the
    top candidates' scores, the burst or preemption it would plan. Planned
    against the live mesh where a controller runs (what its jobs hold, each
    node's state, as it last recorded them), against the idle mesh where none
    does, or against the moment --mesh STATE.yaml gives; it says which.

    Examples:
      meshctl explain jobs/batch-embed.yaml
      meshctl explain jobs/batch-embed.yaml --mesh busy.yaml
      meshctl explain 3f2a9c
    """
    if not job_file.exists() and mesh_file is None and policies is None and now is None:
        _explain_stored(ctx, str(job_file), output)
        return
    from meshctl.lifecycle.configured import held, snapshot_from_mesh
    from meshctl.policy import bind, mesh_snapshot
    from meshctl.policy.tenancy import hourly_headroom, hours_left_in_month
    from meshctl.scheduler import FromPolicyEngine, Pending, Request, schedule

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
    against = ("moment", f"the moment in {mesh_file}") if mesh_file is not None else IDLE
    live = _live(context) if mesh_file is None else None
    if live is not None:
        allocations, health, running = live
        snap = held(snap, allocations, health)
        jobs = f"{running} job{'' if running == 1 else 's'} running"
        against = ("live", f"the live mesh as the controller last recorded it ({jobs})")
    plan = schedule(snap, FromPolicyEngine(bound, {name: m.job}, {}))

    def uncertain(pool_name: str, node_type: str) -> bool:  # a burst at an uncertain price
        pool = m.mesh.pool(pool_name)
        catalog = catalogs.get(pool.provider) if pool else None
        region = str(getattr(pool, "region", ""))
        return catalog is not None and catalog.price_uncertain(node_type, region)

    _render(plan.decisions[name], plan, output, uncertain, against)


IDLE = ("idle", "the idle mesh: no controller runs, every node free")


def _live(context: Any) -> tuple[list[Any], dict[tuple[str, str], Any], int] | None:
    """The mesh as the running controller last recorded it: what each active attempt holds
    (with its pool), each node's health, and how many jobs run; None when no controller runs."""
    from meshctl.controller import daemon
    from meshctl.controller.deciding.nodes import OUT_OF_SERVICE, allocation_of
    from meshctl.state import ACTIVE_ATTEMPT, AttemptRecord, NodeRecord

    if daemon.running(context.home) is None:
        return None
    with context.store() as store:
        attempts = store.list(AttemptRecord, state=ACTIVE_ATTEMPT)
        nodes = store.list(NodeRecord)
    allocations = [(a.pool, allocation_of(h)) for a in attempts for h in a.detail.allocations]
    health = {}
    for node in nodes:
        pool, name = node.id.split("/", 1)
        if not node.resources.get("alive", True):
            health[(pool, name)] = "down"
        elif node.state in OUT_OF_SERVICE:
            health[(pool, name)] = OUT_OF_SERVICE[node.state]
    return allocations, health, len({a.job_id for a in attempts})


def _explain_stored(ctx: typer.Context, ref: str, output: Output) -> None:
    from meshctl.app import explain as explaining
    from meshctl.app.jobs import find
    from meshctl.cli import render

    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:
        from meshctl.app.remote import job_path

        data = remote.call("GET", job_path(ref, "explain"))
    else:
        with context.store() as store:
            data = explaining.stored(context, store, find(store, ref))
    if output is not Output.table:
        render.emit_data(data, output)
        return
    show_stored(data)


def show_stored(data: dict[str, Any]) -> None:
    """``explain JOB``'s lines, from its document (``meshctl.app.explain.stored``)."""
    from meshctl.app.decisions import data_local
    from meshctl.cli import render

    policy_hash, decision = data["policy_hash"], data["decision"]
    nodes, last = data["nodes"], data["attempt"]
    where = f"attempt {last} on pool {data['pool']} ({', '.join(nodes)}), {data['attempt_state']}"
    render.say(f"[bold]{render.esc(data['id'])}[/]: {data['state']}")
    if last:
        render.say(f"  runs: {render.esc(where)}")
    event = data["last_event"]
    if event:
        render.say(f"  last event: {event['kind']}: {render.esc(event['message'])}")
    _say_offers(data["offers_tried"])
    if not decision:
        render.say("  no scheduling decision recorded yet (is the controller running?)")
        return
    now = data["policy_hash_enforced"]
    by = f" (policies {policy_hash})" if policy_hash else ""
    render.say(f"  scheduler{by}: {render.esc(decision['summary'])}")
    if now is not None and policy_hash and now != policy_hash:
        render.say(f"  [dim]the controller enforces policies {now} now; it decides again[/]")
    for candidate in decision["candidates"]:
        scores = ", ".join(f"{k} {v:.3f}" for k, v in candidate["scores"].items())
        local = data_local(candidate["data_local_gib"], candidate["data_gib"])
        render.say(
            f"    candidate {render.esc(', '.join(candidate['nodes']))}: "
            f"total {candidate['total']:.3f} ({scores})" + (f"; {local}" if local else "")
        )
    for filtered in decision["filtered"]:
        render.say(f"    {filtered['nodes']} nodes: {render.esc(filtered['reason'])}")
    forecast = decision["forecast"]
    if forecast:
        seconds = forecast["runtime_s"]
        said = f"{seconds:,.0f} s ({forecast['runtime']})" if seconds is not None else (
            forecast["runtime"])  # fmt: skip
        render.say(f"  runtime: {render.esc(said)}")
        for line in forecast_lines(forecast):
            render.say(f"  {render.esc(line)}")


def _say_offers(tried: list[dict[str, Any]]) -> None:
    """Every cloud offer tried for the job and what came of it."""
    from meshctl.cli import render

    if tried:
        render.say("  cloud offers tried:")
    for offer in tried:
        where = " ".join(x for x in (offer["pool"], offer["zone"], offer["node_type"]) if x)
        spot = " (spot)" if offer["spot"] else ""
        said = render.esc(f"{where}{spot}: {offer['outcome']}: {offer['message']}")
        render.say(f"    {said}")


BLOCKERS = {
    "quota": "it waits for its team's quota, not for GPUs",
    "policy": "the policies keep it from every pool, not busy GPUs",
    "size": "no pool it may use could ever hold it",
}


def forecast_lines(forecast: dict[str, Any]) -> list[str]:
    """The wait forecast as explain says it: per on-prem pool, with what it had to assume
    there; for a job its quota, the policies or its size keep from running, why no wait is
    forecast. ``forecast``: as ``views.decision_data`` reads it (every field there)."""
    blocker = forecast["blocked_by"]
    if blocker:
        return [f"expected wait: none forecast: {BLOCKERS.get(blocker, blocker)}"]
    waits = forecast["expected_wait_s"]
    if not waits:
        return []
    lines = ["expected wait: " + ", ".join(f"{pool} {_wait(w)}" for pool, w in waits.items())]
    assumed_s = _wait(forecast["unknown_runtime_s"])
    for pool, count in forecast["assumed"].items():
        if count and waits.get(pool, 0.0) > 0:
            jobs = f"{count} running job{'' if count == 1 else 's'}"
            lines.append(
                f"  {pool}: {jobs} with no runtime declared or estimated, each assumed to run"
                f" at least {assumed_s} more (forecast.unknown_runtime_s in the policies,"
                " 2 h unless they set it)"
            )
    return lines


def _wait(seconds: float) -> str:
    from meshctl.lifecycle.waits import UNBOUNDED_WAIT_S

    if seconds >= UNBOUNDED_WAIT_S:
        return "no end in sight"
    return f"{seconds:,.0f} s" if seconds < 3600 else f"{seconds / 3600:.1f} h"


def _say_candidates(decision: Decision, output: Output) -> None:
    """The top candidates: each scorer's score and, for a job with data, its bytes local."""
    from meshctl.app.decisions import data_local
    from meshctl.cli import render

    with_data = decision.candidates[0].data_gib is not None
    rows = [
        {
            "nodes": ", ".join(c.nodes),
            "total": round(c.total, 3),
            **{name: round(value, 3) for name, value in c.scores},
            **({"data": data_local(c.data_local_gib, c.data_gib)} if with_data else {}),
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
            *([Column("data", "Data")] if with_data else []),
        ],
        output,
        title="Top candidates (scores in [0, 1])",
    )


def _render(
    decision: Decision,
    plan: Plan,
    output: Output,
    uncertain: Callable[[str, str], bool],
    against: tuple[str, str],
) -> None:
    from dataclasses import asdict

    from meshctl.app.decisions import decision_data
    from meshctl.cli import render

    actions = [{"action": type(a).__name__.lower(), **asdict(a)} for a in plan.actions]
    for action in actions:
        if action["action"] == "provision":
            action["price_uncertain"] = uncertain(action["pool"], action["node_type"])
    if output is not Output.table:  # shapes.ExplainPlan
        data = {"job": decision.job_id, "planned_against": against[0],
                "decision": decision_data(decision), "actions": actions}  # fmt: skip
        render.emit_data(data, output)
        return
    render.say(f"[bold]{render.esc(decision.job_id)}[/]: {render.esc(decision.summary())}")
    render.say(f"  [dim]planned against {render.esc(against[1])}[/]")
    if decision.candidates:
        _say_candidates(decision, output)
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
        if action.get("price_uncertain"):
            render.say("  ~ the catalog marks this node type's price in the region uncertain")
