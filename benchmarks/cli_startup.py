"""How long `meshctl --help` and `meshctl submit` take, end to end, in a fresh process each run.

    python benchmarks/cli_startup.py [--runs 15] [--json]

Prints the median and spread of wall time over several runs (this machine is shared and noisy,
so quote the median), plus a bare Typer app's --help as the floor to compare against.

``submit``: ``meshctl submit --gpus 1 -- python -c pass`` against an embedded home of its own
(``MESHCTL_HOME`` in a temporary folder, run from that folder: the shipped mesh, policies and
catalogs). No controller runs, so each run checks the job against the mesh and enqueues it: the
whole of what a submission costs before a controller takes it. The benchmark checks that every
run stored its job. ``served_submit``: the same, with the home's local API running (as it does
beside a controller, ``meshctl/server/local.py``): the command sends the job there as a request
(``meshctl/cli/submitclient.py``, the standard library only), and the server, warm, checks and
queues it.

The commands run as an installed meshctl does, with its bytecode cached: the first, uncounted
run of each writes it (``PYTHONDONTWRITEBYTECODE`` is dropped from their environment, else
every run would compile meshctl's modules again).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

BARE_TYPER = "import typer; app = typer.Typer(); app.command()(lambda: None); app()"
SUBMIT = ["submit", "--gpus", "1", "--name", "startup", "--", "python", "-c", "pass"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, **extra}


def _time_ms(argv: list[str], env: Mapping[str, str], cwd: Path | None) -> float:
    start = time.perf_counter()
    subprocess.run(
        argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd
    )
    return (time.perf_counter() - start) * 1000


def measure(
    argv: list[str], runs: int, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> list[float]:
    env = env or _env()
    _time_ms(argv, env, cwd)  # warm the file cache (and write bytecode) once; not counted
    return [_time_ms(argv, env, cwd) for _ in range(runs)]


def measure_submit(meshctl: Path, runs: int, served: bool = False) -> list[float]:
    """``meshctl submit`` against a fresh embedded home; every run's job must be stored.
    ``served``: with the home's local API running (as while a controller runs), to which the
    command sends its request (``meshctl/cli/submitclient.py``)."""
    from meshctl.app.remote import api_socket
    from meshctl.state import JobRecord, open_store

    with tempfile.TemporaryDirectory(prefix="meshctl-startup-") as tmp:
        base = Path(tmp)
        home = base / "home"
        env = _env(MESHCTL_HOME=str(home))
        server = None
        if served:
            server = subprocess.Popen(
                [sys.executable, "-m", "meshctl.server.local", str(home), str(os.getpid())],
                env=env,
                cwd=base,
            )
            deadline = time.monotonic() + 120
            while not api_socket(home).exists():
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the local API did not start")
                time.sleep(0.05)
        try:
            samples = measure([str(meshctl), *SUBMIT], runs, env, base)
        finally:
            if server is not None:
                server.terminate()
                server.wait()
        with open_store(home) as store:
            stored = len(store.list(JobRecord))
        if stored != runs + 1:  # the uncounted first run stored one too
            raise SystemExit(f"expected {runs + 1} jobs stored, found {stored}")
        return samples


def _stats(prefix: str, samples: list[float]) -> dict[str, float]:
    return {
        f"{prefix}_ms_median": round(statistics.median(samples), 1),
        f"{prefix}_ms_min": round(min(samples), 1),
        f"{prefix}_ms_max": round(max(samples), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    meshctl = Path(sys.executable).with_name("meshctl")
    help_ms = measure([str(meshctl), "--help"], args.runs)
    submit_ms = measure_submit(meshctl, args.runs)
    served_ms = measure_submit(meshctl, args.runs, served=True)
    bare_ms = measure([sys.executable, "-c", BARE_TYPER, "--help"], args.runs)
    result: dict[str, float] = {
        "runs": args.runs,
        **_stats("help", help_ms),
        **_stats("submit", submit_ms),
        **_stats("served_submit", served_ms),
        "bare_typer_help_ms_median": round(statistics.median(bare_ms), 1),
    }
    result["ratio_to_bare_typer"] = round(
        result["help_ms_median"] / result["bare_typer_help_ms_median"], 2
    )
    if args.json:
        print(json.dumps(result))
        return
    for name, label in (
        ("help", "meshctl --help"),
        ("submit", "meshctl submit"),
        ("served_submit", "meshctl submit, to the home's local API"),
    ):
        print(
            f"{label}: median {result[f'{name}_ms_median']} ms "
            f"(min {result[f'{name}_ms_min']}, max {result[f'{name}_ms_max']}, {args.runs} runs)"
        )
    print(
        f"bare Typer --help: median {result['bare_typer_help_ms_median']} ms; "
        f"--help's ratio {result['ratio_to_bare_typer']}x"
    )


if __name__ == "__main__":
    main()
