"""What ``meshctl jobs show`` says about a job in words for people, from its data
(``meshctl.app.jobdata``): a job's resources read as people write them ("1 GPU, 0.25 CPU,
512 MiB memory"), a train job says its loop and workers, a failed attempt shows the first
lines of Ray's message with where to read the rest."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ERROR_LINES = 3  # of Ray's message on a failed attempt; the rest is in the job's log


def resources_text(resources: Mapping[str, Any]) -> str:
    """``{gpus: 1, cpus: 0.25, memory_gib: 0.5}`` -> ``1 GPU, 0.25 CPU, 512 MiB memory``."""
    parts = []
    gpus = float(resources.get("gpus") or 0)
    if gpus:
        gpu = _count(gpus, "GPU") + _accelerator(resources)
        memory = resources.get("gpu_memory_gib")
        parts.append(gpu + (f" with {_gib(float(memory))} or more each" if memory else ""))
    parts.append(_count(float(resources.get("cpus", 1.0)), "CPU"))
    parts.append(f"{_gib(float(resources.get('memory_gib', 4.0)))} memory")
    if float(resources.get("nic_gbps") or 0):
        parts.append(f"{float(resources['nic_gbps']):g} Gbps NIC")
    text = ", ".join(parts)
    nodes = int(resources.get("nodes") or 1)
    if nodes > 1:
        text = f"{text} on each of {nodes} nodes"
        topology = resources.get("topology")
        if topology:
            text += f" ({topology['mode']}: one {topology['domain']})"
    return text


def _count(value: float, unit: str) -> str:
    return f"{value:g} {unit}" + ("" if value <= 1 else "s")


def _accelerator(resources: Mapping[str, Any]) -> str:
    chosen = resources.get("accelerator") or {}
    options = chosen.get("options") or []
    if options:  # a fungible request: what it may be met as
        met = " or ".join(f"{o['gpus']} {o['model']}" for o in options)
        return f" (as {met})"
    models = " or ".join(chosen.get("any_of") or [])
    vendor = chosen.get("vendor")
    topology = chosen.get("topology")
    named = " ".join(x for x in (vendor, models, topology and f"{topology} slices") if x)
    return f" ({named})" if named else ""


def _gib(value: float) -> str:
    return f"{value * 1024:g} MiB" if value < 1 else f"{value:g} GiB"


def train_text(train: Mapping[str, Any], nodes: int) -> str:
    """``loop model:train_loop, 4 workers (2 on each of 2 nodes), ...``: a job document's
    ``train`` (``app.shapes``) in words."""
    per_node = int(train.get("workers_per_node", 1))
    workers = per_node * nodes
    spread = f" ({per_node} on each of {nodes} nodes)" if nodes > 1 else ""
    text = f"loop {train['loop']}, {_count(workers, 'worker')}{spread}"
    if train.get("min_workers"):
        text += f", elastic down to {train['min_workers']}"
    failures = train.get("max_failures", 3)
    text += ", " + (
        "no failure recovered inside an attempt"
        if failures == 0
        else "any number of failures recovered inside an attempt"
        if failures < 0
        else f"up to {failures} failures recovered inside an attempt"
    )
    if train.get("hang_timeout_s"):
        text += f", restarted after {float(train['hang_timeout_s']):g} s without progress"
    return text


def error_excerpt(message: str, lines: int = ERROR_LINES) -> tuple[list[str], int]:
    """The first ``lines`` non-empty lines of Ray's message, and how many more there are."""
    said = [line.rstrip() for line in message.strip().splitlines() if line.strip()]
    return said[:lines], max(0, len(said) - lines)


def service_text(service: Mapping[str, Any]) -> str:
    """``3 replicas wanted, 3 placed, 3 running (RUNNING); 41 requests/s, p50 22 ms ...``"""
    text = (
        f"{service['replicas_wanted'] or 0} replicas wanted "
        f"({service['replicas_min']} to {service['replicas_max']}), "
        f"{service['replicas_placed']} placed, {service['replicas_running'] or 0} running"
    )
    if service["status"]:
        text += f" ({service['status']})"
    if service["rps"] is not None:
        text += f"; {service['rps']:g} requests/s"
    if service["p50_ms"] is not None and service["p99_ms"] is not None:
        text += f", p50 {service['p50_ms']:g} ms, p99 {service['p99_ms']:g} ms"
    if service["in_flight"] is not None:
        text += f", {service['in_flight']:g} in flight"
    if service["url"]:
        text += f"; {service['url']}"
    return text


def loan_text(loan: Mapping[str, Any]) -> str:
    until = loan["closed_at"] or "now"
    return (
        f"{loan['lender']} lent {loan['node']} ({loan['gpus']:g} GPUs) to {loan['borrower']} "
        f"from {loan['opened_at']} to {until}: {loan['gpu_hours']:g} GPU-hours"
    )
