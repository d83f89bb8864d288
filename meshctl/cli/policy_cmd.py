"""``meshctl policy validate|test|explain``: policies as code, tested in CI, decisions explained."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from meshctl.app.context import AppContext, read_moment
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
    from meshctl.files.policies import MeshReader, PolicyFiles
    from meshctl.model import Catalog, Mesh
    from meshctl.policy.compiled import PolicySet
    from meshctl.policy.testing import CaseResult
    from meshctl.policy.verdict import RuleError, Verdict

app = typer.Typer(help="Routing policies: validate, test and explain them.", no_args_is_help=True)

PathsArgument = Annotated[
    list[Path] | None,
    typer.Argument(help="Policy files or folders (default: ./policies, else the shipped ones)."),
]


def read_policies(context: AppContext, paths: list[Path] | None) -> tuple[PolicyFiles, PolicySet]:
    from meshctl.files.policies import read_policy_files
    from meshctl.policy.compiled import compile_policies

    files = read_policy_files(paths or [context.policy_dir()])
    return files, compile_policies(files.policies)


def _policies_mesh(context: AppContext, paths: list[Path] | None, meshes: MeshReader) -> Mesh:
    """The mesh the policies are written for: ``--mesh``, else ``mesh.yaml`` beside their
    folder (as ``meshctl init`` lays them out), else for the shipped examples the embedded
    default mesh, else the mesh in use."""
    from meshctl.files.policies import mesh_file_for

    if context.mesh_path is not None:
        return meshes.read(None)
    for path in paths or [context.policy_dir()]:
        found = mesh_file_for(path if path.is_dir() else path.parent)
        if found is not None:
            return meshes.read(found)
    return meshes.read(None)


def _test_mesh(files: PolicyFiles, path: str, test: Any, meshes: MeshReader) -> Mesh:
    """A test's mesh: the one it names, else the one its policies (the folder above its
    ``tests/``) are written for, else the mesh in use."""
    folder = files.test_dirs[path]
    if test.spec.mesh is not None:
        return meshes.read(folder / test.spec.mesh)
    return meshes.for_folder(folder.parent)


def _check_names(
    context: AppContext, paths: list[Path] | None, files: PolicyFiles
) -> tuple[dict[str, Mesh], dict[str, Catalog]]:
    """Pools, providers and accelerator models the policies and their tests name, against
    their meshes and the catalogs: every problem at once (InvalidFileError, exit 2). Returns
    each test file's mesh and the catalogs (each file read once)."""
    from meshctl.catalog.check import case_accelerators, job_models
    from meshctl.files.policies import MeshReader
    from meshctl.policy.names import MeshNames, policy_problems, policy_test_problems
    from meshctl.problems import InvalidFileError

    reader = MeshReader(context.mesh)
    mesh = _policies_mesh(context, paths, reader)
    problems = policy_problems(files.policies, MeshNames.of(mesh))
    meshes = {path: _test_mesh(files, path, test, reader) for path, test, _ in files.tests}
    catalogs = context.catalog_map()
    for path, test, line_of in files.tests:
        problems += policy_test_problems(path, test, line_of, MeshNames.of(meshes[path]))
        problems += case_accelerators(path, test, line_of, job_models(catalogs, meshes[path]))
    if problems:
        raise InvalidFileError(problems)
    return meshes, catalogs


@app.command("validate")
def validate(
    ctx: typer.Context, paths: PathsArgument = None, output: OutputOption = Output.table
) -> None:
    """Check policy files and their tests, and what they name.

    Schema, CEL syntax, field references (job.gpu: did you mean
    resources.gpus?), types (job.team.startswith("n"): did you mean
    startsWith?; job.resources.gpus > "4"), conflicts between files, and the
    pools, providers and accelerator models they name, against the mesh
    (beside the policies folder, else the one in use) and the catalogs. A map
    lookup no presence test guards (job.labels["data-class"] == "x", which
    fails closed for every job without the label) is a warning on stderr with
    the guarded form to write.

    Exit codes:
      0  valid (warnings, if any, on stderr)
      2  a problem: one line each, file:line: field: expected ...

    Examples:
      meshctl policy validate
      meshctl policy validate policies/ other/burst.yaml
    """
    from meshctl.cli import render

    context = app_context(ctx)
    files, policies = read_policies(context, paths)
    _check_names(context, paths, files)
    render.warnings(str(w) for w in policies.warnings)
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
            "policy_hash": policies.content_hash,
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


@app.command("test")
def run_policy_tests(
    ctx: typer.Context, paths: PathsArgument = None, output: OutputOption = Output.table
) -> None:
    """Run the table-driven cases in policies/tests/*.yaml.

    Each case gives a job and a mesh state (it may set every field a rule
    reads) and expects a pool, burst, deny or preempt outcome, like opa test.
    Ends with N passed, N failed.

    Exit codes:
      0  every case passed
      1  a case failed
      2  a file is invalid, or names a pool, provider or accelerator the mesh
         and catalogs lack

    Examples:
      meshctl policy test
      meshctl policy test policies/ -o json
    """
    from meshctl.cli import render
    from meshctl.policy.testing import run_tests

    context = app_context(ctx)
    files, policies = read_policies(context, paths)
    meshes, catalogs = _check_names(context, paths, files)  # each file read once
    render.warnings(str(w) for w in policies.warnings)  # why a case may fail closed
    context.warn_if_not_enforced(policies, bool(paths))

    from meshctl.policy.facts import mesh_snapshot

    def snapshot_of(test: Any) -> Any:
        path = next(p for p, t, _ in files.tests if t is test)
        return lambda state: mesh_snapshot(meshes[path], catalogs, state)

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
        render.emit_data([_test_row(r) for r in results], output)
    if not results:
        render.problems(["no policy test cases found (expected tests/*.yaml beside the policies)"])
        raise typer.Exit(1)
    if failed:
        raise typer.Exit(1)


def _test_row(result: CaseResult) -> dict[str, Any]:
    """A case's result as data (``shapes.PolicyTestResult``)."""
    return {
        "file": result.path,
        "line": result.line,
        "name": result.name,
        "passed": result.passed,
        "failures": list(result.failures),
    }


@app.command("explain")
def explain(
    ctx: typer.Context,
    job_file: JobFileArgument,
    mesh_file: MomentOption = None,
    policies: PoliciesOption = None,
    now: NowOption = None,
    output: OutputOption = Output.table,
) -> None:
    """Every rule for one job, matched or not, and the operand that decided.

    Pools, burst, priority, preemption, quota and budgets. A rule that could
    not be evaluated for the job (a missing label) fails closed, is shown first
    with one error line on stderr; the verdict shown is the one the engine acts
    on.

    Exit codes:
      0  every rule was evaluated
      1  a rule could not be evaluated for the job

    Examples:
      meshctl policy explain jobs/batch-embed.yaml
      meshctl policy explain jobs/batch-embed.yaml --mesh busy.yaml
    """
    from meshctl.policy import bind, mesh_snapshot

    context = app_context(ctx)
    m = read_moment(context, job_file, mesh_file, policies, now)
    facts = mesh_snapshot(m.mesh, context.catalog_map(), m.state)
    verdict = bind(m.policies, facts, m.now).evaluate(m.job)
    errors = verdict.errors
    _render_verdict(verdict, errors, output)
    if errors:  # the verdict failed closed; say so where scripts and CI look
        from meshctl.cli import render

        render.problems(str(e) for e in errors)
        raise typer.Exit(1)


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


# the raw trace (rendered as ``trace``) and the errors' cache (rendered as ``errors``)
_NOT_DATA = frozenset({"trace_rows", "_errors"})


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _verdict_data(v: Verdict, errors: tuple[RuleError, ...]) -> Any:
    """The verdict as plain data for json / yaml."""
    import json
    from dataclasses import asdict, fields

    data = {f.name: getattr(v, f.name) for f in fields(v) if f.name not in _NOT_DATA}
    trace = [asdict(t) | {"detail": t.detail or None} for t in v.trace]
    data |= {"weights": v.weights.model_dump(), "trace": trace}
    data["burst"] = asdict(v.burst) | {
        "blocked": [{"pool": pool, "reason": why} for pool, why in v.burst.blocked]
    }
    data["errors"] = [_error_data(e) for e in errors]
    return json.loads(json.dumps(data, default=_plain))


def _render_verdict(v: Verdict, errors: tuple[RuleError, ...], output: Output) -> None:
    from meshctl.cli import render

    if output is not Output.table:
        render.emit_data(_verdict_data(v, errors), output)
        return
    klass = v.priority_class or "(none)"
    render.say(f"[bold]{v.job}[/]: priority {v.priority} (class {klass}); policies {v.policy_hash}")
    if v.priority_problem:
        render.say(f"[red]{render.esc(v.priority_problem)}[/]")
    if errors:
        render.say(
            f"[bold red]{len(errors)} rule part(s) could not be evaluated for this job; the"
            " engine failed closed (nothing they guard was widened):[/]"
        )
        for e in errors:
            render.say(f"[red]  {render.esc(e)}[/]")
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


def _error_data(e: Any) -> dict[str, Any]:
    return {
        "section": e.section,
        "rule": e.rule,
        "part": e.part,
        "file": e.path,
        "line": e.line,
        "pools": list(e.pools),
        "message": e.message,
        "effect": e.effect,
    }


def _plain(value: Any) -> Any:
    """Nested dataclasses in a verdict, as plain data for json / yaml."""
    from dataclasses import asdict, is_dataclass

    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return str(value)


DIFF_OUTPUTS = ("table", "json", "yaml", "markdown")


@app.command("diff")
def diff(
    ctx: typer.Context,
    base: Annotated[
        str | None,
        typer.Option(
            help="The set to compare against: a folder or a git ref (default: the set the "
            "controller enforces).",
            show_default=False,
        ),
    ] = None,
    head: Annotated[
        Path | None,
        typer.Option(
            help="The changed set's folder (default: ./policies, else the folder in use).",
            show_default=False,
        ),
    ] = None,
    since: Annotated[str, typer.Option(help="The window of history replayed: 30d, 12h.")] = "30d",
    trace: Annotated[
        str | None,
        typer.Option(help="Replay a trace (a name or a CSV) for --since instead of the history."),
    ] = None,
    output: Annotated[
        str,
        typer.Option("--output", "-o", help="table, json, yaml, or markdown (a PR comment)."),
    ] = "table",
    exit_code: Annotated[
        bool, typer.Option("--exit-code", help="Exit 1 when any job moves (for CI).")
    ] = False,
) -> None:
    """What a policy change would have done to the mesh's own history.

    Replays each job the mesh ran in the window (its file, its submission,
    the run time it had; the node failures and spot notices as recorded)
    through the simulator twice, under the base set and the head set, and
    compares the two job by job: the jobs that move (pool, wait, cost,
    preempted, refused) and the rules that made the difference; per team
    and priority class, cloud GPU-hours, spend per month, waits and
    preemptions, before and after; and how closely the base replay matches
    what really happened. The head set is checked first: an invalid set is
    refused before anything is replayed.

    Exit codes (with --exit-code):
      0  no job moves
      1  some job moves
      2  invalid input (a set, a ref, the window)

    Examples:
      meshctl policy diff
      meshctl policy diff --base main --head policies --since 7d
      meshctl policy diff --base main -o markdown > diff.md
      meshctl policy diff --trace philly --since 2d --exit-code
    """
    import time

    from meshctl.app.policydiff import DiffRequest, policy_diff
    from meshctl.cli import diffview, render
    from meshctl.cli.options import duration_flag
    from meshctl.errors import InvalidRequestError

    chosen = output.lower()
    if chosen not in DIFF_OUTPUTS:
        raise InvalidRequestError(
            f"--output: expected one of {', '.join(DIFF_OUTPUTS)}, got {output!r}"
        )
    since_s = duration_flag("--since", since)
    if since_s <= 0:
        raise InvalidRequestError(f"--since: expected a duration > 0, got {since!r}")
    request = DiffRequest(base=base, head=head, since_s=since_s, trace=trace, now_s=time.time())
    report = policy_diff(app_context(ctx), request)
    if chosen in ("json", "yaml"):
        render.emit_data(report, Output(chosen))
    elif chosen == "markdown":
        render.raw(diffview.markdown(report))
    else:
        _render_diff(report)
    if exit_code and report["moved"]:
        raise typer.Exit(1)


def _render_diff(report: dict[str, Any]) -> None:
    from meshctl.cli import diffview, render

    for line in diffview.summary(report):
        render.plain(line)
    groups = [
        dict(zip(diffview.GROUP_HEADERS, r, strict=True)) for r in diffview.group_rows(report)
    ]
    render.emit(groups, [Column(h, h) for h in diffview.GROUP_HEADERS], Output.table)
    changes = [
        dict(zip(diffview.CHANGE_HEADERS, r, strict=True)) for r in diffview.change_rows(report)
    ]
    if changes:
        left = len(report["changes"]) - len(changes)
        caption = f"{left:,} more in -o json" if left > 0 else ""
        columns = [Column(h, h) for h in diffview.CHANGE_HEADERS]
        render.emit(changes, columns, Output.table, title="Jobs that move", caption=caption)
