"""Loaders for the public traces in ../shared/traces that the benchmarks replay.

Plain ``csv`` readers returning small frozen records; no scheduler types here, so each
benchmark decides how a trace row becomes a node or a request. ``require`` ends the process
with exit code 2 and a clear message when a trace folder is missing (a clone without the
shared data).
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = (ROOT / ".." / "shared" / "traces").resolve()
PHILLY = TRACES / "philly"
OPENB = TRACES / "alibaba-openb"


@dataclass(frozen=True, slots=True)
class PhillyJob:
    gpus: int
    duration_s: float


@dataclass(frozen=True, slots=True)
class OpenbNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True, slots=True)
class OpenbPod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: str  # "V100M16|V100M32", or "" for any model
    creation_time: int  # seconds; 0 when the list has no such column (file order is kept)

    @property
    def gpus(self) -> float:
        """GPUs asked for: a fraction of one shared GPU, whole GPUs, or 0 (CPU-only)."""
        if self.num_gpu == 1 and self.gpu_milli < 1000:
            return self.gpu_milli / 1000
        return float(self.num_gpu)


def require(folder: Path, *files: str) -> Path:
    """``folder`` if it holds ``files``; otherwise exit 2 with a message saying what is missing."""
    missing = [name for name in files if not (folder / name).is_file()]
    if not folder.is_dir() or missing:
        what = "folder" if not folder.is_dir() else ", ".join(missing)
        print(
            f"trace data not found: {folder} ({what} missing); the shared traces live in "
            f"../shared/traces relative to the project root (see its README.md)",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return folder


def _rows(path: Path) -> Iterator[dict[str, str]]:
    with path.open(newline="") as handle:
        yield from csv.DictReader(handle)


def philly_jobs(folder: Path) -> list[PhillyJob]:
    """Every job of philly.csv as (GPUs, duration); jobs asking for no GPU are dropped."""
    jobs = (
        PhillyJob(int(row["num_gpus"]), float(row["duration"]))
        for row in _rows(folder / "philly.csv")
    )
    return [job for job in jobs if job.gpus > 0]


def openb_nodes(folder: Path) -> list[OpenbNode]:
    return [
        OpenbNode(
            row["sn"], int(row["cpu_milli"]), int(row["memory_mib"]), int(row["gpu"]), row["model"]
        )
        for row in _rows(folder / "openb_node_list_gpu_node.csv")
    ]


def openb_pods(folder: Path, name: str = "default") -> list[OpenbPod]:
    """The pods of ``openb_pod_list_<name>.csv`` in arrival order (creation time, then name)."""
    pods = [
        OpenbPod(
            row["name"],
            int(row["cpu_milli"]),
            int(row["memory_mib"]),
            int(row["num_gpu"]),
            int(row["gpu_milli"]),
            row.get("gpu_spec") or "",
            int(row.get("creation_time") or 0),
        )
        for row in _rows(folder / f"openb_pod_list_{name}.csv")
    ]
    return sorted(pods, key=lambda pod: (pod.creation_time, pod.name))
