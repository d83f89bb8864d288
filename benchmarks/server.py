"""The API server under load, and a leading controller killed under it.

    python benchmarks/server.py [--jobs 10000] [--clients 8] [--workers 2]
                                [--backend postgres|sqlite] [--runs 3] [--json]

Each run starts a fresh store (a throwaway Postgres server from ``initdb`` and ``pg_ctl``, as
the tests start one, or a SQLite file), ``meshctl server --workers W`` on it, and two
controllers (``meshctl controller run``: a leader and a standby) on a mesh of one on-prem pool
whose Ray cluster is not up, so the controllers cycle, lease and record, and dispatch nothing.
``--clients`` processes (one user each) then submit ``--jobs`` jobs between them over HTTP,
each on one kept-alive connection, as ``meshctl submit`` sends a job with no files. When a
third of the jobs are in, the leading controller is killed (SIGKILL).

Per run:

- ``submits_per_s``: acknowledged submissions (201) over the wall time of the load;
- ``p50_ms``, ``p99_ms``: one submission's round trip as a client sees it;
- ``server_cpu_ms``, ``postgres_cpu_ms``: CPU time per submission, of the server's processes
  and of Postgres (all its work: the controllers' reads and writes too), over the load; on
  a machine with few cores these, not the wall time, say where a change helps;
- ``lost``: acknowledged ids not in the store; ``duplicated``: ids acknowledged or stored more
  than once; ``failed``: answers other than 201 (with the first few, ``errors``);
- ``takeover_s``: from the kill to the standby holding the lease (it polls every
  ``--interval``; its host is the dead leader's, so it takes over without waiting for the
  lease to run out: ``--no-fast-path`` runs the leader as another host's
  (``MESHCTL_LEASE_HOST``), to measure the wait of ``--lease-ttl``).

The figures printed are medians over ``--runs``. Dispatching twice cannot happen here (no
pool); ``tests/integration/controller/test_standby.py`` kills a leader at the failpoint before
a dispatch on a real Ray cluster and checks that the job runs once.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from meshctl.host.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {name: bench}
spec:
  pools:
    - name: onprem
      provider: local
      nodes:
        - {name: gpu, count: 4, gpus: 8, cpus: 32, memory_gib: 512GiB,
           accelerator: {vendor: nvidia, model: A100, memory_gib: 80GiB}}
"""
JOB = {
    "apiVersion": "meshctl/v1",
    "kind": "Job",
    "metadata": {"name": "bench"},
    "spec": {"kind": "batch", "entrypoint": "python -c 'print(1)'", "resources": {"gpus": 1}},
}


@contextmanager
def store_url(backend: str, folder: Path, pids: dict[str, int]) -> Iterator[str]:
    """The store's URL; ``pids["postgres"]``: the Postgres server's, for its CPU time."""
    if backend == "sqlite":
        yield f"sqlite://{folder / 'state.db'}"
        return
    from pgserver import pg_server

    with pg_server() as server:
        pids["postgres"] = int((server.folder / "data" / "postmaster.pid").read_text().split()[0])
        yield server.database()


def cpu_s(root: int) -> float:
    """The CPU seconds of a process and its descendants so far (a child that ended counts in
    its parent's once the parent reaped it); Linux ``/proc``."""
    tick = os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue  # ended meanwhile
        total += sum(int(f) for f in fields[11:15]) / tick  # utime stime cutime cstime
        for task in tasks:
            with contextlib.suppress(OSError):
                todo += [int(c) for c in (task / "children").read_text().split()]
    return total


def wait_for(what: str, ready: Any, timeout_s: float = 120.0, logs: Path | None = None) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (found := ready()):
        if time.monotonic() > deadline:
            said = "".join(f"\n--- {p.name}\n{p.read_text()[-2000:]}" for p in
                           sorted(logs.glob("*.log"))) if logs else ""  # fmt: skip
            raise SystemExit(f"server.py: {what}{said}")
        time.sleep(0.05)
    return found


def meshctl(*args: str) -> list[str]:
    return [sys.executable, "-m", "meshctl", *args]


def client(args: tuple[int, str, int]) -> tuple[list[str], list[float], list[str]]:
    """One user's submissions: the ids acknowledged, each round trip, the failures."""
    port, token, count = args
    body = json.dumps({"job": JOB})
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    ids, times, errors = [], [], []
    for _ in range(count):
        start = time.perf_counter()
        try:
            conn.request("POST", "/v1/jobs", body, headers)
            answer = conn.getresponse()
            said = json.loads(answer.read() or b"null")
        except (OSError, http.client.HTTPException) as err:
            errors.append(f"{type(err).__name__}: {err}")
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            continue
        times.append(time.perf_counter() - start)
        if answer.status == 201:
            ids.append(said["id"])
        else:
            errors.append(f"{answer.status}: {said}")
    conn.close()
    return ids, times, errors


def one_run(opts: argparse.Namespace, folder: Path) -> dict[str, Any]:
    from meshctl.server.identity import add_user
    from meshctl.state import JobRecord, LeaseRecord, Role, open_store_at
    from meshctl.state.lease import CONTROLLER

    home, cwd = folder / "home", folder
    (cwd / "mesh.yaml").write_text(MESH)
    (cwd / "policies").mkdir()
    for name in ("priorities.yaml", "quotas.yaml", "burst.yaml"):  # none names a cloud pool
        (cwd / "policies" / name).write_text((ROOT / "policies" / name).read_text())
    with ExitStack() as stack:
        pids: dict[str, int] = {}
        url = stack.enter_context(store_url(opts.backend, folder, pids))
        env = {**os.environ, "MESHCTL_HOME": str(home), "MESHCTL_STORE": url}
        with open_store_at(url, home) as store:
            tokens = [add_user(store, f"u{i}", ["bench"], Role.USER, time.time())[1]
                      for i in range(opts.clients)]  # fmt: skip
        port = free_port()
        started: list[subprocess.Popen[bytes]] = []

        def start(*args: str, **extra: str) -> subprocess.Popen[bytes]:
            log = (folder / f"{len(started)}.log").open("wb")
            process = subprocess.Popen(
                meshctl(*args), env={**env, **extra}, cwd=cwd, stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
            started.append(process)
            return process

        def stop_all() -> None:
            for process in started:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process in started:
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()

        stack.callback(stop_all)
        pids["server"] = start("server", "--port", str(port), "--workers", str(opts.workers)).pid
        controller = ("controller", "run", "--interval", str(opts.interval),
                      "--lease-ttl", str(opts.lease_ttl))  # fmt: skip

        def holder() -> str | None:
            with open_store_at(url, home) as store:
                lease = store.get(LeaseRecord, CONTROLLER)
            return None if lease is None else lease.holder

        # a leader that looks like another host's: the standby waits for its lease to run out
        leader = (start(*controller, MESHCTL_LEASE_HOST="elsewhere") if opts.no_fast_path
                  else start(*controller))  # fmt: skip
        wait_for("the leader never led", lambda: _pid(holder()) == leader.pid, logs=folder)
        standby = start(*controller)
        wait_for("the server never answered", lambda: _up(port))
        # each server process reads the mesh and policies on its first submission: not timed
        warm = [client((port, tokens[0], 1)) for _ in range(4 * opts.workers)]
        share = (opts.jobs - len(warm)) // opts.clients
        takeover: dict[str, float] = {}

        def kill_leader_at(third: int) -> None:
            wait_for("the load never reached a third", lambda: _stored(url, home) >= third, 600)
            leader.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            wait_for("the standby never led", lambda: _pid(holder()) == standby.pid, 120)
            takeover["s"] = time.monotonic() - killed

        killer = threading.Thread(target=kill_leader_at, args=(opts.jobs // 3,), daemon=True)
        killer.start()
        with ProcessPoolExecutor(opts.clients) as pool:
            pool.submit(time.time).result()  # the clients started, before the clock
            cpu = {name: cpu_s(pid) for name, pid in pids.items()}
            begin = time.monotonic()
            results = list(pool.map(client, [(port, t, share) for t in tokens]))
            wall = time.monotonic() - begin
            cpu = {name: cpu_s(pid) - cpu[name] for name, pid in pids.items()}
        killer.join(timeout=180)
        acked = [i for ids, _, _ in [*warm, *results] for i in ids]
        times = sorted(t for _, ts, _ in results for t in ts)
        errors = [e for _, _, es in [*warm, *results] for e in es]
        with open_store_at(url, home) as store:
            stored = Counter(j.id for j in store.list(JobRecord))
        twice = sum(n - 1 for n in Counter(acked).values() if n > 1)
        return {
            "submits_per_s": round(len(times) / wall, 1),
            **{f"{name}_cpu_ms": round(s * 1000 / len(times), 2) for name, s in cpu.items()},
            "p50_ms": round(times[len(times) // 2] * 1000, 1),
            "p99_ms": round(times[int(len(times) * 0.99)] * 1000, 1),
            "acknowledged": len(acked),
            "lost": sum(1 for i in acked if i not in stored),
            "duplicated": twice + sum(n - 1 for n in stored.values() if n > 1),
            "failed": len(errors),
            "errors": errors[:3],
            "takeover_s": round(takeover["s"], 2) if "s" in takeover else None,
        }


def _pid(holder: str | None) -> int | None:
    parts = (holder or "").split("/")
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def _up(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    except OSError:
        return False


def _stored(url: str, home: Path) -> int:
    from meshctl.state import JobRecord, open_store_at

    with open_store_at(url, home) as store:
        return len(store.list(JobRecord, state="pending"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backend", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--interval", type=float, default=1.0)  # meshctl up's
    parser.add_argument("--lease-ttl", type=float, default=10.0)
    parser.add_argument("--no-fast-path", action="store_true")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    runs = []
    for n in range(opts.runs):
        with tempfile.TemporaryDirectory(prefix="meshctl-server-bench-") as tmp:
            runs.append(one_run(opts, Path(tmp)))
        if not opts.json:
            print(f"run {n + 1}: {runs[-1]}", file=sys.stderr)
    keys = ["submits_per_s", "p50_ms", "p99_ms", "takeover_s", "server_cpu_ms", "postgres_cpu_ms"]
    summary: dict[str, Any] = {
        k: statistics.median(found) if (found := [r[k] for r in runs if r[k] is not None]) else None
        for k in keys
    }
    summary |= {k: max(r[k] for r in runs) for k in ("lost", "duplicated", "failed")}
    summary |= {"runs": runs, "backend": opts.backend, "workers": opts.workers,
                "clients": opts.clients, "jobs": opts.jobs}  # fmt: skip
    if opts.json:
        print(json.dumps(summary))
    else:
        for key in [*keys, "lost", "duplicated", "failed"]:
            print(f"{key:>14}: {summary[key]}")


if __name__ == "__main__":
    main()
