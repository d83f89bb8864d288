"""How many replicas a service wants, from the traffic it sees: the controller reads it from
Ray Serve every cycle, the simulator from its inference model; both decide here.

Like Serve's own autoscaler, the count aims at ``target_ongoing_requests`` per replica:
``ceil(ongoing / target)``, within the service's min and max, where ``ongoing`` counts the
requests in flight at its replicas and those queued for them. It scales out once that has
stayed above the current count for ``upscale_delay``, and in once it has stayed below for
``downscale_delay`` (to the highest count wanted over that time, so a dip does not drop
replicas a burst in the same window needed).

Pure: times are seconds passed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ServeSpec:
    least: int
    most: int
    target: float  # ongoing requests per replica
    upscale_delay_s: float
    downscale_delay_s: float


@dataclass(frozen=True, slots=True)
class Scaling:
    """A service's count and since when traffic has asked for more (or fewer)."""

    replicas: int
    above_since_s: float | None = None
    below_since_s: float | None = None
    most_below: int = 0  # the most replicas wanted since below_since_s


def wanted(spec: ServeSpec, ongoing: float) -> int:
    """Replicas the traffic asks for now, within the service's range."""
    need = math.ceil(ongoing / spec.target - 1e-9) if ongoing > 0 else 0
    return max(spec.least, min(spec.most, need))


def start(spec: ServeSpec) -> Scaling:
    return Scaling(spec.least)


def scale(spec: ServeSpec, now: Scaling, ongoing: float, now_s: float) -> Scaling:
    """The count after seeing ``ongoing`` requests at ``now_s``."""
    want = wanted(spec, ongoing)
    if want > now.replicas:
        since = now.above_since_s if now.above_since_s is not None else now_s
        if now_s - since >= spec.upscale_delay_s:
            return Scaling(want)
        return Scaling(now.replicas, above_since_s=since)
    if want < now.replicas:
        since = now.below_since_s if now.below_since_s is not None else now_s
        most = max(want, now.most_below) if now.below_since_s is not None else want
        if now_s - since >= spec.downscale_delay_s:
            return Scaling(most)
        return Scaling(now.replicas, below_since_s=since, most_below=most)
    return Scaling(now.replicas)
