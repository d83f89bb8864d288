"""What a workload sees of meshctl, from inside the job: the standard library only, so any
program on any pool can import it (``bundle`` imports the job's own Ray when it is called).

The controller asks a running job to checkpoint *now* when the job is about to be stopped:
its spot instance was given notice (AWS: two minutes, GCE: about 30 s) or it was preempted
for a more important job and has its grace. The request is a small JSON document written
where the job keeps its checkpoints (``$MESHCTL_CHECKPOINT_URI/.meshctl/checkpoint-request.json``),
the one place both the controller and the job can reach on every pool::

    from meshctl.workload import checkpoint_requested

    for step in range(start, steps):
        train_one_step()
        if step % every == 0 or checkpoint_requested():
            save_checkpoint(step)

A request is for one attempt (``$MESHCTL_ATTEMPT``): a stale one left by an earlier attempt
is ignored. After checkpointing, carry on: the controller stops the job at the deadline (or
the provider takes the node), and the next attempt resumes from the checkpoint.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from meshctl.lifecycle.datacache import env_name, failed_path

REQUEST = ".meshctl/checkpoint-request.json"
_cache: dict[str, tuple[float, dict[str, Any] | None]] = {}
_filesystems: dict[str, Any] = {}


def request_uri(checkpoint_uri: str) -> str:
    """Where the checkpoint request for a job with this checkpoint URI is written."""
    return f"{checkpoint_uri.rstrip('/')}/{REQUEST}"


def checkpoint_requested(every_s: float = 2.0) -> dict[str, Any] | None:
    """The controller's request to checkpoint this attempt now (``reason``, ``deadline_s``),
    or None. Reads the storage at most every ``every_s`` seconds; cheap to call every step."""
    uri, attempt = os.environ.get("MESHCTL_CHECKPOINT_URI"), os.environ.get("MESHCTL_ATTEMPT")
    if not uri:
        return None
    now = time.monotonic()
    cached = _cache.get(uri)
    if cached is not None and now - cached[0] < every_s:
        return cached[1]
    request = _read(request_uri(uri))
    if request is not None and str(request.get("attempt")) != attempt:
        request = None  # meant for an earlier attempt
    _cache[uri] = (now, request)
    return request


def _read(uri: str) -> dict[str, Any] | None:
    """The request at ``uri``; None when there is none, or it cannot be read now (a storage
    error must never stop the training loop that asks)."""
    try:
        if "://" in uri and not uri.startswith("file://"):
            text = _read_remote(uri)
        else:
            with open(uri.removeprefix("file://"), encoding="utf-8") as f:
                text = f.read()
        found = json.loads(text)
    except Exception:  # missing, half-written, unreachable, no SDK
        return None
    return found if isinstance(found, dict) else None


def _read_remote(uri: str) -> str:
    """Through pyarrow's filesystems (S3 with ``MESHCTL_CHECKPOINT_ENDPOINT_URL``, GCS), as
    Ray Train reads checkpoints; the filesystem is made once."""
    from meshctl.workload.storage import filesystem  # pyarrow: only where storage is remote

    scheme = uri.split("://", 1)[0]
    if scheme not in _filesystems:
        endpoint = os.environ.get("MESHCTL_CHECKPOINT_ENDPOINT_URL")
        _filesystems[scheme] = filesystem(uri, endpoint, timeout_s=5.0)[0]
    with _filesystems[scheme].open_input_stream(uri.split("://", 1)[1]) as stream:
        return str(stream.read().decode("utf-8"))


def bundle(index: int) -> dict[str, Any]:
    """Ray options that schedule a task or actor into bundle ``index`` of the job's placement
    group: what Ray holds for the job on node ``index`` of ``$MESHCTL_NODES`` (a job with
    ``reserve: workers``; see ``meshctl.workload.placement``). Empty outside such a job, so a
    program run by hand still works::

        Rank.options(num_gpus=gpus, **bundle(i)).remote(i)

    The task's own resources must fit in the bundle: the job's per-node resources."""
    group_id = os.environ.get("MESHCTL_PLACEMENT_GROUP")
    if not group_id:
        return {}
    from ray._raylet import PlacementGroupID  # the job's own Ray: only inside a job
    from ray.util.placement_group import PlacementGroup
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    group = PlacementGroup(PlacementGroupID(bytes.fromhex(group_id)))
    strategy = PlacementGroupSchedulingStrategy(
        group, placement_group_bundle_index=index, placement_group_capture_child_tasks=True
    )
    return {"scheduling_strategy": strategy}


def dataset(name: str, wait_s: float = 600.0, every_s: float = 0.5, node: int = 0) -> str:
    """Where to read the job's dataset ``name`` (its ``data`` section): the local path of the
    node's cached copy once it is complete, waiting up to ``wait_s`` for a fetch under way;
    else its source location (``..._SOURCE``: a URI, with ``..._ENDPOINT_URL`` for S3), so a
    job is never held forever by its cache (nor at all once the node's fetch failed).
    ``node``: which of the job's nodes (their order in ``MESHCTL_NODES``) the caller runs on;
    the first (where the driver runs) by default. A worker on another node passes its own
    index, and reads that node's copy. KeyError when the job declares no such dataset."""
    key = env_name(name)
    source = os.environ.get(f"{key}_SOURCE")
    if source is None:
        raise KeyError(f"the job declares no dataset {name!r} (in its data section)")
    per_node = os.environ.get(f"{key}_NODES")
    if per_node is not None:
        paths = per_node.split(",")
        local = paths[node] if node < len(paths) else ""
    else:
        local = os.environ.get(key, "") if node == 0 else ""
    deadline = time.monotonic() + wait_s
    while local:  # the cache links it there only once it is whole
        if os.path.exists(local):
            return local
        if time.monotonic() >= deadline or os.path.exists(failed_path(local)):
            break  # waited long enough, or the node's fetch failed (why: in that file)
        time.sleep(every_s)
    return source
