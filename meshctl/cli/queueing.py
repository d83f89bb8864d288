"""Queueing a job, shared by ``submit`` and ``train``: check it against the mesh and queue
it (``meshctl.app.admission``), print its id or the plan."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from meshctl.app.admission import admit, submitted
from meshctl.cli.render import Output

if TYPE_CHECKING:
    from meshctl.app.context import AppContext
    from meshctl.model import Catalog, Job, Mesh


def queue(
    context: AppContext,
    job: Job,
    work: Path | None,
    dry_run: bool,
    explain: bool,
    output: Output,
    held: tuple[Mesh, dict[str, Catalog]] | None = None,
) -> str | None:
    """Check the job against the mesh and queue it; print and return its id (None: a dry
    run). Shared by ``submit`` and ``train``. ``held``: the mesh and catalogs the caller
    read already (``AppContext.mesh_and_catalogs``), not read again. A job that can never
    run, or whose files cannot be taken, raises ``Rejected`` (an ``InvalidInput``: exit 2)."""
    import time

    from meshctl.cli import render
    from meshctl.controller.submit import enqueue

    job, admission = admit(context, job, work, context.planning(held=held))
    if output is Output.table and (dry_run or explain):
        _show_plan(job, admission)
    record = None
    if not dry_run:
        with context.store() as store:
            record = enqueue(store, job, admission, work, context.home, time.time(),
                             keep_files=context.shares_store())  # fmt: skip
    if output is not Output.table:
        render.emit_data(submitted(job, admission, record, dry_run or explain), output)
    elif record is not None:
        render.plain(record.id)
    if record is not None and not context.nudge():
        render.warnings([f"{record.id} is queued, but no controller is running: meshctl up"])
    return None if record is None else str(record.id)


def _show_plan(job: Job, admission: Any) -> None:
    from meshctl.cli import render

    decision = admission.decision
    render.say(
        f"[bold]{render.esc(job.metadata.name)}[/] (priority {admission.priority}"
        f"{', class ' + admission.priority_class if admission.priority_class else ''}): "
        f"on the idle mesh it would be {render.esc(decision.summary())}"
    )
    for note in decision.notes:
        render.say(f"  {render.esc(note)}")
