"""Submitters at once, in processes of their own, over one SQLite store: every acknowledged
submission is stored once, under an id of its own, with its own files.

The workers store jobs as ``meshctl submit`` does (open the store, ``enqueue``, close), with
ids drawn from a space of 4,000 so that they collide often (about 20 times in 400 jobs) and
each collision is drawn again; the real ids' 24 bits collide about 3 times in 10,000 jobs of
one name (``benchmarks/submit_storm.py`` submits those). Everything waits on processes or
pipes, never on a clock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from meshctl.state import JobRecord, open_store

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PROCESSES, JOBS_EACH, ID_SPACE = 4, 100, 4000

# argv: home, jobs, id space, working dir. Prints "ready", waits for a line on stdin, then
# prints each id it was given as enqueue returned it, and at the end how many it drew.
WORKER = """
import random, sys, time
from pathlib import Path
from meshctl.controller.submit import Admission, enqueue
from meshctl.model import Job
from meshctl.scheduler.plan import Decision
from meshctl.state import open_store

home, count, space, work = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
job = Job.model_validate({
    "apiVersion": "meshctl/v1", "kind": "Job", "metadata": {"name": "crowd"},
    "spec": {"kind": "batch", "entrypoint": "python train.py", "resources": {"gpus": 1}},
})
admitted = Admission(0, None, Decision("crowd", "placed"))
draws = random.Random()
drawn = []
def draw(name):
    drawn.append(f"{name}-{draws.randrange(space):06x}")
    return drawn[-1]
print("ready", flush=True)
sys.stdin.readline()
for _ in range(count):
    with open_store(home) as store:
        record = enqueue(store, job, admitted, Path(work), home, time.time(), draw=draw)
    print(record.id, flush=True)
print("drawn", len(drawn), flush=True)
"""


def start_together(argvs: list[list[str]], cwd: Path, env: dict[str, str]) -> list[str]:
    """Run the worker processes, released together once all are ready; their stdout each."""
    procs = [
        subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for argv in argvs
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stderr is not None
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        done = [proc.communicate(timeout=240) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for proc, (_, err) in zip(procs, done, strict=True):
        assert proc.returncode == 0, err
    return [out for out, _ in done]


def test_concurrent_submitters_store_every_job_once_with_its_files(tmp_path: Path):
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('hi')\n")
    worker = [sys.executable, "-c", WORKER, str(home), str(JOBS_EACH), str(ID_SPACE), str(work)]
    outs = start_together([worker] * PROCESSES, tmp_path, dict(os.environ))

    lines = [line for out in outs for line in out.splitlines()]
    acked = Counter(line for line in lines if not line.startswith("drawn "))
    drawn = sum(int(line.split()[1]) for line in lines if line.startswith("drawn "))
    assert sum(acked.values()) == PROCESSES * JOBS_EACH
    assert drawn > PROCESSES * JOBS_EACH  # ids were found taken, and drawn again
    assert [i for i, n in acked.items() if n > 1] == []  # no id given twice
    with open_store(home) as store:
        stored = [j.id for j in store.list(JobRecord)]
        pending = Counter(e.job_id for e in store.events() if e.kind == "job.pending")
    assert sorted(stored) == sorted(acked)  # none lost, none stored unacknowledged
    assert set(pending.values()) == {1}
    assert sorted(pending) == sorted(acked)
    packages = {p.name: (p / ".meshctl-job").read_text() for p in (home / "packages").iterdir()}
    assert packages == {i: f"{i}\n" for i in acked}  # each job's own files, none removed


def test_meshctl_submit_processes_at_once_each_get_their_job(tmp_path: Path):
    """The command itself, four at once, into a home no controller ever ran in."""
    home = tmp_path / "home"
    meshctl = str(Path(sys.executable).with_name("meshctl"))
    env = {**os.environ, "MESHCTL_HOME": str(home)}
    procs = [
        subprocess.Popen(
            [meshctl, "submit", "--gpus", "1", "--name", "same", "-o", "json", "--", "true"],
            cwd=tmp_path,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(PROCESSES)
    ]
    done = [proc.communicate(timeout=240) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * PROCESSES, [err for _, err in done]
    ids = [json.loads(out)["id"] for out, _ in done]
    assert len(set(ids)) == PROCESSES
    with open_store(home) as store:
        assert sorted(j.id for j in store.list(JobRecord)) == sorted(ids)


def test_the_storm_benchmark_finds_every_job_stored_once(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "submit_storm.py"), "--jobs", "200",
         "--processes", "4", "--json"],
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert (result["jobs"], result["processes"]) == (200, 4)
    assert (result["stored"], result["duplicated"], result["lost"], result["failed"]) == (
        200,
        0,
        0,
        0,
    )
    assert result["submit_ms_median"] > 0
