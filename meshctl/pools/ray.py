"""A Ray cluster as a pool, over HTTP only: one controller can drive many clusters.

Inventory comes from the dashboard's state API (``GET /api/v0/nodes``; past its cap, from the
node summary: ``raynodes.py``); jobs go through the Ray Jobs REST API (list, status, logs,
stop) and ``JobSubmissionClient`` for submissions (it uploads the working directory). Every
request carries ``Authorization: Bearer <token>``: Ray 2.60 turns token authentication on by
default, and meshctl keeps it on.

Submissions are idempotent: a submission id names one attempt of one job, Ray refuses a
second job with the same id, and ``submit`` first looks the id up, so a controller that died
between submitting and recording adopts the job it already submitted.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from meshctl.errors import Failure
from meshctl.pools import driverlogs, raynodes
from meshctl.pools.observed import (
    CLAIMED_RESOURCES,
    NODE_LABEL,
    ROLE_LABEL,
    ObservedJob,
    ObservedNode,
    PoolObservation,
    Submission,
)
from meshctl.workload.exits import without_exit_line

GIB = 1024**3


# The last node summary each dashboard gave (by address), for a read that fails: a busy
# dashboard that times out must not make GPUs taken by other work look free.
_LAST_IN_USE: dict[str, tuple[float, dict[str, float]]] = {}
IN_USE_KEPT_S = 120.0


class PoolError(Failure):
    """The pool's cluster could not be reached or refused a request."""


class PoolUnavailable(PoolError):
    """The pool cannot take a request now, through no fault of the request: it did not
    answer (refused connection, no answer in time) or answered with a server error (HTTP
    5xx, as Ray's "No available agent to submit job, please try again later" while a head's
    job agent starts). Worth sending again later; a job waits on it, never fails of it."""


_SERVER_ERROR = re.compile(r"status code 5\d\d")  # the job SDK's RuntimeError for HTTP 5xx


def unavailable(err: BaseException) -> bool:
    """Whether an error of the Ray job SDK or of a request says the pool cannot take the
    request now (see ``PoolUnavailable``), rather than that the request itself is refused."""
    if isinstance(err, PoolUnavailable | OSError):
        return True  # timeouts, and the SDK's connection errors (requests'), are OSErrors
    return isinstance(err, RuntimeError) and _SERVER_ERROR.search(str(err)) is not None


@dataclass(frozen=True, slots=True)
class LogChunk:
    """Bytes of a driver log from some offset, and how long the whole log is now."""

    data: bytes
    size: int


@dataclass(frozen=True, slots=True)
class RayPoolClient:
    pool: str
    address: str  # the dashboard's HTTP address, e.g. http://127.0.0.1:8265
    token: str | None
    timeout_s: float = 10.0
    # A cluster on this machine (the embedded pool, emulated instances): its Ray temp folder,
    # where the driver logs can be read from any offset. Ray's HTTP API has no such read.
    log_root: str | None = None
    kept_logs: str | None = None  # a cluster on this machine: its stopped sessions' driver logs
    page: int = raynodes.PAGE  # nodes the state API is asked for at once (its cap by default)

    # --- observing ------------------------------------------------------------------------

    def observe(self) -> PoolObservation:
        """Nodes and jobs in one go; an unreachable cluster is an observation, not an error."""
        try:
            return PoolObservation(self.pool, True, "", tuple(self.nodes()), self.jobs())
        except Exception as err:
            return PoolObservation(self.pool, False, self._why(err))

    def check(self) -> str | None:
        """Why the pool cannot be used now ("dashboard at ... does not answer", a refused
        token), or None: one small authenticated request."""
        try:
            self._request("GET", "/api/v0/nodes?limit=1")
        except Exception as err:
            return self._why(err)
        return None

    def _why(self, err: Exception) -> str:
        """Why the cluster could not be used, from what a request raised: its own words for a
        ``PoolError``; for anything else (a torn response, a proxy's garbage), the type too."""
        if isinstance(err, PoolError):
            return str(err)
        return f"dashboard at {self.address}: {type(err).__name__}: {err}"

    def nodes(self) -> list[ObservedNode]:
        """Every node Ray lists, live ones first: live and dead listed apart, and past the
        state API's cap from the node summary (``raynodes.py``)."""
        live, cut = raynodes.listed(self._request("GET", raynodes.listing("ALIVE", self.page)))
        dead, _ = raynodes.listed(self._request("GET", raynodes.listing("DEAD", self.page)))
        summary = self._summary()
        if cut:  # the rest are not gone: a listing that says it left some out
            if not summary or not summary.get("summary"):
                raise PoolError(
                    f"dashboard at {self.address} listed {len(live)} live nodes of more, "
                    "and its node summary did not answer"
                )
            live += raynodes.unlisted(summary, live)
        data = live + dead
        used = self._in_use(summary)
        nodes = [
            _node(raw, name, used.get(str(raw.get("node_id", ""))))
            for raw, name in zip(data, node_names(data), strict=True)
        ]
        # Ray keeps listing dead nodes; a node that came back under the same name is that
        # node, and of several dead entries of one name the last is enough.
        alive = {n.name for n in nodes if n.alive}
        dead_by_name = {n.name: n for n in nodes if not n.alive and n.name not in alive}
        return [n for n in nodes if n.alive] + list(dead_by_name.values())

    def gpus_in_use(self) -> dict[str, float]:
        """GPUs Ray counts as taken on each node (by node id), by any work: meshctl's and what
        was submitted to the cluster some other way, held by placement groups too. From the
        dashboard's node summary (its logical resources, ``gpus_taken``); empty when the
        cluster does not give it."""
        return self._in_use(self._summary())

    def _summary(self) -> Mapping[str, Any] | None:
        """The dashboard's node summary; empty from an older dashboard, which has none; None
        when it did not answer this time."""
        try:
            body = self._request("GET", "/nodes?view=summary")
        except _NotFound:
            return {}
        except (PoolError, ValueError):
            return None
        data = body.get("data") if isinstance(body, dict) else None
        return data if isinstance(data, dict) else None

    def _in_use(self, summary: Mapping[str, Any] | None) -> dict[str, float]:
        if summary is None:  # slow or torn this time: what it said last, if lately
            at, known = _LAST_IN_USE.get(self.address, (float("-inf"), {}))
            return dict(known) if time.monotonic() - at < IN_USE_KEPT_S else {}
        if not summary:  # an older dashboard: it never says
            return {}
        found = summary.get("nodeLogicalResources") or {}
        taken = {str(node_id): gpus_taken(str(text)) for node_id, text in found.items()}
        used = {node_id: gpus for node_id, gpus in taken.items() if gpus is not None}
        _LAST_IN_USE[self.address] = (time.monotonic(), used)
        return used

    def jobs(self) -> dict[str, ObservedJob]:
        """Jobs submitted through the Jobs API, by submission id."""
        raw = self._request("GET", "/api/jobs/")
        jobs = [_job(item) for item in raw if item.get("submission_id")]
        return {job.submission_id: job for job in jobs}

    def job(self, submission_id: str) -> ObservedJob | None:
        try:
            raw = self._request("GET", f"/api/jobs/{_quote(submission_id)}")
        except _NotFound:
            return None
        return _job(raw)

    def placement_group(self, name: str) -> ObservedGroup | None:
        """The placement group of that name (a job's: its attempt's submission id) as the
        state API reports it; of several (Ray keeps removed ones for a while), a live one
        first. None when Ray knows none."""
        query = urllib.parse.urlencode(
            {"detail": 1, "limit": 1000, "filter_keys": "name", "filter_predicates": "=",
             "filter_values": name}
        )  # fmt: skip
        body = self._request("GET", f"/api/v0/placement_groups?{query}")
        found = [_group(raw) for raw in body.get("data", {}).get("result", {}).get("result", [])]
        found.sort(key=lambda g: g.state != "REMOVED")
        return found[-1] if found else None

    def logs(self, submission_id: str) -> str | None:
        """The whole driver log; None when the cluster does not know the submission."""
        try:
            raw = self._request("GET", f"/api/jobs/{_quote(submission_id)}/logs")
        except _NotFound:
            return None
        return str(raw.get("logs", ""))

    def read_log(self, submission_id: str, offset: int, limit: int) -> LogChunk | None:
        """At most ``limit`` bytes of the driver log from byte ``offset``; None while there is
        no log (not started, or unknown). A cluster on this machine is read from its files
        (only the bytes asked for); a remote one through the Jobs API, which sends the whole
        log: the price of a cluster known only by its address."""
        if self.log_root is not None:
            found = driverlogs.find(self.log_root, self.kept_logs, submission_id)
            return _read_file(found, offset, limit)
        text = self.logs(submission_id)
        if text is None:
            return None
        data = text.encode("utf-8")
        return LogChunk(data[offset : offset + limit], len(data))

    # --- acting -----------------------------------------------------------------------------

    def submit(self, submission: Submission) -> Literal["submitted", "adopted"]:
        """Submit once: an id Ray already knows is adopted, never submitted twice."""
        if self.job(submission.submission_id) is not None:
            return "adopted"
        runtime_env = dict(submission.runtime_env)
        folder = runtime_env.get("working_dir")
        in_place = self.in_place(folder) if isinstance(folder, str) else None
        if in_place is not None:
            runtime_env["working_dir"] = in_place
        try:
            self._with_deadline(
                lambda: self._client().submit_job(
                    entrypoint=submission.entrypoint,
                    submission_id=submission.submission_id,
                    runtime_env=runtime_env,
                    metadata=dict(submission.metadata),
                    entrypoint_num_cpus=submission.num_cpus,
                    entrypoint_num_gpus=submission.num_gpus,
                    entrypoint_memory=submission.memory_bytes,
                    entrypoint_resources=dict(submission.resources) or None,
                    entrypoint_label_selector=dict(submission.label_selector) or None,
                )
            )
        except Exception as err:  # the SDK raises RuntimeError for HTTP errors
            if self.job(submission.submission_id) is not None:
                return "adopted"  # a concurrent or retried submission won
            kind = PoolUnavailable if unavailable(err) else PoolError
            raise kind(f"{self.pool}: submit {submission.submission_id}: {err}") from None
        return "submitted"

    def in_place(self, folder: str) -> str | None:
        """A folder as a ``local://`` working_dir, read where it is, when the cluster runs on
        this machine; None for one elsewhere (the folder is uploaded) or a URI.

        Every node of a cluster on one machine shares its head's session folder, and each
        node's runtime-env agent unpacks an uploaded working_dir there afresh the first time
        it needs it, deleting the copy that the job's processes on the nodes before it run
        in. A process whose working folder is gone fails at whatever needs it next: loading
        PyTorch, oneMKL dies with "Cannot load .../libtorch_cpu.so" (a Ray Train job's
        driver or controller, once its workers start on other nodes)."""
        if not self.log_root or "://" in folder or not Path(folder).is_dir():
            return None
        return f"local://{Path(folder).resolve()}"

    def stop(self, submission_id: str) -> bool:
        """Ask Ray to stop a job; False when it was not running (or is unknown)."""
        try:
            raw = self._request("POST", f"/api/jobs/{_quote(submission_id)}/stop")
        except _NotFound:
            return False
        return bool(raw.get("stopped", False))

    # --- plumbing ---------------------------------------------------------------------------

    def _with_deadline(self, call: Any) -> Any:
        """Run ``call`` (the Ray SDK sets no HTTP timeout) but give up after 6 x timeout_s; a
        submission that lands later is adopted by its id on the next cycle."""
        import threading

        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["value"] = call()
            except Exception as err:
                outcome["error"] = err

        worker = threading.Thread(target=run, daemon=True, name=f"submit-{self.pool}")
        worker.start()
        worker.join(6 * self.timeout_s)
        if worker.is_alive():
            raise PoolUnavailable(
                f"{self.pool}: no answer from {self.address} within {6 * self.timeout_s:g} s"
            )
        if "error" in outcome:
            raise outcome["error"]
        return outcome.get("value")

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _client(self) -> Any:
        from ray.job_submission import JobSubmissionClient  # heavy: only when submitting

        return JobSubmissionClient(self.address, headers=self._headers())

    def _request(self, method: str, path: str) -> Any:
        url = self.address.rstrip("/") + path
        request = urllib.request.Request(url, method=method, headers=self._headers())
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as err:
            if err.code == 404:
                raise _NotFound() from None
            if err.code in (401, 403):
                raise PoolError(
                    f"dashboard at {self.address} refused the token (HTTP {err.code}); "
                    "check the pool's auth settings"
                ) from None
            where = f"dashboard at {self.address}"
            kind = PoolUnavailable if err.code >= 500 else PoolError
            raise kind(f"{where}: {method} {path}: HTTP {err.code}") from None
        except (urllib.error.URLError, OSError) as err:
            # The reason a pool is unavailable (shown as "<pool>: <this>"): no pool name here
            reason = getattr(err, "reason", err)
            raise PoolUnavailable(
                f"dashboard at {self.address} does not answer: {reason}"
            ) from None
        except ValueError as err:
            raise PoolError(f"dashboard at {self.address} does not answer: {err}") from None


@dataclass(frozen=True, slots=True)
class ObservedGroup:
    """A Ray placement group: its state (PENDING, CREATED, REMOVED, RESCHEDULING) and the
    node each of its bundles is held on, in bundle order ("" while not placed)."""

    name: str
    state: str
    node_ids: tuple[str, ...]


def _group(raw: Mapping[str, Any]) -> ObservedGroup:
    bundles = raw.get("bundles") or []
    return ObservedGroup(
        name=str(raw.get("name") or ""),
        state=str(raw.get("state") or ""),
        node_ids=tuple(str(b.get("node_id") or "") for b in bundles),
    )


class _NotFound(Exception):
    pass


def _read_file(path: Path | None, offset: int, limit: int) -> LogChunk | None:
    if path is None:
        return None
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(offset)
            return LogChunk(f.read(max(0, min(limit, size - offset))), size)
    except FileNotFoundError:  # its cluster is being stopped
        return None


def _quote(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def node_names(raw_nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """What each node of the dashboard's list is called: its ``meshctl.io/node`` label (nodes
    meshctl started), else the name Ray gives it (the host's name or address, Ray's
    ``node_name``), so a cluster started without meshctl works as it is.

    A host that held two nodes at once (several ``ray start`` on one machine) has each told
    apart by the start of its Ray node id, for as long as Ray lists them. A host whose nodes
    came one after another (a node restarted) keeps its one name: the node that comes back is
    that node, with its history, cordon and health."""
    base = [_base_name(raw) for raw in raw_nodes]
    lives: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for raw, name in zip(raw_nodes, base, strict=True):
        if NODE_LABEL not in (raw.get("labels") or {}):
            lives[name].append(_lifetime(raw))
    shared = {name for name, spans in lives.items() if _overlap(spans)}
    return [
        f"{name}-{str(raw.get('node_id', ''))[:8]}"
        if name in shared and NODE_LABEL not in (raw.get("labels") or {})
        else name
        for raw, name in zip(raw_nodes, base, strict=True)
    ]


def _lifetime(raw: Mapping[str, Any]) -> tuple[float, float]:
    start = float(raw.get("start_time_ms") or 0)
    end = float(raw.get("end_time_ms") or 0)
    return start, end if end and raw.get("state") != "ALIVE" else math.inf


def _overlap(spans: list[tuple[float, float]]) -> bool:
    """Whether any two of these (start, end) spans were alive at once."""
    latest_end = -math.inf
    for start, end in sorted(spans):
        if start < latest_end:
            return True
        latest_end = max(latest_end, end)
    return False


def _base_name(raw: Mapping[str, Any]) -> str:
    labels = raw.get("labels") or {}
    found = labels.get(NODE_LABEL) or raw.get("node_name") or raw.get("node_ip")
    return str(found or raw.get("node_id", ""))


# "1.0/4.0 GPU", and where placement groups hold some "0.0/4.0 GPU (1.0 used of 2.0 reserved in
# placement groups)": what the groups hold but do not use is not in the first figure.
_GPU_USAGE = re.compile(
    r"^\s*([0-9.]+)/[0-9.]+ GPU"
    r"(?: \(([0-9.]+) used of ([0-9.]+) reserved in placement groups\))?\s*$",
    re.MULTILINE,
)


def gpus_taken(summary: str) -> float | None:
    """GPUs taken on a node, from its line in the dashboard's node summary: used by tasks
    and actors, or held by a placement group; None when it has no GPU line."""
    m = _GPU_USAGE.search(summary)
    if m is None:
        return None
    used, pg_used, pg_reserved = (float(g) if g else 0.0 for g in m.groups())
    return round(used + pg_reserved - pg_used, 6)


def _node(raw: Mapping[str, Any], name: str, gpus_in_use: float | None = None) -> ObservedNode:
    resources: Mapping[str, float] = raw.get("resources_total") or {}
    labels = {str(k): str(v) for k, v in (raw.get("labels") or {}).items()}
    accelerator = next(
        (key.split(":", 1)[1] for key in resources if key.startswith("accelerator_type:")), None
    )
    node_id = str(raw.get("node_id", ""))
    return ObservedNode(
        name=name,
        ray_node_id=node_id,
        alive=raw.get("state") == "ALIVE",
        gpus=int(resources.get("GPU", 0)),
        cpus=float(resources.get("CPU", 0.0)),
        memory_gib=float(resources.get("memory", 0.0)) / GIB,
        accelerator=accelerator,
        labels=labels,
        head=labels.get(ROLE_LABEL) == "head",
        address=str(raw.get("node_ip") or ""),
        gpus_in_use=gpus_in_use,
        claimable={k: float(resources[k]) for k in CLAIMED_RESOURCES if k in resources},
        devices={k: float(v) for k, v in resources.items() if _device_like(k)},
    )


NOT_DEVICES = frozenset({"CPU", "GPU", "memory", "object_store_memory", *CLAIMED_RESOURCES})


def _device_like(resource: str) -> bool:
    """A resource that may count a vendor's devices (TPU, neuron_cores, HPU, a made-up one's):
    none of Ray's own for CPUs, memory and nodes, nor meshctl's claims or model markers."""
    return (
        resource not in NOT_DEVICES
        and not resource.startswith(("node:", "accelerator_type:"))
        and not resource.endswith("-head")  # Ray's TPU-<type>-head marker
    )


def _job(raw: Mapping[str, Any]) -> ObservedJob:
    def seconds(ms: Any) -> float | None:
        return float(ms) / 1000 if ms else None

    return ObservedJob(
        submission_id=str(raw.get("submission_id") or raw.get("job_id") or ""),
        status=str(raw.get("status", "")),
        message=without_exit_line(str(raw.get("message") or "")),
        error_type=raw.get("error_type"),
        start_s=seconds(raw.get("start_time")),
        end_s=seconds(raw.get("end_time")),
    )
