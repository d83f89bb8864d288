"""The inference model on the 10,000-GPU example: a service sharing the mesh with elastic
training, against a static split of the same GPUs.

    python benchmarks/surge_model.py [--days 7] [--seed 0] [--json]

The service (the lifecycle's replica count, ``meshctl.lifecycle.serving``, with its default
delays: out after 30 s above target, in after 10 minutes below): one H100 a replica, 0.25 s a
request, 2 requests in flight per replica as the target, 100 to 4,000 replicas. Traffic:
8,000 requests a second at 14:00, half that at 02:00 (``meshctl.sim.inference``), and on
average two surges a day, each 30 minutes at eight times the rate, at seeded random times.
A scale-out takes GPUs from the elastic training job (a 30 s checkpoint, then 10 s for the
replica to start). The static split holds the replicas the highest rate needs all week.

Printed (and with ``--json``): ``utilisation`` (serving or training, of all GPU-seconds) for
both and the gain in percentage points, ``surge_to_serving_s`` p50 and p99 (a surge's onset
to its first new replica serving), ``gpu_hours_lent`` (replicas above the least).

This is the fluid model: replicas move as counts, the scheduler is not in the loop (the
event engine's service jobs are the next step).
"""

from __future__ import annotations

import argparse
import json
import statistics

from meshctl.lifecycle.serving import ServeSpec
from meshctl.sim.inference import DAY_S, Service, Traffic, replay, static, surges

GPUS = 10_000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    spec = ServeSpec(least=100, most=4000, target=2.0, upscale_delay_s=30, downscale_delay_s=600)
    service = Service(spec, gpus_per_replica=1.0, service_s=0.25, grace_s=30.0, start_s=10.0)
    found = surges(args.seed, args.days, per_day=2, factor=8.0, duration_s=1800.0)
    traffic = Traffic(peak_rps=8000.0, trough=0.5, surges=found)
    seconds = args.days * DAY_S
    shared = replay(service, traffic, GPUS, seconds)
    split = static(service, traffic, GPUS, seconds)
    waits = sorted(shared.surge_to_serving_s)
    p99 = waits[min(len(waits) - 1, int(0.99 * len(waits)))] if waits else None
    figures = {
        "gpus": GPUS,
        "days": args.days,
        "surges": len(found),
        "utilisation_shared": round(shared.utilisation, 4),
        "utilisation_static": round(split.utilisation, 4),
        "gain_pp": round(100 * (shared.utilisation - split.utilisation), 2),
        "surge_to_serving_p50_s": statistics.median(waits) if waits else None,
        "surge_to_serving_p99_s": p99,
        "gpu_hours_lent": round(shared.lent_gpu_s / 3600, 1),
        "gpu_hours_changing_hands": round(shared.moving_gpu_s / 3600, 1),
    }
    if args.json:
        print(json.dumps(figures))
        return
    for key, value in figures.items():
        print(f"{key:>26}: {value}")


if __name__ == "__main__":
    main()
