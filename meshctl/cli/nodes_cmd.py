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
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from meshctl.cli.context import app_context
from meshctl.cli.errors import InvalidRequestError
from meshctl.cli.options import OutputOption, duration_flag
from meshctl.cli.render import Column, Output, clock_of

if TYPE_CHECKING:
    from collections.abc import Sequence

    from meshctl.cli.remote import Remote
    from meshctl.state import AuditEntry, NodeDetail, NodeRecord, Store

DEAD = "dead"  # a node Ray lists dead: its raylet is gone

app = typer.Typer(help="Nodes: list, show, cordon, drain, uncordon, health.", no_args_is_help=True)

NodeArgument = Annotated[str, typer.Argument(help="pool/node, or the node's name.")]


def find_node(store: Store, ref: str) -> NodeRecord:
    from meshctl.state import NodeRecord

    nodes = store.list(NodeRecord)
    matches = [n for n in nodes if n.id == ref] or [
        n for n in nodes if n.id.split("/", 1)[1] == ref
    ]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        known = ", ".join(n.id for n in nodes[:8]) or "none yet (is the mesh up?)"
        raise InvalidRequestError(f"node: expected one of {known}, got {ref!r}")
    raise InvalidRequestError(f"node: {ref!r} is in several pools; name it pool/node")


@app.command("list")
def list_nodes(ctx: typer.Context, output: OutputOption = Output.table) -> None:
    """Every node: state, alive, GPUs in use, the jobs on it, labels."""
    from meshctl.cli import render

    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:
        rows = remote.call("GET", "/v1/nodes")
    else:
        with context.store() as store:
            rows = node_rows(context.home, store)
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


def node_rows(home: Path, store: Store) -> list[dict[str, Any]]:
    """Every live node as data (``shapes.NodeRow``): for ``nodes list`` and the API server.
    The node of a cloud instance the provider took back or meshctl terminated is not listed
    (``nodes show`` and the events keep its history)."""
    from meshctl.pools.observed import node_name
    from meshctl.state import InstanceRecord, InstanceState, NodeRecord

    ended = (InstanceState.INTERRUPTED, InstanceState.TERMINATED)
    gone = {f"{i.pool}/{node_name(i.id)}" for i in store.list(InstanceRecord, state=ended)}
    nodes = [n for n in store.list(NodeRecord) if n.id not in gone]
    used, jobs = _usage(store)
    agents = _agents(home)
    return [_node_row(n, used.get(n.id, 0.0), jobs.get(n.id, []), agents.get(n.id)) for n in nodes]


def node_data(home: Path, store: Store, ref: str) -> dict[str, Any]:
    """One node as data (``shapes.NodeDetail``): for ``nodes show`` and the API server."""
    from meshctl.cli import nodeview

    found = find_node(store, ref)
    used, jobs = _usage(store)
    agents = _agents(home)
    agent = agents.get(found.id)
    row = _node_row(found, used.get(found.id, 0.0), jobs.get(found.id, []), agent)
    return row | {"cache": nodeview.cache_data((agent or {}).get("cache"), agents)}


@app.command("show")
def show(ctx: typer.Context, node: NodeArgument, output: OutputOption = Output.table) -> None:
    """One node: state, GPUs, jobs, labels, its agent, and its data cache (root, capacity and
    use, each dataset held or being fetched and where from, counters)."""
    from meshctl.cli import render

    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:
        data = remote.call("GET", f"/v1/nodes/{_remote_ref(remote, node)}")
    else:
        with context.store() as store:
            data = node_data(context.home, store, node)
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


def _usage(store: Store) -> tuple[dict[str, float], dict[str, list[str]]]:
    """GPUs in use and the jobs on each node, by "pool/node", from the active attempts."""
    from meshctl.state import ACTIVE_ATTEMPT, AttemptRecord

    used: dict[str, float] = {}
    jobs: dict[str, list[str]] = {}
    for attempt in store.list(AttemptRecord):
        if attempt.state not in ACTIVE_ATTEMPT:
            continue
        for held in attempt.detail.allocations:
            key = f"{attempt.pool}/{held.node}"
            used[key] = used.get(key, 0.0) + held.gpus()
            jobs.setdefault(key, []).append(attempt.job_id)
    return used, jobs


def _agents(home: Path) -> dict[str, dict[str, Any]]:
    """What each node's agent said at the controller's last cycle, by "pool/node"."""
    import json

    from meshctl.agent import AGENTS_FILE

    try:  # the run folder, as cli.context reads it: no controller modules loaded for a name
        found: dict[str, dict[str, Any]] = json.loads((home / "run" / AGENTS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return found


def _node_row(
    node: NodeRecord, gpus_used: float, jobs: list[str], agent: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A node as data (``shapes.NodeRow``)."""
    from meshctl.jsondata import timestamp

    if agent is not None:  # AgentStatus.to_json, its time as a timestamp
        agent = {"url": agent.get("url", ""), "verdict": agent.get("verdict", "unknown"),
                 "reasons": list(agent.get("reasons") or []), "error": agent.get("error"),
                 "probed_at": timestamp(agent.get("probed_at_s"))}  # fmt: skip
    gpus, alive = node.resources.get("gpus"), bool(node.resources.get("alive"))
    return {
        "node": node.id,
        "pool": node.pool,
        "state": node.state if alive else DEAD,  # whatever the operator had it at
        "reason": node.detail.reason or (None if alive else "Ray lists its node dead"),
        "deadline_at": timestamp(node.detail.deadline_s),
        "alive": alive,
        "gpus": None if gpus is None else int(gpus),
        "gpus_used": round(gpus_used, 4),
        "accelerator": node.resources.get("accelerator") or None,
        "devices": dict(node.resources.get("devices") or {}),
        "jobs": jobs,
        "labels": dict(sorted(node.labels.items())),
        "agent": agent,
    }


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


def _kept(node: NodeRecord, state: str, deadline_s: float | None) -> NodeDetail:
    """What a node keeps when the operator sets its state: what the controller counts, and
    its health signal unless it is put back in service; and a drain's deadline."""
    from meshctl.state import NodeDetail, NodeState

    was = node.detail
    reason = was.reason if state != NodeState.READY else None  # still unhealthy: the same signal
    return NodeDetail(
        first_seen_s=was.first_seen_s, failures=was.failures, deadline_s=deadline_s, reason=reason
    )


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
        node = set_state(store, ref, state, why, deadline_s)
    render.plain(f"{node.id} {state}")


_ACTIONS = {"cordoned": "cordon", "draining": "drain", "ready": "uncordon"}


def _remote_ref(remote: Remote, ref: str) -> str:
    """``pool/node`` quoted for a URL; a node named alone is looked up among the server's."""
    if "/" not in ref:
        nodes = remote.call("GET", "/v1/nodes")
        names = {row["node"].split("/", 1)[1]: row["node"] for row in nodes}
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


def set_state(
    store: Store,
    ref: str,
    state: str,
    why: str,
    deadline_s: float | None = None,
    also: Sequence[AuditEntry] = (),
) -> NodeRecord:
    """Put a node in ``state`` (cordoned, draining, ready) with an event saying ``why``, and
    ``also`` (audit entries) in the same write; the node as stored. For the CLI and the API
    server."""
    from dataclasses import replace

    from meshctl.state import ConflictError, Event

    for _ in range(10):
        node = find_node(store, ref)
        now = time.time()
        event = Event(now, f"node.{state}", None, f"{node.id}: {why}", {"node": node.id})
        detail = _kept(node, state, deadline_s)
        try:
            return store.update(
                replace(node, state=state, detail=detail, updated_at_s=now),
                expected_version=node.version,
                events=[event, *also],
            )
        except ConflictError:
            continue
    raise InvalidRequestError(f"node {ref}: kept changing; try again")


@app.command("cordon")
def cordon(ctx: typer.Context, node: NodeArgument) -> None:
    """No new work on the node; what runs there keeps running."""
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
    """No new work; jobs still running after the deadline are evicted and requeued."""
    from meshctl.state import NodeState

    seconds = duration_flag("--deadline", deadline)
    why = f"draining, deadline {deadline}"
    _set(ctx, node, NodeState.DRAINING, why, deadline_s=time.time() + seconds)


@app.command("uncordon")
def uncordon(ctx: typer.Context, node: NodeArgument) -> None:
    """Back in service."""
    from meshctl.cli import render
    from meshctl.state import NodeState

    context = app_context(ctx)
    remote = context.remote()
    if remote is not None:
        said = _remote_set(remote, node, "uncordon", "")
        render.plain(f"{said['node']} {said['state']}")
        return
    with context.store() as store:
        found = back_in_service(context.home, store, node)
    render.plain(f"{found.id} {NodeState.READY}")


def back_in_service(
    home: Path, store: Store, ref: str, also: Sequence[AuditEntry] = ()
) -> NodeRecord:
    """Uncordon: the node's health signal cleared, what its agent says against it now
    overruled, and the node ready. For the CLI and the API server."""
    from meshctl.pools.health import set_signal
    from meshctl.state import NodeState

    pool, name = find_node(store, ref).id.split("/", 1)
    set_signal(home, pool, name, None)
    _overrule_agent(home, pool, name)
    return set_state(store, ref, NodeState.READY, "back in service", also=also)


def _overrule_agent(home: Path, pool: str, name: str) -> None:
    """The operator says the node is fine: what its agent says against it now is ignored
    until the agent says something else."""
    from meshctl.agent.watch import said
    from meshctl.pools.health import overrule

    agent = _agents(home).get(f"{pool}/{name}") or {}
    verdict = str(agent.get("verdict") or "")
    bad = verdict in ("unhealthy", "dead", "suspect")
    overrule(home, pool, name, said(verdict, agent.get("reasons") or []) if bad else None)


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
    """Set the node's health signal; the controller acts on it. --healthy also overrules the
    node's agent: its present verdict is ignored until it says something else."""
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
            found_id = set_health(context.home, find_node(store, node).id, reason)
        daemon.nudge(context.home)
    render.plain(f"{found_id}: " + (f"unhealthy ({reason})" if reason else "healthy"))


def set_health(home: Path, node_id: str, unhealthy: str | None) -> str:
    """Set (a reason) or clear (None) a node's health signal, as its probe would; clearing
    also overrules what its agent says against it now. For the CLI and the API server."""
    from meshctl.pools.health import overrule, set_signal

    pool, name = node_id.split("/", 1)
    set_signal(home, pool, name, unhealthy)
    if unhealthy:
        overrule(home, pool, name, None)  # the operator says unhealthy: nothing ignored
    else:
        _overrule_agent(home, pool, name)
    return node_id
