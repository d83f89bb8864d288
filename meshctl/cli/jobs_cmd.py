"""``meshctl jobs list|show|logs|cancel|wait``: the jobs the controller keeps.

A job is named by its id, or by a prefix of it that only one job has. ``wait`` exits 0 when the
job succeeded and 1 when it failed or was cancelled, so scripts can chain on it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from meshctl.cli.context import app_context
from meshctl.cli.errors import EXIT_FAILURE, InvalidRequestError
from meshctl.cli.options import OutputOption
from meshctl.cli.render import Column, Output

if TYPE_CHECKING:
    from meshctl.state import AttemptRecord, JobRecord, Store

app = typer.Typer(help="Submitted jobs: list, inspect, follow, cancel, wait.", no_args_is_help=True)

JobArgument = Annotated[str, typer.Argument(help="The job id (or a unique prefix of it).")]


def find(store: Store, ref: str) -> JobRecord:
    """The job with this id, or the only one whose id starts with it."""
    from meshctl.state import JobRecord

    exact = store.get(JobRecord, ref)
    if exact is not None:
        return exact
    matches = [j for j in store.list(JobRecord) if j.id.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise InvalidRequestError(f"job: no job with id {ref!r} (meshctl jobs list)")
    ids = ", ".join(j.id for j in matches[:5])
    raise InvalidRequestError(f"job: {ref!r} names {len(matches)} jobs ({ids}); give more of it")


def attempts_of(store: Store, job_id: str) -> list[AttemptRecord]:
    from meshctl.state import AttemptRecord

    return sorted(store.list(AttemptRecord, job_id=job_id), key=lambda a: a.number)


def _nodes(attempt: AttemptRecord | None) -> str:
    if attempt is None:
        return ""
    return ", ".join(str(a["node"]) for a in attempt.detail.get("allocations", []))


def _row(job: JobRecord, attempt: AttemptRecord | None, now: float) -> dict[str, Any]:
    return {
        "id": job.id,
        "name": job.name,
        "team": job.team,
        "state": job.state.value,
        "priority": job.priority,
        "pool": job.pool or "",
        "nodes": _nodes(attempt),
        "attempt": attempt.number if attempt else 0,
        "age_s": round(now - job.submitted_at_s, 1),
    }


@app.command("list")
def list_jobs(
    ctx: typer.Context,
    state: Annotated[str | None, typer.Option(help="Only jobs in this state.")] = None,
    team: Annotated[str | None, typer.Option(help="Only this team's jobs.")] = None,
    output: OutputOption = Output.table,
) -> None:
    """Every job, newest first: state, pool, nodes, attempt."""
    from meshctl.cli import render
    from meshctl.state import AttemptRecord, JobRecord, JobState

    if state is not None and state not in {s.value for s in JobState}:
        raise InvalidRequestError(
            f"--state: expected one of {', '.join(s.value for s in JobState)}, got {state!r}"
        )
    with app_context(ctx).store() as store:
        filters = {k: v for k, v in (("state", state), ("team", team)) if v is not None}
        jobs = sorted(store.list(JobRecord, **filters), key=lambda j: -j.submitted_at_s)
        latest: dict[str, AttemptRecord] = {}
        for attempt in sorted(store.list(AttemptRecord), key=lambda a: a.number):
            latest[attempt.job_id] = attempt
    now = time.time()
    rows = [_row(job, latest.get(job.id), now) for job in jobs]
    render.emit(
        rows,
        [
            Column("id", "Job"),
            Column("state", "State"),
            Column("team", "Team"),
            Column("priority", "Prio", "right"),
            Column("pool", "Pool"),
            Column("nodes", "Nodes"),
            Column("attempt", "Try", "right"),
            Column("age_s", "Age (s)", "right"),
        ],
        output,
    )


@app.command("show")
def show(ctx: typer.Context, job: JobArgument, output: OutputOption = Output.table) -> None:
    """One job: its record, attempts, events and the scheduler's latest decision."""
    from dataclasses import asdict

    from meshctl.cli import render

    with app_context(ctx).store() as store:
        record = find(store, job)
        attempts = attempts_of(store, record.id)
        events = store.events(job_id=record.id)
        decisions = store.decisions(job_id=record.id)
    data = {
        **_row(record, attempts[-1] if attempts else None, time.time()),
        "resources": record.spec.get("spec", {}).get("resources", {}),
        "entrypoint": record.spec.get("spec", {}).get("entrypoint"),
        "attempts": [
            {k: v for k, v in asdict(a).items() if k not in ("version", "job_id")} for a in attempts
        ],
        "events": [{"at_s": e.at_s, "kind": e.kind, "message": e.message} for e in events],
        "decision": decisions[-1].explanation.get("summary") if decisions else None,
        "policy_hash": decisions[-1].policy_hash or None if decisions else None,
    }
    training = _training(record, attempts, data["events"])
    if training is not None:
        data["training"] = training
    if output is not Output.table:
        render.emit_data(data, output)
        return
    render.say(
        f"[bold]{render.esc(record.id)}[/] ({render.esc(record.name)}): {record.state.value}"
    )
    keys = ("team", "priority", "pool", "nodes", "entrypoint", "resources", "decision")
    for key in (*keys, "policy_hash"):
        render.say(f"  {key}: {render.esc(data[key])}")
    for a in attempts:
        render.say(
            f"  attempt {a.number}: {a.state} on {a.pool} ({render.esc(_nodes(a))}) "
            f"as {a.submission_id}" + (f": {render.esc(a.reason)}" if a.reason else "")
        )
    for t in (training or {}).get("attempts", []):
        start = "scratch" if t["resumed_from_step"] is None else f"step {t['resumed_from_step']}"
        render.say(
            f"  training, attempt {t['attempt']}: resumed from {start}, "
            f"{t['restarts']} restarts inside, last step {t['last_step']}"
        )
    for r in (training or {}).get("recoveries", []):
        render.say(
            f"  recovery in attempt {r['attempt']}: {render.esc(r['cause'])}; "
            f"steps lost {_or_dash(r['steps_lost'])}, detected in {_secs(r['detect_s'])}, "
            f"resumed in {_secs(r['resume_s'])}"
        )
    for e in events:
        at = time.strftime("%H:%M:%S", time.localtime(e.at_s))
        render.say(f"  {at} {e.kind}: {render.esc(e.message)}")


def _training(record: Any, attempts: list[Any], events: list[dict[str, Any]]) -> Any:
    """A train job's recoveries, from what it recorded beside its checkpoints."""
    from dataclasses import asdict

    from meshctl.controller.recovery import history
    from meshctl.pools.checkpoints import read_history

    if not record.spec.get("spec", {}).get("train") or not attempts:
        return None
    detail = attempts[-1].detail
    if not detail.get("checkpoint_uri"):
        return None
    recorded = read_history(str(detail["checkpoint_uri"]), detail.get("checkpoint_endpoint"))
    per_attempt, recoveries = history(recorded, events)
    return {
        "attempts": [asdict(a) for a in per_attempt],
        "recoveries": [asdict(r) for r in recoveries],
    }


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


@app.command("logs")
def logs(
    ctx: typer.Context,
    job: JobArgument,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until it ends.")
    ] = False,
    attempt: Annotated[int | None, typer.Option(help="Attempt number (default: latest).")] = None,
) -> None:
    """The job's output (its Ray job's driver log), from its pool."""
    import sys

    from meshctl.controller.decide import FINISHED
    from meshctl.controller.runtime import client_for
    from meshctl.state import JobRecord

    context = app_context(ctx)
    mesh = context.mesh()
    with context.store() as store:
        record = find(store, job)
        shown, showing = 0, ""
        while True:
            tries = attempts_of(store, record.id)
            chosen = [a for a in tries if attempt is None or a.number == attempt]
            if chosen and chosen[-1].id != showing:  # a new attempt: its log from the start
                shown, showing = 0, chosen[-1].id
            if chosen:
                pool = mesh.pool(chosen[-1].pool)
                client = client_for(pool, context.home) if pool else None
                if client is None:
                    raise InvalidRequestError(f"job {record.id}: pool {chosen[-1].pool} is not up")
                text = client.logs(chosen[-1].submission_id)
                sys.stdout.write(text[shown:])
                sys.stdout.flush()
                shown = len(text)
            elif attempt is not None:
                raise InvalidRequestError(f"--attempt: job {record.id} has no attempt {attempt}")
            current = store.get(JobRecord, record.id)
            if not follow or current is None or current.state in FINISHED:
                if follow and chosen and client is not None:  # its last lines
                    text = client.logs(chosen[-1].submission_id)
                    sys.stdout.write(text[shown:])
                return
            time.sleep(1.0)


@app.command("cancel")
def cancel(ctx: typer.Context, job: JobArgument) -> None:
    """Cancel a job: queued, it never runs; running, the controller stops it."""
    from dataclasses import replace

    from meshctl.cli import render
    from meshctl.controller.decide import FINISHED
    from meshctl.state import ConflictError, Event, JobState

    with app_context(ctx).store() as store:
        for _ in range(10):  # the controller may update it meanwhile: read again and retry
            record = find(store, job)
            if record.state in FINISHED:
                render.problems([f"job {record.id} already {record.state.value}"])
                raise typer.Exit(EXIT_FAILURE)
            now = time.time()
            event = Event(
                now,
                "job.cancelled",
                record.id,
                "cancelled by user",
                {"from": record.state.value, "to": "cancelled"},
            )
            try:
                store.update(
                    replace(record, state=JobState.CANCELLED, updated_at_s=now),
                    expected_version=record.version,
                    events=[event],
                )
            except ConflictError:
                continue
            from meshctl.controller import daemon

            daemon.nudge(app_context(ctx).home)  # stop its Ray job now, not next interval
            render.plain(f"{record.id} cancelled (was {record.state.value})")
            return
    raise InvalidRequestError(f"job {job}: kept changing; try again")


@app.command("wait")
def wait(
    ctx: typer.Context,
    jobs: Annotated[list[str], typer.Argument(help="Job ids (or unique prefixes).")],
    timeout: Annotated[float, typer.Option(help="Give up after this many seconds.")] = 3600.0,
) -> None:
    """Wait until the jobs finish: exit 0 if all succeeded, 1 if any failed or was cancelled."""
    from meshctl.cli import render
    from meshctl.controller.decide import FINISHED
    from meshctl.state import JobRecord, JobState

    deadline = time.monotonic() + timeout
    with app_context(ctx).store() as store:
        ids = [find(store, ref).id for ref in jobs]
        with render.progress(f"waiting for {', '.join(ids)}") as step:
            while True:
                records = [store.get(JobRecord, i) for i in ids]
                states = {r.id: r.state for r in records if r is not None}
                if all(s in FINISHED for s in states.values()):
                    break
                if time.monotonic() > deadline:
                    render.problems([f"timed out after {timeout:g} s: {_states(states)}"])
                    raise typer.Exit(EXIT_FAILURE)
                step(_states(states))
                time.sleep(0.5)
    for job_id, state in states.items():
        render.plain(f"{job_id} {state.value}")
    if any(s is not JobState.SUCCEEDED for s in states.values()):
        raise typer.Exit(EXIT_FAILURE)


def _states(states: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v.value}" for k, v in states.items())
