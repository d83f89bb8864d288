"""``meshctl queues``: the teams' quotas by cohort, what each holds, borrows, lends and waits
for (``meshctl.app.queues``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from meshctl.cli.context import app_context
from meshctl.cli.options import OutputOption
from meshctl.cli.render import Column, Output

if TYPE_CHECKING:
    from meshctl.app.shapes.queues import Queues, TeamQueue

COLUMNS = [
    Column("queue", "Cohort / team"),
    Column("nominal_gpus", "Quota", "right"),
    Column("used_gpus", "Used", "right"),
    Column("borrowed_gpus", "Borrowed", "right"),
    Column("lent_gpus", "Lent", "right"),
    Column("waiting", "Waiting", "right"),
    Column("reclaim", "Reclaim"),
]


def queues(ctx: typer.Context, output: OutputOption = Output.table) -> None:
    """Quotas by cohort: used, borrowed, lent and waiting per team.

    The teams of each cohort under it, then the teams in none. Quota: the
    nominal GPUs of the policies the controller runs with; used: what the
    team's jobs hold now; borrowed: held beyond its quota; lent: its share of
    what its cohort borrows, in proportion to the idle quota it lends;
    waiting: its jobs pending or requeued, and the GPUs they ask; reclaim:
    from whose jobs it takes back what it lent when its own wait.

    Examples:
      meshctl queues
      meshctl queues -o json
    """
    from meshctl.app.queues import queues as collect
    from meshctl.cli import render

    context = app_context(ctx)
    remote = context.remote()
    document: Queues = remote.call("GET", "/v1/queues") if remote is not None else collect(context)
    if output is not Output.table:
        render.emit_data(document, output)
        return
    render.emit(rows(document), COLUMNS, output)


def rows(document: Queues) -> list[dict[str, Any]]:
    """The table's rows: each cohort, its teams under it, then the teams in none."""
    out: list[dict[str, Any]] = []
    for cohort in document["cohorts"]:
        out.append({**cohort, "queue": cohort["cohort"], "waiting": _waiting(cohort),
                    "lent_gpus": None, "reclaim": None})  # fmt: skip
        last = len(cohort["teams"]) - 1
        for i, team in enumerate(cohort["teams"]):
            out.append(_row(team, ("└─ " if i == last else "├─ ") + team["team"]))
    out += [_row(team, team["team"]) for team in document["teams"]]
    return out


def _row(team: TeamQueue, label: str) -> dict[str, Any]:
    return {**team, "queue": label, "waiting": _waiting(team)}


def _waiting(row: Any) -> str:
    jobs, gpus = row["waiting_jobs"], row["waiting_gpus"]
    return "-" if not jobs else f"{jobs} ({gpus:g} GPUs)"
