"""``meshctl gc [--dry-run]``: cloud instances tagged with this mesh that nothing owns.

An instance is owned when the store has a record of it (the controller launched it and has
not yet seen it terminated). Anything else carrying this mesh's tag is a leak: money spent on
nothing. ``--dry-run`` lists them; otherwise they are terminated and the run is an event. A
pool that could not be reached is one ``error:`` line each, and the exit code is 1.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

from meshctl.cli.context import app_context
from meshctl.cli.options import OutputOption
from meshctl.cli.render import Column, Output
from meshctl.errors import EXIT_FAILURE

if TYPE_CHECKING:
    from meshctl.clouds.base import Cloud, Instance
    from meshctl.model.mesh import Pool
    from meshctl.state import Store


def gc(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List; terminate nothing.")] = False,
    min_age_s: Annotated[
        float, typer.Option("--min-age", help="Leave instances younger than this (seconds).")
    ] = 900.0,
    output: OutputOption = Output.table,
) -> None:
    """Find, and terminate, cloud instances of this mesh that nothing owns.

    Instances tagged with this mesh that nothing in the store owns and older
    than --min-age (15 minutes by default, so that a launch not yet recorded is
    safe) are listed (--dry-run) or terminated. Every cloud pool is gone
    through; one it could not reach (no credentials, refused ones, no answer)
    is an error: line, and its leaks are unknown.

    Exit codes:
      0  every cloud pool was gone through
      1  a cloud pool could not be reached

    Examples:
      meshctl gc --dry-run
      meshctl gc --min-age 3600
    """
    from meshctl.cli import render

    context = app_context(ctx)
    mesh = context.mesh()
    rows: list[dict[str, str]] = []
    problems: list[str] = []
    with context.store() as store:
        for pool in mesh.spec.pools:
            found = _listed(pool, mesh.metadata.name)
            if isinstance(found, str):
                problems.append(f"pool {pool.name}: could not be reached: {found}")
                continue
            if found is None:
                continue  # not a cloud pool
            cloud, instances = found
            leaked = _leaked(store, pool.name, instances, min_age_s)
            action = "would_terminate" if dry_run else "terminated"
            if leaked and not dry_run:
                error = _terminate(store, cloud, pool.name, leaked)
                if error:
                    problems.append(error)
                    action = "terminate_failed"
            rows += [_row(pool.name, i, action) for i in leaked]
    render.emit(rows, COLUMNS, output, title="Instances tagged with this mesh that nothing owns")
    if problems:
        render.problems(problems)
        raise typer.Exit(EXIT_FAILURE)


COLUMNS = [
    Column("pool", "Pool"),
    Column("instance", "Instance"),
    Column("node_type", "Type"),
    Column("zone", "Zone"),
    Column("state", "State"),
    Column("request", "Request"),
    Column("action", "Action"),
]


def _listed(pool: Pool, mesh: str) -> tuple[Cloud, list[Instance]] | str | None:
    """The pool's provider and this mesh's instances there; why not (a string) when the
    provider could not be reached; None for a pool that is not a cloud pool."""
    from meshctl.clouds.base import reason_of
    from meshctl.controller.runtime import adapter_for, provider_for, refusal

    cloud, why = provider_for(pool, adapter_for)  # a leak is found whatever mesh.yaml lacks
    if cloud is None:
        return why  # None: not a cloud pool
    refused = refusal(cloud)
    if refused is not None:
        return refused
    try:
        return cloud, cloud.list_instances(mesh)  # before the store is read: see _leaked
    except Exception as err:  # an SDK's own error: this pool only
        return reason_of(err)


def _leaked(store: Store, pool: str, found: list[Instance], min_age_s: float) -> list[Instance]:
    """Instances no live record owns. The provider was listed first: one launched meanwhile
    is recorded by now, or younger than ``min_age_s``."""
    from meshctl.state import INSTANCE_LIVE, InstanceRecord, InstanceState

    going = INSTANCE_LIVE | {InstanceState.TERMINATING}  # asked to go, not yet confirmed
    owned = {i.id for i in store.list(InstanceRecord) if i.state in going}
    now = time.time()
    return [
        i
        for i in found
        if i.id not in owned
        and i.labels.get("pool") == pool
        and now - (i.launched_at_s or 0.0) > min_age_s
    ]


def _terminate(store: Store, cloud: Cloud, pool: str, leaked: list[Instance]) -> str | None:
    from meshctl.state import Event

    errors = cloud.terminate([i.id for i in leaked], f"gc-{int(time.time())}")
    if errors:
        return "; ".join(f"pool {pool}: {e.kind}: {e.message}" for e in errors)
    ids = ", ".join(i.id for i in leaked)
    store.append_event(Event(time.time(), "gc.terminated", None, f"{pool}: {ids}"))
    return None


def _row(pool: str, instance: Instance, action: str) -> dict[str, str]:
    return {
        "pool": pool,
        "instance": instance.id,
        "node_type": instance.node_type,
        "zone": instance.zone,
        "state": instance.state,
        "request": instance.request_id,
        "action": action,
    }
