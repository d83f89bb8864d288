"""The simulator's inference model: a service's request rate over time, and what its replica
count (decided by the lifecycle's ``serving.scale``, as the controller decides it) does with a
pool of GPUs it shares with elastic training.

Traffic (``Traffic``): a diurnal rate whose trough is ``trough`` of its peak (a cosine over
``period_s``, highest at ``peak_at_s``), times ``factor`` during each surge. A replica takes
``service_s`` per request, so the requests in flight are ``rate * service_s`` (Little's law);
the count aims at ``target`` of them per replica.

``replay`` steps the count through the day on a fixed step: a scale-out takes GPUs from the
elastic training job (a loan: it checkpoints for ``grace_s`` and the replica starts in
``start_s``: it serves ``grace_s + start_s`` after the decision), a scale-in gives them back
at once. Every GPU-second of the pool is one of: serving a request, a replica idle, training,
changing hands. ``static`` is the same traffic on a fixed split: the replicas the peak needs,
held all day, training on the rest. This is the fluid model of a surge, what
``meshctl sim run --inference diurnal`` reports at 10,000 GPUs. The event engine runs
services too (``SimServe`` on a job: ``sim/services.py``), their replicas placed one by one
through the scheduler and checked against the controller by the differential check; the
report does not take its figures from there yet.

Pure: no I/O, no clock; surges from a seeded ``random.Random``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from meshctl.lifecycle import serving

DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class Surge:
    start_s: float
    duration_s: float
    factor: float  # the rate is this many times the diurnal one meanwhile


@dataclass(frozen=True, slots=True)
class Traffic:
    peak_rps: float
    trough: float = 0.5  # the trough's share of the peak
    period_s: float = DAY_S
    peak_at_s: float = 14 * 3600.0  # 14:00
    surges: tuple[Surge, ...] = ()

    def rate(self, t_s: float) -> float:
        """Requests per second at ``t_s``."""
        mid = self.peak_rps * (1 + self.trough) / 2
        swing = self.peak_rps * (1 - self.trough) / 2
        base = mid + swing * math.cos(2 * math.pi * (t_s - self.peak_at_s) / self.period_s)
        for surge in self.surges:
            if surge.start_s <= t_s < surge.start_s + surge.duration_s:
                base *= surge.factor
        return base


def surges(
    seed: int, days: float, per_day: float, factor: float, duration_s: float
) -> tuple[Surge, ...]:
    """Surges at uniformly random times, ``per_day`` of them a day on average (a Poisson
    process), each ``duration_s`` long at ``factor`` times the rate; never overlapping."""
    rng, found, t = random.Random(f"{seed}:surges"), [], 0.0
    while per_day > 0:
        t += rng.expovariate(per_day / DAY_S)
        if t >= days * DAY_S:
            break
        found.append(Surge(t, duration_s, factor))
        t += duration_s
    return tuple(found)


@dataclass(frozen=True, slots=True)
class Service:
    spec: serving.ServeSpec
    gpus_per_replica: float
    service_s: float  # seconds a replica takes per request
    grace_s: float = 30.0  # the lender's checkpoint before it stops
    start_s: float = 10.0  # a replica's start once it has its GPUs


@dataclass(frozen=True, slots=True)
class SimServe:
    """A service in the event engine: its replicas' range, target and delays (decided by
    the lifecycle, as the controller decides them), the seconds a request takes, its traffic,
    and a replica's start once placed (until then it does not serve)."""

    spec: serving.ServeSpec
    service_s: float
    traffic: Traffic
    start_s: float = 10.0

    def ongoing(self, t_s: float) -> float:
        """Requests in flight at ``t_s`` (Little's law: rate times the time each takes)."""
        return self.traffic.rate(t_s) * self.service_s


@dataclass
class Outcome:
    gpus: float
    seconds: float
    serving_gpu_s: float = 0.0  # replicas busy with requests
    idle_gpu_s: float = 0.0  # replicas up with nothing to do
    training_gpu_s: float = 0.0
    moving_gpu_s: float = 0.0  # lent, the replica not serving yet
    lent_gpu_s: float = 0.0  # held by replicas above the service's least
    surge_to_serving_s: list[float] = field(default_factory=list)  # per surge: first new replica

    @property
    def utilisation(self) -> float:
        """Share of the pool's GPU-seconds doing work: serving or training."""
        return (self.serving_gpu_s + self.training_gpu_s) / (self.gpus * self.seconds)


def _serving(service: Service, ongoing: float, replicas: int) -> float:
    """GPUs of ``replicas`` busy with ``ongoing`` requests in flight."""
    return min(float(replicas), ongoing / service.spec.target) * service.gpus_per_replica


def replay(
    service: Service, traffic: Traffic, gpus: float, seconds: float, step_s: float = 10.0
) -> Outcome:
    """The service on ``gpus`` shared with elastic training, scaled by the lifecycle every
    ``step_s``; what every GPU-second went to."""
    out = Outcome(gpus, seconds)
    scaling = serving.start(service.spec)
    ready: list[tuple[float, int]] = []  # (when it serves, replicas it brings)
    up = service.spec.least
    lag = service.grace_s + service.start_s
    pending_surges = list(traffic.surges)
    surge_at: float | None = None
    t = 0.0
    while t < seconds:
        ongoing = traffic.rate(t) * service.service_s
        before = scaling.replicas
        scaling = serving.scale(service.spec, scaling, ongoing, t)
        if pending_surges and t >= pending_surges[0].start_s:
            surge_at = pending_surges.pop(0).start_s
        if scaling.replicas > before:
            ready.append((t + lag, scaling.replicas - before))
        elif scaling.replicas < before:
            drop = before - scaling.replicas
            while drop and ready:  # not serving yet: dropped first
                when, count = ready.pop()
                if count > drop:
                    ready.append((when, count - drop))
                    drop = 0
                else:
                    drop -= count
            up -= drop
        while ready and ready[0][0] <= t:
            up += ready.pop(0)[1]
            if surge_at is not None:
                out.surge_to_serving_s.append(t - surge_at)
                surge_at = None
        dt = min(step_s, seconds - t)
        moving = sum(c for _, c in ready) * service.gpus_per_replica
        held = up * service.gpus_per_replica
        busy = _serving(service, ongoing, up)
        out.serving_gpu_s += busy * dt
        out.idle_gpu_s += (held - busy) * dt
        out.moving_gpu_s += moving * dt
        out.training_gpu_s += max(0.0, gpus - held - moving) * dt
        out.lent_gpu_s += max(0.0, up - service.spec.least) * service.gpus_per_replica * dt
        t += dt
    return out


def static(
    service: Service, traffic: Traffic, gpus: float, seconds: float, step_s: float = 10.0
) -> Outcome:
    """The same traffic on a fixed split: the replicas its peak needs, all the time; training
    on the rest."""
    peak, t = 0.0, 0.0
    while t < seconds:
        peak = max(peak, traffic.rate(t) * service.service_s)
        t += step_s
    replicas = serving.wanted(service.spec, peak)
    held = replicas * service.gpus_per_replica
    out, t = Outcome(gpus, seconds), 0.0
    while t < seconds:
        dt = min(step_s, seconds - t)
        busy = _serving(service, traffic.rate(t) * service.service_s, replicas)
        out.serving_gpu_s += busy * dt
        out.idle_gpu_s += (held - busy) * dt
        out.training_gpu_s += max(0.0, gpus - held) * dt
        t += dt
    return out


def diurnal(gpus: float, days: float, seed: int) -> tuple[Service, Traffic]:
    """The service ``meshctl sim run --inference diurnal`` adds to a mesh of ``gpus`` GPUs:
    one GPU a replica, 0.25 s a request, 2 in flight per replica as its target, Serve's
    default delays (out after 30 s, in after 10 minutes); at the daily peak its traffic needs
    a tenth of the GPUs, at the trough half that; on average two surges a day, each 30
    minutes at eight times the rate, capped at four tenths of the GPUs."""
    peak_replicas = max(1.0, gpus / 10)
    spec = serving.ServeSpec(
        least=max(1, int(peak_replicas / 10)),
        most=max(1, int(gpus * 0.4)),
        target=2.0,
        upscale_delay_s=30.0,
        downscale_delay_s=600.0,
    )
    service = Service(spec, gpus_per_replica=1.0, service_s=0.25, grace_s=30.0, start_s=10.0)
    found = surges(seed, days, per_day=2, factor=8.0, duration_s=1800.0)
    peak_rps = peak_replicas * spec.target / service.service_s
    return service, Traffic(peak_rps=peak_rps, trough=0.5, surges=found)


def figures(service: Service, traffic: Traffic, gpus: float, seconds: float) -> dict[str, Any]:
    """What the report says of the service: utilisation shared against a static split, the
    gain, surge to serving (p50, p99), GPU-hours lent, and the training lost to loans (the
    GPU-hours changing hands: a lender's checkpoint grace and the replica's start)."""
    shared = replay(service, traffic, gpus, seconds)
    split = static(service, traffic, gpus, seconds)
    waits = sorted(shared.surge_to_serving_s)

    def pct(q: float) -> float | None:
        return waits[min(len(waits) - 1, int(q * len(waits)))] if waits else None

    return {
        "model": "fluid: the lifecycle's replica count over diurnal traffic with surges",
        "gpus": gpus,
        "surges": len(traffic.surges),
        "utilisation_shared": round(shared.utilisation, 4),
        "utilisation_static": round(split.utilisation, 4),
        "gain_pp": round(100 * (shared.utilisation - split.utilisation), 2),
        "surge_to_serving_p50_s": pct(0.5),
        "surge_to_serving_p99_s": pct(0.99),
        "gpu_hours_lent": round(shared.lent_gpu_s / 3600, 1),
        "training_gpu_hours_lost": round(shared.moving_gpu_s / 3600, 1),
    }
