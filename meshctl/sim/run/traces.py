"""Read public workload and fault traces into the simulator's ``TraceJob`` records.

Named traces live in ``../shared/traces`` beside a checkout (or ``$MESHCTL_TRACES``):

    philly               Microsoft Philly 2017 (philly/philly.csv)
    itp, itp:cluster04   Microsoft ITP 2021, all ten clusters or one (itp/clusterNN.csv)
    openb, openb:NAME    Alibaba openb pods (alibaba-openb/openb_pod_list_NAME.csv; default)

A path to a CSV works too; its header says which format it is. A bad row is an
``InvalidFileError`` naming the file, line and column. Times become seconds from the
trace's first arrival; a job asking for no GPU is dropped. A job's ``group`` is what the
trace files it under: Philly's virtual cluster (its ``cluster`` column, when the file has
one), ITP's cluster (the file's name, ``cluster04``); openb gives none.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from meshctl.problems import InvalidFileError, Problem
from meshctl.sim.core.failures import FailureModel, from_fault_trace
from meshctl.sim.core.workload import TraceJob

_CHECKOUT = Path(__file__).resolve().parents[3]  # meshctl/sim/run/traces.py: the checkout
NAMES = ("philly", "itp", "openb")


def traces_dir() -> Path:
    configured = os.environ.get("MESHCTL_TRACES")
    if configured:
        return Path(configured)
    for candidate in (
        Path.cwd() / ".." / "shared" / "traces",
        _CHECKOUT / ".." / "shared" / "traces",
    ):
        if candidate.is_dir():
            return candidate.resolve()
    return (_CHECKOUT / ".." / "shared" / "traces").resolve()


class _Rows:
    """CSV rows with their line numbers, and typed reads that fail as one-line problems."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __iter__(self) -> Iterator[tuple[int, dict[str, str]]]:
        with self.path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            try:
                for row in reader:
                    yield reader.line_num, row
            except (UnicodeDecodeError, csv.Error) as err:
                where = reader.line_num + 1
                raise InvalidFileError(
                    [Problem(str(self.path), where, "", f"not a readable CSV file ({err})")]
                ) from None

    def number(self, line: int, row: dict[str, str], column: str) -> float:
        raw = row.get(column)
        try:
            value = float(raw) if raw not in (None, "") else None
        except ValueError:
            value = None
        if value is None or value != value or value < 0:
            got = "nothing" if raw in (None, "") else repr(raw)
            raise InvalidFileError(
                [Problem(str(self.path), line, column, f"expected a number >= 0, got {got}")]
            )
        return value


def philly(path: Path) -> list[TraceJob]:
    rows, jobs, first = _Rows(path), [], None
    stamps: list[tuple[int, float, float, float, str | None]] = []
    for line, row in rows:
        try:
            when = dt.datetime.fromisoformat(row["timestamp"]).replace(tzinfo=dt.UTC).timestamp()
        except (KeyError, TypeError, ValueError):
            raise InvalidFileError(
                [
                    Problem(
                        str(path),
                        line,
                        "timestamp",
                        f"expected YYYY-MM-DD HH:MM:SS, got {row.get('timestamp')!r}",
                    )
                ]
            ) from None
        duration, gpus = rows.number(line, row, "duration"), rows.number(line, row, "num_gpus")
        stamps.append((line, when, duration, gpus, (row.get("cluster") or "").strip() or None))
    first = min((s[1] for s in stamps), default=0.0)
    for line, when, duration, gpus, group in stamps:
        if gpus > 0 and duration > 0:
            jobs.append(TraceJob(f"philly-{line - 1:05d}", when - first, duration, gpus, group))
    return jobs


def itp(path: Path) -> list[TraceJob]:
    """One ITP cluster file, or a folder of them (job names and groups get the cluster's
    name, the file's: ``cluster04``)."""
    files = sorted(path.glob("cluster*.csv")) if path.is_dir() else [path]
    jobs = []
    for file in files:
        rows = _Rows(file)
        for line, row in rows:
            gpus = rows.number(line, row, "num_gpu")
            duration = rows.number(line, row, "duration")
            if gpus > 0 and duration > 0:
                name = f"{file.stem}:{line}"  # job ids repeat in some files; lines do not
                arrival = rows.number(line, row, "submission_time")
                jobs.append(TraceJob(name, arrival, duration, gpus, file.stem))
    first = min((j.arrival_s for j in jobs), default=0.0)
    return [replace(j, arrival_s=j.arrival_s - first) for j in jobs]


def openb(path: Path) -> list[TraceJob]:
    """Pods that ask for GPUs; a shared GPU (gpu_milli < 1000 on one GPU) is a fraction.
    Duration: deletion time minus scheduled time; pods never scheduled or never deleted are
    left out."""
    rows, jobs = _Rows(path), []
    header = _header(path)
    missing = [c for c in ("creation_time", "deletion_time", "scheduled_time") if c not in header]
    if missing:
        raise InvalidFileError(
            [Problem(str(path), 1, "header", f"no {', '.join(missing)}: a pod list without times")]
        )
    for line, row in rows:
        count = rows.number(line, row, "num_gpu")
        milli = rows.number(line, row, "gpu_milli")
        gpus = milli / 1000.0 if count == 1 and milli < 1000 else count
        created = rows.number(line, row, "creation_time")
        if not row.get("scheduled_time") or not row.get("deletion_time"):
            continue  # never scheduled, or never ended: no duration to replay
        started = rows.number(line, row, "scheduled_time")
        ended = rows.number(line, row, "deletion_time")
        if gpus > 0 and ended > started:
            jobs.append(TraceJob(f"{path.stem}:{line}", created, ended - started, gpus))
    first = min((j.arrival_s for j in jobs), default=0.0)
    return [TraceJob(j.name, j.arrival_s - first, j.duration_s, j.gpus) for j in jobs]


_BY_HEADER: dict[frozenset[str], Callable[[Path], list[TraceJob]]] = {
    frozenset({"timestamp", "duration", "num_gpus"}): philly,
    frozenset({"submission_time", "duration", "num_gpu"}): itp,
    frozenset({"num_gpu", "gpu_milli", "creation_time", "deletion_time"}): openb,
}


def load(name: str) -> list[TraceJob]:
    """A named trace (see the module doc) or a CSV file."""
    base, _, part = name.partition(":")
    root = traces_dir()
    if base == "philly" and not part:
        return philly(_need(root / "philly" / "philly.csv", name))
    if base == "itp":
        where = root / "itp" / f"{part}.csv" if part else root / "itp"
        return itp(_need(where, name))
    if base == "openb":
        return openb(
            _need(root / "alibaba-openb" / f"openb_pod_list_{part or 'default'}.csv", name)
        )
    path = Path(name)
    if not path.is_file():
        raise InvalidFileError(
            [Problem(name, None, "", f"expected a trace name ({', '.join(NAMES)}) or a CSV file")]
        )
    header = set(_header(path))
    for needs, reader in _BY_HEADER.items():
        if needs <= header:
            return reader(path)
    raise InvalidFileError(
        [
            Problem(
                name,
                1,
                "header",
                "expected the columns of a Philly (timestamp,duration,num_gpus), ITP "
                "(submission_time,duration,num_gpu) or openb pod list",
            )
        ]
    )


def _header(path: Path) -> list[str]:
    try:
        with path.open(newline="") as handle:
            return next(csv.reader(handle), [])
    except (UnicodeDecodeError, csv.Error) as err:
        raise InvalidFileError(
            [Problem(str(path), 1, "header", f"not a readable CSV file ({err})")]
        ) from None


def _need(path: Path, name: str) -> Path:
    if not path.exists():
        raise InvalidFileError(
            [
                Problem(
                    str(path),
                    None,
                    "",
                    f"trace {name!r} not found; the shared traces live in ../shared/traces "
                    "beside the project (or set MESHCTL_TRACES)",
                )
            ]
        )
    return path


def stepfun_failures() -> FailureModel:
    """The StepFun fault trace as a failure preset: per-node MTBF and the repair times."""
    path = _need(traces_dir() / "stepfun-faults" / "fault_trace.json", "stepfun")
    events = json.loads(path.read_text())
    open_at: dict[str, list[float]] = {}
    repairs, starts, last = [], 0, 0.0
    # starts before ends at one instant; a node's faults end in the order they began
    for event in sorted(events, key=lambda e: (e["event_time"], e["event_type"] != "fault_start")):
        node, t = event["node_id"], float(event["event_time"])
        last = max(last, t)
        if event["event_type"] == "fault_start":
            starts += 1
            open_at.setdefault(node, []).append(t)
        elif open_at.get(node):
            repairs.append((t - open_at[node].pop(0)) * 86_400.0)
    # 400 servers watched over the trace's span (its SOURCE.md): 231 of them had a fault.
    return from_fault_trace("stepfun", 400, max(last, 1.0), tuple(repairs), faults=starts)
