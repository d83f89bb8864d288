"""How long `meshctl --help` takes, end to end, in a fresh interpreter each run.

    python benchmarks/cli_startup.py [--runs 15] [--json]

Prints the median and spread of wall time over several runs (this machine is shared and noisy,
so quote the median), plus a bare Typer app's --help as the floor to compare against.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

BARE_TYPER = "import typer; app = typer.Typer(); app.command()(lambda: None); app()"


def _time_ms(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.perf_counter() - start) * 1000


def measure(argv: list[str], runs: int) -> list[float]:
    _time_ms(argv)  # warm the file cache once; not counted
    return [_time_ms(argv) for _ in range(runs)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    meshctl = Path(sys.executable).with_name("meshctl")
    help_ms = measure([str(meshctl), "--help"], args.runs)
    bare_ms = measure([sys.executable, "-c", BARE_TYPER, "--help"], args.runs)
    result = {
        "runs": args.runs,
        "help_ms_median": round(statistics.median(help_ms), 1),
        "help_ms_min": round(min(help_ms), 1),
        "help_ms_max": round(max(help_ms), 1),
        "bare_typer_help_ms_median": round(statistics.median(bare_ms), 1),
    }
    result["ratio_to_bare_typer"] = round(
        result["help_ms_median"] / result["bare_typer_help_ms_median"], 2
    )
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"meshctl --help: median {result['help_ms_median']} ms "
        f"(min {result['help_ms_min']}, max {result['help_ms_max']}, {args.runs} runs)"
    )
    print(
        f"bare Typer --help: median {result['bare_typer_help_ms_median']} ms; "
        f"ratio {result['ratio_to_bare_typer']}x"
    )


if __name__ == "__main__":
    main()
