"""``meshctl nodes list|show|cordon|drain|uncordon|health``: the nodes the controller has seen.

Show: one node, and its data cache as its agent last reported it (what it holds, where each
dataset came from, how much it read from sources and from peers).

Cordon: no new work, running jobs stay. Drain: no new work, and jobs still running when the
deadline passes are evicted (and requeued); the node is then ``drained`` (still no new work)
until it is uncordoned. Uncordon: back in service (an unhealthy node's
signal is cleared too: the operator says it is fine). Health: set or clear the node's health
signal, as its probe would (``meshctl.pools.health``); the controller takes an unhealthy node
out of service, asks its jobs to checkpoint, evicts and requeues them, and puts the node back
when the signal clears. A node is named ``pool/node``, or by its name alone where only one
pool has it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from meshctl.app import nodes
from meshctl.cli.context import app_context
from meshctl.cli.options import OutputOption, duration_flag
from meshctl.cli.render import Column, Output, clock_of
from meshctl.errors import InvalidRequestError

if TYPE_CHECKING:
    from meshctl.app.remote import Remote

app = typer.Typer(help="Nodes: list, show, cordon, drain, uncordon, health.", no_args_is_help=True)

NodeArgument = Annotated[str, typer.Argument(help="pool/node, or the node's name.")]


@app.command("list")
def list_nodes(ctx: typer.Context, output: OutputOption = Output.table) -> None:
    """Every node: state, alive, GPUs in use, jobs, labels, agent's verdict.

    A node Ray lists dead reads dead; the node of a cloud instance taken back
    or terminated leaves the list (show keeps it). Each node's agent: its URL,
    last probe, verdict and reasons.

    Examples:
      meshctl nodes list
      meshctl nodes list -o json
    """
    from meshctl.cli import render

    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:
        rows = remote.call("GET", "/v1/nodes")
    else:
        with context.store() as store:
            rows = nodes.node_rows(context.home, store)
    render.emit(
        rows if output is not Output.table else [_node_cells(r) for r in rows],
        [
            Column("node", "Node"),
            Column("state", "State"),
            Column("alive", "Alive"),
            Column("gpus", "GPUs used", "right"),
            Column("accelerator", "GPU"),
            Column("jobs", "Jobs"),
            Column("agent", "Agent"),
            Column("labels", "Labels"),
        ],
        output,
    )


@app.command("show")
def show(ctx: typer.Context, node: NodeArgument, output: OutputOption = Output.table) -> None:
    """One node: state, GPUs, jobs, labels, its agent and its data cache.

    The data cache as its agent last reported it: root, capacity and use, each
    dataset held or being fetched, its version, where it came from, when last
    used, pinned or not; bytes read from sources and from peers, hits and
    refetches; why a fetch failed.

    Examples:
      meshctl nodes show onprem/gpu-rack1
      meshctl nodes show gpu-rack1 -o json
    """
    from meshctl.cli import render

    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:
        data = remote.call("GET", f"/v1/nodes/{_remote_ref(remote, node)}")
    else:
        with context.store() as store:
            data = nodes.node_data(context.home, store, node)
    if output is not Output.table:
        render.emit_data(data, output)
        return
    _show_node(data)


def _show_node(data: dict[str, Any]) -> None:
    from meshctl.cli import nodeview, render

    cells = _node_cells(data)
    render.say(f"[bold]{render.esc(data['node'])}[/]: {render.esc(cells['state'])}")
    lines = {
        "alive": cells["alive"],
        "GPUs used": cells["gpus"] + (f" ({data['accelerator']})" if data["accelerator"] else ""),
        "jobs": ", ".join(data["jobs"]) or "none",
        "labels": cells["labels"] or "none",
        "agent": cells["agent"] + _probed(data["agent"]),
    }
    for key, value in lines.items():
        render.say(f"  {key}: {render.esc(value)}")
    cache = data["cache"]
    if cache is None:
        said = "its agent keeps none" if data["agent"] else "no report from its agent"
        render.say(f"  cache: none ({said})")
        return
    render.say("  cache:")
    for line in nodeview.cache_lines(cache):
        render.say(f"    {render.esc(line)}")
    if cache["entries"]:
        now = time.time()
        rows = [nodeview.entry_cells(e, now) for e in cache["entries"]]
        render.emit(rows, nodeview.ENTRY_COLUMNS, Output.table)


def _probed(agent: dict[str, Any] | None) -> str:
    if agent is None:
        return ""
    when = f", probed {clock_of(agent['probed_at'])}" if agent["probed_at"] else ""
    error = f", last pull failed: {agent['error']}" if agent["error"] else ""
    return f" ({agent['url']}{when}{error})"


def _node_cells(row: dict[str, Any]) -> dict[str, Any]:
    """The same node in words for the table."""
    from meshctl.state import NodeState

    deadline = row["deadline_at"]
    draining = deadline and row["state"] == NodeState.DRAINING
    until = f" until {clock_of(deadline)}" if draining else ""
    return row | {
        "state": row["state"] + until + (f" ({row['reason']})" if row["reason"] else ""),
        "alive": "yes" if row["alive"] else "no",
        "gpus": f"{row['gpus_used']:g} / {row['gpus'] if row['gpus'] is not None else '-'}",
        "labels": ", ".join(  # where its agent answers: in the Agent column's JSON
            f"{k}={v}" for k, v in row["labels"].items() if not k.startswith("meshctl.io/agent-")
        ),
        "agent": _agent_cell(row["agent"]),
    }


def _agent_cell(agent: dict[str, Any] | None) -> str:
    if agent is None:
        return "-"
    reasons = agent["reasons"]
    return str(agent["verdict"]) + (f" ({reasons[0]})" if reasons else "")


def _set(
    ctx: typer.Context, ref: str, state: str, why: str, deadline_s: float | None = None
) -> None:
    from meshctl.cli import render

    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:
        said = _remote_set(remote, ref, _ACTIONS[state], why)
        render.plain(f"{said['node']} {said['state']}")
        return
    with context.store() as store:
        node = nodes.set_state(store, ref, state, why, deadline_s)
    render.plain(f"{node.id} {state}")


_ACTIONS = {"cordoned": "cordon", "draining": "drain", "ready": "uncordon"}


def _remote_ref(remote: Remote, ref: str) -> str:
    """``pool/node`` quoted for a URL; a node named alone is looked up among the server's."""
    if "/" not in ref:
        listed = remote.call("GET", "/v1/nodes")
        names = {row["node"].split("/", 1)[1]: row["node"] for row in listed}
        ref = names.get(ref, ref)
    if "/" not in ref:
        raise InvalidRequestError(f"node: expected pool/node or a known node's name, got {ref!r}")
    from urllib.parse import quote

    pool, node = ref.split("/", 1)
    return f"{quote(pool, safe='')}/{quote(node, safe='')}"


def _remote_set(remote: Remote, ref: str, action: str, why: str) -> Any:
    """The API server's answer to cordon, drain (``why`` holds its deadline) or uncordon."""
    body = {"deadline": why.removeprefix("draining, deadline ")} if action == "drain" else None
    return remote.call("POST", f"/v1/nodes/{_remote_ref(remote, ref)}/{action}", body)


@app.command("cordon")
def cordon(ctx: typer.Context, node: NodeArgument) -> None:
    """Take a node out of scheduling; what runs there keeps running.

    Examples:
      meshctl nodes cordon onprem/gpu-rack1
      meshctl nodes cordon gpu-rack2
    """
    from meshctl.state import NodeState

    _set(ctx, node, NodeState.CORDONED, "cordoned by user")


@app.command("drain")
def drain(
    ctx: typer.Context,
    node: NodeArgument,
    deadline: Annotated[
        str, typer.Option(help="How long running jobs may finish, e.g. 10m.")
    ] = "10m",
) -> None:
    """Stop new work on a node; evict what still runs at the deadline.

    Jobs still running after the deadline are evicted and requeued. The node is
    then drained until uncordoned.

    Examples:
      meshctl nodes drain onprem/gpu-rack1
      meshctl nodes drain gpu-rack2 --deadline 30m
    """
    from meshctl.state import NodeState

    seconds = duration_flag("--deadline", deadline)
    why = f"draining, deadline {deadline}"
    _set(ctx, node, NodeState.DRAINING, why, deadline_s=time.time() + seconds)


@app.command("uncordon")
def uncordon(ctx: typer.Context, node: NodeArgument) -> None:
    """Put a node back in service after cordon, drain or a health signal.

    Uncordoning also overrules what the node's agent says against it now, as
    nodes health --healthy does.

    Examples:
      meshctl nodes uncordon onprem/gpu-rack1
    """
    from meshctl.cli import render
    from meshctl.state import NodeState

    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:
        said = _remote_set(remote, node, "uncordon", "")
        render.plain(f"{said['node']} {said['state']}")
        return
    with context.store() as store:
        found = nodes.back_in_service(context.home, store, node)
    render.plain(f"{found.id} {NodeState.READY}")


@app.command("health")
def health(
    ctx: typer.Context,
    node: NodeArgument,
    unhealthy: Annotated[
        str | None,
        typer.Option(help='Say the node is unhealthy, and why (e.g. "GPU XID 79").'),
    ] = None,
    healthy: Annotated[
        bool,
        typer.Option(help="Clear the signal, and overrule what its agent says against it now."),
    ] = False,
) -> None:
    """Set or clear a node's health signal: the operator's word.

    --unhealthy REASON takes the node out of service whatever its agent says:
    the controller asks its jobs to checkpoint, evicts and requeues them.
    --healthy clears the signal and overrules what the agent says against it
    now: that verdict is ignored until the agent says something else, and
    forgotten once it says healthy. The node returns when healthy again (or
    uncordoned).

    Examples:
      meshctl nodes health onprem/gpu-rack1 --unhealthy "GPU XID 79"
      meshctl nodes health onprem/gpu-rack1 --healthy
    """
    from meshctl.cli import render
    from meshctl.controller import daemon

    if (unhealthy is None) == (not healthy):
        raise InvalidRequestError("health: give --unhealthy REASON or --healthy")
    if unhealthy is not None and not unhealthy.strip():
        raise InvalidRequestError("--unhealthy: expected a reason, got an empty one")
    reason = unhealthy.strip() if unhealthy else None
    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:
        said = remote.call("POST", f"/v1/nodes/{_remote_ref(remote, node)}/health",
                           {"unhealthy": reason})  # fmt: skip
        found_id = str(said["node"])
    else:
        with context.store() as store:
            found_id = nodes.set_health(context.home, nodes.find_node(store, node).id, reason)
        daemon.nudge(context.home)
    render.plain(f"{found_id}: " + (f"unhealthy ({reason})" if reason else "healthy"))
