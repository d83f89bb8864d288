"""Which devices a train worker sees: the accelerator registry's visibility variable for the
vendor of its node, set to the devices Ray gave the worker, before the job's loop runs.

Ray gives a worker devices by index (``get_accelerator_ids``) and sets its own variable for
them. A vendor whose devices are named by UUID (AMD: ``ROCR_VISIBLE_DEVICES``; HIP and ROCR
may number the devices differently, a UUID names the same one to both) has each index mapped
to its device's UUID, read from the vendor's tool (``amd-smi list --json``), and the variables
its one replaces unset (``HIP_VISIBLE_DEVICES`` would number within ROCR's list)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# vendor -> its tool's listing of the host's devices' UUIDs, in index order
UuidTool = Callable[[], list[str] | None]


class VisibilityError(ValueError):
    """The devices could not be named as the registry says (a UUID not known for an index)."""


def visible(
    devices: Mapping[str, Any], ids: Sequence[str], uuids: Sequence[str] | None
) -> dict[str, str]:
    """The visibility variable (and its value) for the devices of ``ids`` (indexes on the
    host, as Ray gives them), by index or by UUID (``uuids``: the host's, in index order), as
    ``devices`` (what dispatch took from the registry) says; empty without a variable or
    devices."""
    variable = devices.get("visibility")
    if not variable or not ids:
        return {}
    if devices.get("visible_by", "index") != "uuid":
        return {str(variable): ",".join(ids)}
    if uuids is None:
        raise VisibilityError(f"{variable} names devices by UUID, and none could be read here")
    names = []
    for given in ids:
        index = int(given)
        if not 0 <= index < len(uuids):
            raise VisibilityError(
                f"{variable}: device {given} has no UUID (the host lists {len(uuids)})"
            )
        names.append(uuids[index])
    return {str(variable): ",".join(names)}


def amd_uuids(run: Callable[..., Any] = subprocess.run) -> list[str] | None:
    """The host's AMD GPUs' UUIDs by index, from ``amd-smi list --json`` (a list of
    ``{"gpu": index, "uuid": ...}``); None without amd-smi or a listing it understands."""
    if shutil.which("amd-smi") is None:
        return None
    done = run(["amd-smi", "list", "--json"], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        return None
    try:
        listed = json.loads(done.stdout)
        rows = sorted((int(row["gpu"]), str(row["uuid"])) for row in listed)
    except (ValueError, TypeError, KeyError):
        return None
    return [uuid for _, uuid in rows]


UUID_TOOLS: Mapping[str, UuidTool] = {"amd": amd_uuids}


def set_visible(
    devices: Mapping[str, Any], environ: dict[str, str] | None = None
) -> dict[str, str]:
    """In a worker: set the registry's variable for the devices Ray gave it (and unset those it
    replaces); returns what it set. Nothing without devices given (an emulated mesh's
    workers hold none)."""
    import ray

    env: Any = os.environ if environ is None else environ
    resource = str(devices.get("resource") or "GPU")
    ids = [str(i) for i in ray.get_runtime_context().get_accelerator_ids().get(resource, [])]
    tool = UUID_TOOLS.get(str(devices.get("vendor")))
    uuids = tool() if tool is not None and devices.get("visible_by") == "uuid" and ids else None
    found = visible(devices, ids, uuids)
    if found:
        for name in devices.get("instead_of") or ():
            env.pop(str(name), None)
        env.update(found)
    return found
