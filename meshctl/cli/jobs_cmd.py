"""``meshctl jobs list|show|logs|cancel|wait``: the jobs the controller keeps.

A job is named by its id, by its name (when one job has it), or by a prefix of its id that only
one job has; an exact id or name wins over a prefix. ``wait`` exits 0 when every job succeeded,
1 when one failed or was cancelled, 124 when the time ran out (as timeout(1)), so scripts can
chain on it. ``cancel`` takes several jobs: an unknown one is exit 2 and nothing is cancelled;
one that already finished is said so, and is not an error.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from meshctl.app import jobs as jobs_of
from meshctl.cli.context import app_context
from meshctl.cli.options import OutputOption, duration_flag
from meshctl.cli.render import Column, Output
from meshctl.errors import EXIT_TIMEOUT, CommandError, InvalidRequestError

if TYPE_CHECKING:
    from meshctl.app.remote import Remote


def job_path(ref: str, *rest: str) -> str:
    from meshctl.app.remote import job_path

    return job_path(ref, *rest)


app = typer.Typer(help="Submitted jobs: list, inspect, follow, cancel, wait.", no_args_is_help=True)

JobArgument = Annotated[
    str, typer.Argument(help="The job id, its name, or a unique prefix of its id.")
]


LIMIT = 50  # a screen's worth: jobs list on a mesh of thousands of jobs stays quick to read


@app.command("list")
def list_jobs(
    ctx: typer.Context,
    state: Annotated[str | None, typer.Option(help="Only jobs in this state.")] = None,
    team: Annotated[str | None, typer.Option(help="Only this team's jobs.")] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            help="Show the newest this many jobs; 0 shows every one (default: 50 in the "
            "table, every job with -o json or yaml).",
            show_default=False,
        ),
    ] = None,
    output: OutputOption = Output.table,
) -> None:
    """The newest jobs first: state, pool, nodes, attempt, age.

    The table shows the newest 50 unless --limit says otherwise (0: every
    job); -o json and -o yaml give every job unless --limit is set. When jobs
    are left out, a line on stderr says how many there are. Through an
    API server: your own jobs; a team-admin sees the team's.

    Examples:
      meshctl jobs list
      meshctl jobs list --state running --team search
      meshctl jobs list --limit 200
    """
    from meshctl.cli import render

    jobs_of.checked_state(state, "--state")  # before a server is asked
    if limit is not None and limit < 0:
        raise InvalidRequestError(f"--limit: expected 0 (every job) or more, got {limit}")
    if limit is None:  # a screen's worth to read; every job for a script
        limit = LIMIT if output is Output.table else 0
    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:
        found = remote.call("GET", "/v1/jobs", state=state, team=team)
        rows, total = (found[:limit] if limit else found), len(found)
    else:
        with context.store() as store:
            rows = jobs_of.listed(store, state, team, limit)
            total = jobs_of.counted(store, state, team) if limit else len(rows)
    cells = rows if output is not Output.table else [_cells(r) for r in rows]
    render.emit(cells, COLUMNS, output)
    if len(rows) < total:
        render.note(f"the newest {len(rows)} of {total:,} jobs (--limit 0 shows every one)")


COLUMNS = [
    Column("id", "Job"),
    Column("state", "State"),
    Column("team", "Team"),
    Column("priority", "Prio", "right"),
    Column("pool", "Pool"),
    Column("nodes", "Nodes"),
    Column("attempt", "Try", "right"),
    Column("age", "Age", "right"),
]


def _cells(row: dict[str, Any]) -> dict[str, Any]:
    """A row as the table shows it: the age in one format for the whole column."""
    from meshctl.cli.render import ago

    return {**row, "age": ago(row["age_s"])}


@app.command("show")
def show(ctx: typer.Context, job: JobArgument, output: OutputOption = Output.table) -> None:
    """One job: resources, attempts, events and the latest decision.

    What it asks for, in words; its attempts, each with the checkpoint step it
    resumed from and its restarts (and why the last one failed, with the first
    lines of the failure); each recovery with the steps lost and the times to
    detect and to resume; a train job's loop and workers; a service's replicas,
    traffic and URL; the loans it lent or borrowed; an exported model; its
    events and the scheduler's latest decision. A job is named by its id, its
    name, or a unique prefix of its id; an exact id or name wins.

    Examples:
      meshctl jobs show 3f2a9c
      meshctl jobs show batch-embed -o yaml
    """
    from meshctl.cli import render

    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:
        data = remote.call("GET", job_path(job))
    else:
        with context.store() as store:
            data = jobs_of.show(context.home, store, jobs_of.find(store, job))
    if output is not Output.table:
        render.emit_data(data, output)
        return
    show_job(data)


def show_job(data: dict[str, Any]) -> None:
    """``jobs show``'s lines, from the job's document (``meshctl.app.jobs.show``)."""
    from meshctl.cli import jobtraining, jobview, render

    render.say(f"[bold]{render.esc(data['id'])}[/] ({render.esc(data['name'])}): {data['state']}")
    nodes = int(data["resources"].get("nodes") or 1)
    train = data["train"]
    lines = {
        "kind": data["kind"],
        "team": data["team"],
        "priority": f"{data['priority']}"
        + (f" ({data['priority_class']})" if data["priority_class"] else ""),
        "pool": data["pool"],
        "nodes": ", ".join(data["nodes"]),
        "entrypoint": data["entrypoint"],
        "train": jobview.train_text(train, nodes) if train else None,
        "resources": jobview.resources_text(data["resources"]),
        "decision": data["decision"],
        "policies": data["policy_hash"],
    }
    for key, value in lines.items():
        if value:
            render.say(f"  {key}: {render.esc(value)}")
    attempts = data["attempts"]
    for a in attempts:
        where = f" ({render.esc(', '.join(a['nodes']))})" if a["nodes"] else ""
        render.say(
            f"  attempt {a['number']}: {a['state']} on {a['pool']}{where} as {a['submission_id']}"
        )
        if a["reason"] and a["state"] != "succeeded":
            _show_reason(data["id"], a, a is attempts[-1])
    service = data.get("service")
    if service is not None:
        render.say(f"  service: {render.esc(jobview.service_text(service))}")
        if service["message"]:
            render.say(f"    Serve: {render.esc(service['message'])}")
    for loan in data.get("loans", []):
        render.say(f"  loan: {render.esc(jobview.loan_text(loan))}")
    jobtraining.show_training(data.get("training"))
    jobtraining.show_export(data.get("export"))
    for e in data["events"]:
        render.say(f"  {render.clock_of(e['occurred_at'])} {e['kind']}: {render.esc(e['message'])}")


def _show_reason(job_id: str, attempt: dict[str, Any], latest: bool) -> None:
    """Ray's message, its first lines only: the rest is in the job's log."""
    from meshctl.cli import jobview, render

    first, more = jobview.error_excerpt(attempt["reason"])
    for line in first:
        render.say(f"    {render.esc(line)}")
    if more:
        which = "" if latest else f" --attempt {attempt['number']}"
        render.say(f"    ... {more} more lines: meshctl jobs logs {job_id}{which}")


@app.command("logs")
def logs(
    ctx: typer.Context,
    job: JobArgument,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="Wait for it to start if queued; keep printing until it ends."
        ),
    ] = False,
    attempt: Annotated[int | None, typer.Option(help="Attempt number (default: latest).")] = None,
) -> None:
    """Print a job's driver log, from its pool or from meshctl's copy.

    From its pool while the pool has it, else from the copy meshctl keeps
    (after the job ends, after down; at most each attempt's first 512 KiB and
    last 1.25 MiB). With --follow, a queued job says what it waits for, then
    the log is followed until the job ends.

    Examples:
      meshctl jobs logs 3f2a9c
      meshctl jobs logs batch-embed --follow
      meshctl jobs logs 3f2a9c --attempt 1
    """
    from meshctl.cli import joblogs

    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:
        if follow:
            _follow_remote(remote, job, attempt)
            return
        said = remote.call("GET", job_path(job, "logs"), attempt=attempt)
        if said["text"] is None:
            from meshctl.cli import render

            render.note(f"job {said['id']} has not started: {said['waiting_for']}")
        else:
            sys.stdout.write(said["text"])
        return
    with context.store() as store:
        record = jobs_of.find(store, job)
        if follow:
            joblogs.Follower(context, store, record.id, attempt).run()
        else:
            joblogs.show(context, store, record, attempt)


def _follow_remote(remote: Remote, job: str, attempt: int | None) -> None:
    """``logs --follow`` through the API server: every second, what the log gained since the
    last read (from the byte offset the server gave), until the job has ended and its last
    words are out (or Ctrl-C). A new attempt's log is printed from its start."""
    from meshctl.state import JobState
    from meshctl.state.records import FINISHED

    job_id = str(remote.call("GET", job_path(job))["id"])
    logs, number, offset = f"/v1/jobs/{job_id}/logs", None, 0
    while True:
        state = JobState(remote.call("GET", f"/v1/jobs/{job_id}")["state"])
        said = remote.call("GET", logs, attempt=attempt, offset=offset)
        if said["attempt"] != number and offset:  # read at the last attempt's offset
            said = remote.call("GET", logs, attempt=said["attempt"] or attempt, offset=0)
        number, offset = said["attempt"], said["offset"]
        sys.stdout.write(said["text"] or "")
        sys.stdout.flush()
        if state in FINISHED:
            return
        time.sleep(1.0)


@app.command("cancel")
def cancel(
    ctx: typer.Context,
    jobs: Annotated[list[str], typer.Argument(help="Job ids, names or unique id prefixes.")],
    output: OutputOption = Output.table,
) -> None:
    """Cancel jobs: queued ones never run, running ones are stopped.

    The controller stops the running ones. A job that already finished is left
    as it is and said so (not an error).

    Exit codes:
      0  cancelled, or already finished
      2  an unknown job: nothing was cancelled

    Examples:
      meshctl jobs cancel 3f2a9c
      meshctl jobs cancel batch-embed gang-llm
    """
    from meshctl.cli import render
    from meshctl.controller import daemon

    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:  # each reference checked first: an unknown one cancels nothing
        ids = [remote.call("GET", job_path(ref))["id"] for ref in jobs]
        rows = [remote.call("POST", f"/v1/jobs/{i}/cancel") for i in dict.fromkeys(ids)]
    else:
        with context.store() as store:
            ids = list(dict.fromkeys(jobs_of.find(store, ref).id for ref in jobs))  # all, or none
            rows = [jobs_of.cancel_one(store, job_id) for job_id in ids]
        if any(r["cancelled"] for r in rows):
            daemon.nudge(context.home)  # stop their Ray jobs now, not next interval
    if output is not Output.table:
        render.emit_data(rows, output)
        return
    for row in rows:
        if row["cancelled"]:
            render.plain(f"{row['id']} cancelled (was {row['previous_state']})")
        else:
            render.plain(f"{row['id']} already {row['state']}; nothing to cancel")


@app.command("wait")
def wait(
    ctx: typer.Context,
    jobs: Annotated[list[str], typer.Argument(help="Job ids, names or unique id prefixes.")],
    timeout: Annotated[
        str, typer.Option(help="Give up after this long (seconds, or 90s, 10m, 2h).")
    ] = "1h",
    output: OutputOption = Output.table,
) -> None:
    """Wait until the jobs finish; the exit code says how they ended.

    Exit codes:
      0  every job succeeded
      1  a job failed or was cancelled
      124  the timeout came first (as timeout(1) says it)

    Examples:
      meshctl jobs wait 3f2a9c
      meshctl jobs wait 3f2a9c 81be07 --timeout 10m
      meshctl jobs wait 3f2a9c && meshctl jobs logs 3f2a9c
    """
    from meshctl.cli import render
    from meshctl.state import JobRecord, JobState
    from meshctl.state.records import FINISHED

    timeout_s = duration_flag("--timeout", timeout)
    deadline = time.monotonic() + timeout_s
    context = app_context(ctx)
    remote = context.remote()
    with contextlib.ExitStack() as stack:
        if remote is None:
            store = stack.enter_context(context.store())
            ids = list(dict.fromkeys(jobs_of.find(store, ref).id for ref in jobs))

            def read() -> dict[str, JobState]:
                records = [store.get(JobRecord, i) for i in ids]
                return {r.id: r.state for r in records if r is not None}
        else:
            found = [remote.call("GET", job_path(ref)) for ref in jobs]
            ids = list(dict.fromkeys(str(f["id"]) for f in found))

            def read() -> dict[str, JobState]:
                said = [remote.call("GET", f"/v1/jobs/{i}") for i in ids]
                return {str(d["id"]): JobState(d["state"]) for d in said}

        with render.progress(f"waiting for {', '.join(ids)}") as step:
            while True:
                states = read()
                done = all(s in FINISHED for s in states.values())
                if done or time.monotonic() > deadline:
                    break
                step(_states(states))
                time.sleep(0.5)
    if output is not Output.table:
        render.emit_data([{"id": k, "state": v.value} for k, v in states.items()], output)
    else:
        for job_id, state in states.items():
            render.plain(f"{job_id} {state.value}")
    if not done:
        raise CommandError(
            f"timed out after {timeout_s:g} s: {_states(states)}", exit_code=EXIT_TIMEOUT
        )
    failed = {k: v for k, v in states.items() if v is not JobState.SUCCEEDED}
    if failed:
        raise CommandError(f"{len(failed)} of {len(states)} did not succeed: {_states(failed)}")


def _states(states: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v.value}" for k, v in states.items())
