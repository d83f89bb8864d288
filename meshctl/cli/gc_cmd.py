"""``meshctl gc [--dry-run]``: cloud instances tagged with this mesh that nothing owns.

An instance is owned when the store has a record of it (the controller launched it and has
not yet seen it terminated). Anything else carrying this mesh's tag is a leak: money spent on
nothing. ``--dry-run`` lists them; otherwise they are terminated and the run is an event.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer

from meshctl.cli.context import app_context
from meshctl.cli.errors import CommandError
from meshctl.cli.options import OutputOption
from meshctl.cli.render import Column, Output


def gc(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List; terminate nothing.")] = False,
    min_age_s: Annotated[
        float, typer.Option("--min-age", help="Leave instances younger than this (seconds).")
    ] = 900.0,
    output: OutputOption = Output.table,
) -> None:
    """Find (and terminate) instances tagged with this mesh that nothing in the store owns."""
    from meshctl.cli import render
    from meshctl.controller.runtime import cloud_for
    from meshctl.state import INSTANCE_LIVE, Event, InstanceRecord

    context = app_context(ctx)
    mesh = context.mesh()
    rows, problems = [], []
    with context.store() as store:
        for pool in mesh.spec.pools:
            try:
                cloud = cloud_for(pool)
                # listed before the store is read: an instance launched meanwhile is owned
                found = cloud.list_instances(mesh.metadata.name) if cloud else []
            except Exception as err:  # an SDK's own error: report it per pool, go on
                problems.append(f"pool {pool.name}: cannot list instances: {err}")
                continue
            if cloud is None:
                continue
            owned = {i.id for i in store.list(InstanceRecord) if i.state in INSTANCE_LIVE}
            now = time.time()
            leaked = [
                i
                for i in found
                if i.id not in owned
                and i.labels.get("pool") == pool.name
                and now - (i.launched_at_s or 0.0) > min_age_s  # a launch not yet recorded
            ]
            action = "would_terminate" if dry_run else "terminated"
            if leaked and not dry_run:
                errors = cloud.terminate([i.id for i in leaked], f"gc-{int(time.time())}")
                if errors:
                    problems += [f"pool {pool.name}: {e.kind}: {e.message}" for e in errors]
                    action = "terminate_failed"
                else:
                    ids = ", ".join(i.id for i in leaked)
                    store.append_event(
                        Event(time.time(), "gc.terminated", None, f"{pool.name}: {ids}")
                    )
            rows += [
                {
                    "pool": pool.name,
                    "instance": i.id,
                    "node_type": i.node_type,
                    "zone": i.zone,
                    "state": i.state,
                    "request": i.request_id,
                    "action": action,
                }
                for i in leaked
            ]
    render.emit(
        rows,
        [
            Column("pool", "Pool"),
            Column("instance", "Instance"),
            Column("node_type", "Type"),
            Column("zone", "Zone"),
            Column("state", "State"),
            Column("request", "Request"),
            Column("action", "Action"),
        ],
        output,
        title="Instances tagged with this mesh that nothing owns",
    )
    if problems:
        raise CommandError("; ".join(problems))
