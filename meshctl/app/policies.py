"""Have the running controller take its mesh, policies and catalogs again (``meshctl
reload``, ``POST /v1/policies/reload``): every file checked here first, then the request
handed to the controller and its answer awaited."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from meshctl.errors import CommandError

if TYPE_CHECKING:
    from meshctl.app.context import AppContext


def reload_rules(context: AppContext, policies: Path | None, timeout_s: float) -> dict[str, Any]:
    """Have the running controller take the files again (``policies``: another folder); what
    it answered (``shapes.Reloaded``, with its ``message``). Every problem of every file is an
    ``InvalidInput`` and nothing is asked. For the CLI and the API server."""
    import uuid

    from meshctl.app.context import rules_from
    from meshctl.controller import daemon
    from meshctl.controller.reload import ask

    if daemon.running(context.home) is None:
        raise CommandError("no controller is running (meshctl up starts one)")
    files = context.rule_files(policies)
    rules_from(context.home, files)  # every problem of every file: exit 2, nothing asked
    ask_id = uuid.uuid4().hex
    ask(context.home, ask_id, files)
    daemon.nudge(context.home)
    answer = _answer(context, ask_id, timeout_s)
    return {
        "outcome": answer["outcome"],
        "old_policy_hash": answer["old_hash"],
        "policy_hash": answer["new_hash"],
        "policies": files.policies,
        "changes": [
            {"part": part, "old_hash": old, "new_hash": new}
            for part, old, new in answer.get("changes") or []
        ],
        "hashes": dict(answer.get("hashes") or {}),
        "notes": list(answer.get("notes") or []),
        "message": str(answer.get("message") or ""),
    }


def _answer(context: AppContext, ask_id: str, timeout_s: float) -> dict[str, Any]:
    """The controller's answer to request ``ask_id``, from its heartbeat."""
    import time

    from meshctl.controller import daemon

    home = context.home
    deadline = time.monotonic() + timeout_s
    with context.busy("controller: reloading"):
        while True:
            beat = daemon.heartbeat(home) or {}
            answer = beat.get("reload")
            if isinstance(answer, dict) and answer.get("request") == ask_id:
                return answer
            if daemon.running(home) is None:
                raise CommandError("the controller stopped before it took the reload")
            if time.monotonic() > deadline:
                raise CommandError(
                    f"the controller did not confirm within {timeout_s:g} s; it takes the "
                    "request at its next cycle (meshctl status shows the hash it runs)"
                )
            time.sleep(0.2)
