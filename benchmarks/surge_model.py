"""The inference model on the 10,000-GPU example: a service sharing the mesh with elastic
training, against a static split of the same GPUs.

    python benchmarks/surge_model.py [--days 7] [--seed 0] [--json]

The service is ``meshctl.sim.core.inference.diurnal``'s, what ``meshctl sim run --inference
diurnal`` adds to a mesh: one GPU a replica, 0.25 s a request, 2 requests in flight per
replica as the target, Serve's default delays (out after 30 s above target, in after 10
minutes below); at the daily peak its traffic needs a tenth of the GPUs, at the trough half
that, and on average two surges a day, each 30 minutes at eight times the rate, at seeded
random times (capped at four tenths of the GPUs). A scale-out takes GPUs from the elastic
training job (a 30 s checkpoint, then 10 s for the replica to start). The static split holds
the replicas the highest rate needs all the time.

Printed (and with ``--json``): ``utilisation`` (serving or training, of all GPU-seconds) for
both and the gain in percentage points, ``surge_to_serving_s`` p50 and p99 (a surge's onset
to its first new replica serving), ``gpu_hours_lent`` (replicas above the least) and
``training_gpu_hours_lost`` (GPUs changing hands).

This is the fluid model: replicas move as counts, the scheduler is not in the loop (the
event engine's service jobs are the next step).
"""

from __future__ import annotations

import argparse
import json

from meshctl.sim.core.inference import DAY_S, diurnal, figures

GPUS = 10_000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    service, traffic = diurnal(GPUS, args.days, args.seed)
    found = {"days": args.days, **figures(service, traffic, GPUS, args.days * DAY_S)}
    if args.json:
        print(json.dumps(found))
        return
    for key, value in found.items():
        print(f"{key:>26}: {value}")


if __name__ == "__main__":
    main()
