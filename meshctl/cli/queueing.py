"""A submission from the CLI, shared by ``submit`` and ``train``: sent as a request to the API
server or the home's local API (``submitclient.send``), else admitted in this process through
the same application-layer call (``meshctl.app.submitting.submit_job``); the answer printed
by the one renderer (``render.submitted``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from meshctl.cli.render import Output

if TYPE_CHECKING:
    from meshctl.app.context import AppContext
    from meshctl.app.submitting import Answer


def request(
    context: AppContext, body: dict[str, Any], folder: Path | None, output: Output
) -> str | None:
    """Submit the request ``body`` (``POST /v1/jobs``'s) with ``folder``; print the answer and
    return the job's id (None: a dry run). What is wrong raises (``InvalidInput``: exit 2)."""
    from meshctl.cli import render
    from meshctl.cli.submitclient import send

    # files named on the command line are not those the controller runs with: admitted here
    local = context.mesh_path is None and context.providers_dir is None
    answered = send(context.home, body, folder, local=local and context.store_url is None)
    if answered is not None:
        render.submitted(answered.document, answered.warnings, output.value)
        found = answered.document.get("id")
        return None if found is None else str(found)
    answer = in_process(context, body, folder)
    render.submitted(answer.document, answer.warnings, output.value)
    found = answer.document["id"]
    if found is not None and not answer.nudged:
        render.warnings([f"{found} is queued, but no controller is running: meshctl up"])
    return None if found is None else str(found)


def in_process(context: AppContext, body: dict[str, Any], folder: Path | None) -> Answer:
    """The request admitted in this process, as the home's owner (``identity.LOCAL``)."""
    from meshctl.app.submitting import JobFile, SubmitRequest, planning_of, submit_job
    from meshctl.server.access import charged_team
    from meshctl.server.identity import LOCAL

    file = body.get("file")
    asked = SubmitRequest(
        job=body.get("job"),
        file=None if file is None else JobFile(file["path"], file["text"]),
        command=tuple(body.get("command") or ()),
        flags=body.get("flags") or {},
        working_dir=folder,
        dry_run=bool(body.get("dry_run")),
        explain=bool(body.get("explain")),
        data_check=bool(body.get("data_check", True)),
    )
    return submit_job(context, asked, planning_of(context, file is not None), context.store,
                      charge=lambda team: charged_team(LOCAL, team), owner=LOCAL.name)  # fmt: skip
