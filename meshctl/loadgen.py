"""An open-loop HTTP load generator: requests at a scheduled rate, whatever the server does.

A schedule is a list of steps, (duration_s, requests_per_second): ``[(10, 5), (20, 40)]`` sends
5 requests a second for 10 s, then 40 a second for 20 s, evenly spaced. Each request is sent
at its scheduled time regardless of earlier ones finishing (open loop: a slow server gets
more requests in flight, not fewer requests), from a thread pool of ``max_in_flight``; past
that cap, requests wait for a thread, and their latency counts from the scheduled time, so a
saturated client does not hide a slow server (no coordinated omission).

A request fails on an HTTP status >= 400, a connection error or its timeout. Standard library
only: it runs where Ray is not installed.

    python -m meshctl.loadgen http://127.0.0.1:8000/ --step 10:5 --step 20:40 --json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

Step = tuple[float, float]  # (duration_s, requests_per_second)


@dataclass(frozen=True, slots=True)
class Outcome:
    at_s: float  # scheduled, from the start
    ok: bool
    latency_ms: float  # from the scheduled time to the answer (or the failure)
    why: str  # "" when ok; "HTTP 503", "timeout", "URLError: ..."


@dataclass(frozen=True, slots=True)
class Second:
    """Requests scheduled in one second of the run, and how they ended."""

    at_s: int
    sent: int
    ok: int
    failed: int
    p50_ms: float | None  # of the ok ones; None when none
    p99_ms: float | None


@dataclass(frozen=True, slots=True)
class LoadResult:
    total: int
    ok: int
    failed: int
    p50_ms: float | None
    p99_ms: float | None
    seconds: tuple[Second, ...]
    failures: dict[str, int]  # why -> how many


def arrivals(schedule: Sequence[Step]) -> list[float]:
    """When each request is due (s from the start): each step's requests evenly spaced, as
    many as its duration times its rate (rounded)."""
    times: list[float] = []
    start = 0.0
    for duration_s, rps in schedule:
        if duration_s < 0 or rps < 0:
            raise ValueError(f"a step needs a duration and a rate >= 0, got {duration_s}:{rps}")
        count = round(duration_s * rps)
        times += [start + i / rps for i in range(count)]
        start += duration_s
    return times


def run(
    url: str,
    schedule: Sequence[Step],
    *,
    timeout_s: float = 30.0,
    body: bytes | None = None,
    max_in_flight: int = 256,
    stop: threading.Event | None = None,
) -> LoadResult:
    """Send the schedule's requests to ``url`` (POST with ``body``, else GET) and wait for
    them all; ``stop`` set: no further request is sent."""
    due = arrivals(schedule)
    outcomes: list[Outcome] = []
    lock = threading.Lock()

    def one(at_s: float, start: float) -> None:
        outcome = _request(url, body, timeout_s, at_s, start)
        with lock:
            outcomes.append(outcome)

    with ThreadPoolExecutor(max_workers=max_in_flight, thread_name_prefix="loadgen") as pool:
        start = time.monotonic()
        for at_s in due:
            wait_s = start + at_s - time.monotonic()
            if stop is not None and stop.wait(max(0.0, wait_s)):
                break
            if stop is None and wait_s > 0:
                time.sleep(wait_s)
            pool.submit(one, at_s, start)
    return summarize(outcomes)


def _request(url: str, body: bytes | None, timeout_s: float, at_s: float, start: float) -> Outcome:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    request = urllib.request.Request(url, body, headers, method="POST" if body else "GET")
    why = ""
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            response.read()
    except urllib.error.HTTPError as err:
        why = f"HTTP {err.code}"
    except TimeoutError:
        why = "timeout"
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        why = "timeout" if isinstance(reason, TimeoutError) else f"{type(err).__name__}: {reason}"
    latency_ms = (time.monotonic() - start - at_s) * 1000
    return Outcome(at_s, not why, latency_ms, why)


def summarize(outcomes: Sequence[Outcome]) -> LoadResult:
    """Totals, failures by reason, percentiles of the ok requests, and the same per second
    of the schedule."""
    ordered = sorted(outcomes, key=lambda o: o.at_s)
    last = int(ordered[-1].at_s) if ordered else -1
    per_second: list[list[Outcome]] = [[] for _ in range(last + 1)]
    failures: dict[str, int] = {}
    for outcome in ordered:
        per_second[int(outcome.at_s)].append(outcome)
        if not outcome.ok:
            failures[outcome.why] = failures.get(outcome.why, 0) + 1
    seconds = tuple(_second(at_s, group) for at_s, group in enumerate(per_second))
    ok = sorted(o.latency_ms for o in ordered if o.ok)
    return LoadResult(
        total=len(ordered),
        ok=len(ok),
        failed=len(ordered) - len(ok),
        p50_ms=percentile(ok, 0.5),
        p99_ms=percentile(ok, 0.99),
        seconds=seconds,
        failures=failures,
    )


def _second(at_s: int, group: Sequence[Outcome]) -> Second:
    ok = sorted(o.latency_ms for o in group if o.ok)
    return Second(at_s, len(group), len(ok), len(group) - len(ok),
                  percentile(ok, 0.5), percentile(ok, 0.99))  # fmt: skip


def percentile(ordered: Sequence[float], q: float) -> float | None:
    """The nearest-rank percentile of sorted values; None of none."""
    if not ordered:
        return None
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


# --- the command --------------------------------------------------------------------------


def parse_step(text: str) -> Step:
    """``"10:5"`` -> (10.0, 5.0): 10 seconds at 5 requests a second."""
    try:
        duration_s, rps = (float(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected DURATION_S:RPS such as 10:5, got {text!r}"
        ) from None
    return duration_s, rps


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m meshctl.loadgen", description=__doc__)
    parser.add_argument("url")
    parser.add_argument("--step", type=parse_step, action="append", required=True,
                        help="DURATION_S:RPS, repeatable: the steps in order")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    parser.add_argument("--body", help="a JSON body to POST (default: GET)")
    parser.add_argument("--max-in-flight", type=int, default=256)
    parser.add_argument("--json", action="store_true", help="the whole result as JSON")
    args = parser.parse_args(argv)
    body = args.body.encode() if args.body is not None else None
    result = run(args.url, args.step, timeout_s=args.timeout, body=body,
                 max_in_flight=args.max_in_flight)  # fmt: skip
    if args.json:
        print(json.dumps(asdict(result), indent=2))
    else:
        print(f"{result.total} sent, {result.ok} ok, {result.failed} failed; "
              f"p50 {_ms(result.p50_ms)}, p99 {_ms(result.p99_ms)}")  # fmt: skip
        for why, count in sorted(result.failures.items()):
            print(f"  {count} x {why}")
    return 1 if result.failed else 0


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


if __name__ == "__main__":
    sys.exit(main())
