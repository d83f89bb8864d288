"""``meshctl policy validate|test|explain``: policies as code, tested in CI, decisions explained."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from meshctl.cli.context import AppContext, app_context, read_moment
from meshctl.cli.options import (
    JobFileArgument,
    MomentOption,
    NowOption,
    OutputOption,
    PoliciesOption,
)
from meshctl.cli.render import Column, Output

if TYPE_CHECKING:
    from meshctl.model import Mesh, MeshState
    from meshctl.policy.compiled import PolicySet
    from meshctl.policy.facts import MeshSnapshot
    from meshctl.policy.verdict import Verdict
    from meshctl.policyfiles import PolicyFiles

app = typer.Typer(help="Routing policies: validate, test and explain them.", no_args_is_help=True)

PathsArgument = Annotated[
    list[Path] | None,
    typer.Argument(help="Policy files or folders (default: ./policies, else the shipped ones)."),
]


def read_policies(context: AppContext, paths: list[Path] | None) -> tuple[PolicyFiles, PolicySet]:
    from meshctl.policy.compiled import compile_policies
    from meshctl.policyfiles import read_policy_files

    files = read_policy_files(paths or [context.policy_dir()])
    return files, compile_policies(files.policies)


@app.command("validate")
def validate(
    ctx: typer.Context, paths: PathsArgument = None, output: OutputOption = Output.table
) -> None:
    """Check policy files: schema, CEL, field references, conflicts between files."""
    from meshctl.cli import render

    files, policies = read_policies(app_context(ctx), paths)
    rows = [
        {
            "file": s.path,
            "policy": s.policy.metadata.name,
            "rules": len(s.policy.spec.pools)
            + len(s.policy.spec.burst)
            + len(s.policy.spec.preemption),
            "classes": len(s.policy.spec.priority_classes),
            "quotas": len(s.policy.spec.quotas),
            "budgets": len(s.policy.spec.budgets),
        }
        for s in files.policies
    ]
    columns = [
        Column("file", "File"),
        Column("policy", "Policy"),
        Column("rules", "Rules", "right"),
        Column("classes", "Classes", "right"),
        Column("quotas", "Quotas", "right"),
        Column("budgets", "Budgets", "right"),
    ]
    render.emit(
        rows,
        columns,
        output,
        title=f"{len(rows)} valid policy file(s)",
        caption=f"policy hash {policies.content_hash}; {len(files.tests)} test file(s) alongside",
    )


def _snapshot_for(context: AppContext, mesh: Mesh | None, state: MeshState | None) -> MeshSnapshot:
    from meshctl.policy.facts import mesh_snapshot

    return mesh_snapshot(mesh or context.mesh(), context.catalog_map(), state)


@app.command("test")
def run_policy_tests(
    ctx: typer.Context, paths: PathsArgument = None, output: OutputOption = Output.table
) -> None:
    """Run the table-driven cases in policies/tests/*.yaml; exit 1 on any failure."""
    from meshctl.cli import render
    from meshctl.policy.testing import run_tests
    from meshctl.policyfiles import read_mesh

    context = app_context(ctx)
    files, policies = read_policies(context, paths)
    context.warn_if_not_enforced(policies, bool(paths))

    def snapshot_of(test: Any) -> Any:
        mesh = context.mesh()
        path = next(p for p, t, _ in files.tests if t is test)
        folder = files.test_dirs[path]
        if test.spec.mesh is not None:
            mesh = read_mesh(folder / test.spec.mesh)
        elif (folder.parent.parent / "mesh.yaml").is_file():
            mesh = read_mesh(folder.parent.parent / "mesh.yaml")
        return lambda state: _snapshot_for(context, mesh, state)

    results = run_tests(policies, files.tests, snapshot_of)
    failed = [r for r in results if not r.passed]
    if output is Output.table:
        for r in results:
            mark = "[green]PASS[/]" if r.passed else "[red]FAIL[/]"
            render.say(f"{mark} {render.esc(r.name)}  [dim]{render.esc(r.test)}[/]")
            for failure in r.failures:
                render.say(f"     {render.esc(failure)}")
        render.plain(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    else:
        render.emit_data(
            [
                {"test": r.test, "name": r.name, "passed": r.passed, "failures": list(r.failures)}
                for r in results
            ],
            output,
        )
    if not results:
        render.problems(["no policy test cases found (expected tests/*.yaml beside the policies)"])
        raise typer.Exit(1)
    if failed:
        raise typer.Exit(1)


@app.command("explain")
def explain(
    ctx: typer.Context,
    job_file: JobFileArgument,
    mesh_file: MomentOption = None,
    policies: PoliciesOption = None,
    now: NowOption = None,
    output: OutputOption = Output.table,
) -> None:
    """Every rule for one job, matched or not, and why: pools, burst, priority, quota, budget."""
    from meshctl.policy import bind, mesh_snapshot

    context = app_context(ctx)
    m = read_moment(context, job_file, mesh_file, policies, now)
    facts = mesh_snapshot(m.mesh, context.catalog_map(), m.state)
    _render_verdict(bind(m.policies, facts, m.now).evaluate(m.job), output)


_POOL_COLUMNS = [
    Column("pool", "Pool"),
    Column("eligible", "Eligible"),
    Column("usable", "Usable now"),
    Column("rule", "Rule"),
    Column("reason", "Reason"),
]
_TRACE_COLUMNS = [
    Column("rule", "Rule"),
    Column("part", "Part"),
    Column("pool", "Pool"),
    Column("outcome", "Outcome"),
    Column("detail", "Expression / error"),
    Column("at", "At"),
]


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _render_verdict(v: Verdict, output: Output) -> None:
    import json
    from dataclasses import asdict, fields

    from meshctl.cli import render

    if output is not Output.table:
        data = {f.name: getattr(v, f.name) for f in fields(v) if f.name != "trace_rows"}
        data |= {"weights": v.weights.model_dump(), "trace": [asdict(t) for t in v.trace]}
        render.emit_data(json.loads(json.dumps(data, default=_plain)), output)
        return
    klass = v.priority_class or "(none)"
    render.say(f"[bold]{v.job}[/]: priority {v.priority} (class {klass}); policies {v.policy_hash}")
    if v.priority_problem:
        render.say(f"[red]{render.esc(v.priority_problem)}[/]")
    pools = [
        {
            "pool": p.pool,
            "eligible": _yes(p.eligible),
            "usable": _yes(p.usable),
            "rule": p.rule,
            "reason": p.reason,
        }
        for p in v.pools
    ]
    render.emit(pools, _POOL_COLUMNS, output, title="Pools")
    for line in _standing_lines(v):
        render.say(render.esc(line))
    trace = [
        {
            "rule": f"{t.section}/{t.rule}",
            "part": t.part,
            "pool": t.pool,
            "outcome": t.outcome,
            "detail": t.detail or t.expression,
            "at": t.origin,
        }
        for t in v.trace
    ]
    render.emit(trace, _TRACE_COLUMNS, output, title="Every rule evaluated")


def _standing_lines(v: Verdict) -> list[str]:
    """Burst, preemption, quota and budgets, a line each."""
    b, pr, q = v.burst, v.preemption, v.quota
    targets = (
        ", ".join(
            f"{t.pool} (spot {_yes(t.spot)}, max "
            f"{t.max_usd_per_hour if t.max_usd_per_hour is not None else '-'} $/h)"
            for t in b.targets
        )
        or "none"
    )
    lines = [
        f"Burst: {'allowed' if b.allowed else 'not allowed'}; rules "
        f"{', '.join(b.rules) or 'none matched'}; targets {targets}"
    ]
    lines += [f"  {pool} blocked: {why}" for pool, why in b.blocked]
    lines.append(
        f"Preemption: {'may preempt' if pr.allowed else 'may not preempt'}"
        + (f" ({', '.join(pr.rules)}; grace {pr.grace_s:g} s)" if pr.allowed else "")
    )
    lines.append(f"Quota of team {q.team}: {q.state} ({q.reason})")
    lines += [
        f"Budget {bs.name} ({bs.scope}): {bs.state}, {bs.spent_usd:,.0f} of"
        f" {bs.limit_usd:,.0f} USD this month"
        for bs in v.budgets
    ]
    return lines


def _plain(value: Any) -> Any:
    """Nested dataclasses in a verdict, as plain data for json / yaml."""
    from dataclasses import asdict, is_dataclass

    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return str(value)
