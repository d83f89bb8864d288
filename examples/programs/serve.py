"""Inference job ("entrypoint" mode): batched requests against a tiny fixed model.

The entrypoint holds the job's GPUs/CPUs, so the "model" (a fixed 16x4 weight
matrix) runs in the driver. Synthetic requests arrive every --interval-ms; the
server drains up to --batch-size waiting requests at a time, each batch paying a
fixed --batch-cost-ms (a stand-in for a GPU forward pass), and records each
request's latency from arrival to answer.

    python serve.py --requests 200
"""

import argparse
import math
import os
import random
import time

IN, OUT = 16, 4


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--interval-ms", type=float, default=1.0)
    parser.add_argument("--batch-cost-ms", type=float, default=4.0)
    args = parser.parse_args()
    if args.requests < 1 or args.batch_size < 1:
        parser.error("--requests and --batch-size must be at least 1")
    print(
        f"serve: job={os.environ.get('MESHCTL_JOB_ID', 'local')} "
        f"attempt={os.environ.get('MESHCTL_ATTEMPT', '0')} "
        f"pool={os.environ.get('MESHCTL_POOL', '-')} "
        f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}",
        flush=True,
    )

    rng = random.Random(7)
    model = [[rng.uniform(-1, 1) for _ in range(OUT)] for _ in range(IN)]
    requests = [[rng.gauss(0, 1) for _ in range(IN)] for _ in range(args.requests)]
    print(f"model loaded: {IN}x{OUT} weights; serving {args.requests} requests", flush=True)

    start = time.perf_counter()
    arrival = [start + i * args.interval_ms / 1000 for i in range(args.requests)]
    latencies, counts, nxt, batches = [], [0] * OUT, 0, 0
    while nxt < args.requests:
        now = time.perf_counter()
        if arrival[nxt] > now:
            time.sleep(arrival[nxt] - now)
            continue
        batch = [i for i in range(nxt, args.requests) if arrival[i] <= now][: args.batch_size]
        time.sleep(args.batch_cost_ms / 1000)
        for i in batch:
            logits = [sum(requests[i][k] * model[k][o] for k in range(IN)) for o in range(OUT)]
            top = max(logits)
            probs = [math.exp(v - top) for v in logits]
            counts[probs.index(max(probs))] += 1
        done = time.perf_counter()
        latencies.extend((done - arrival[i]) * 1000 for i in batch)
        nxt, batches = batch[-1] + 1, batches + 1
        if batches % 5 == 0 or nxt == args.requests:
            print(
                f"batch {batches}: {len(batch)} requests, {nxt}/{args.requests} served", flush=True
            )

    elapsed = time.perf_counter() - start
    lat = sorted(latencies)
    pct = {p: lat[min(len(lat) - 1, int(p / 100 * len(lat)))] for p in (50, 95, 99)}
    print(
        f"latency ms: p50={pct[50]:.3f} p95={pct[95]:.3f} p99={pct[99]:.3f} max={lat[-1]:.3f}",
        flush=True,
    )
    print(
        f"RESULT: served {len(lat)} requests in {batches} batches, {elapsed:.2f}s, "
        f"{len(lat) / elapsed:.0f} req/s, p99 {pct[99]:.2f} ms, classes {counts}",
        flush=True,
    )


if __name__ == "__main__":
    main()
