"""How long a job will run: what it declares, else what the same team's recent runs of the same
job took.

A job that declares ``limits.max_runtime_s`` runs at most that long (it is stopped and failed
past it), so that is its runtime. One that declares none is estimated from history, as
schedulers that backfill without user estimates do (Tsafrir, Etsion and Feitelson, "Backfilling
using system-generated predictions rather than user runtime estimates", IEEE TPDS 2007): the
mean of the two most recent runs of the same team and job name. Two runs follow a change in a
job's behaviour quickly and are rarely far off for the repeated jobs that dominate a queue; a
job with no history has no estimate, and backfill does not count on it ending.

The estimate is what backfill's reservations reckon with (a running job's expected end, a
waiting job's runtime) and what the wait forecast reads. It is an estimate: a job may run past
it (an expected end in the past reads as "now"), and only a declared limit is enforced.

``Estimator`` is fed every run that ended well (the controller from the store, the simulator
from its jobs as they finish) and never reads a clock; the same runs give the same estimates.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

RUNS = 2  # the recent runs an estimate is the mean of


@dataclass(frozen=True, slots=True)
class Estimate:
    seconds: float
    source: str  # said in explain: "declared max_runtime_s", "mean of team-a's last 2 runs ..."
    declared: bool = False


class Estimator:
    """Recent runtimes of each (team, job name); deterministic in the order runs are fed."""

    def __init__(self, runs: int = RUNS) -> None:
        self.runs = runs
        self._history: dict[tuple[str, str], deque[float]] = {}

    def observe(self, team: str, name: str, runtime_s: float) -> None:
        """A run of the job that ended well, ``runtime_s`` from its start to its end."""
        key = (team, name)
        found = self._history.get(key)
        if found is None:
            found = self._history[key] = deque(maxlen=self.runs)
        found.append(max(0.0, runtime_s))

    def observe_all(self, runs: Iterable[tuple[str, str, float]]) -> None:
        for team, name, runtime_s in runs:
            self.observe(team, name, runtime_s)

    def plus(self, runs: Iterable[tuple[str, str, float]]) -> Estimator:
        """This estimator with ``runs`` observed too, itself left as it is (the controller's
        deciding half counts the runs it sees end in a cycle before the loop records them)."""
        runs = list(runs)
        if not runs:
            return self
        child = Estimator(self.runs)
        child._history = dict(self._history)
        for team, name, _ in runs:
            key = (team, name)
            child._history[key] = deque(self._history.get(key, ()), maxlen=self.runs)
        child.observe_all(runs)
        return child

    def estimate(self, team: str, name: str, declared_s: float | None = None) -> Estimate | None:
        """The job's runtime: declared, else estimated from history; None when neither."""
        if declared_s is not None:
            return Estimate(declared_s, "declared max_runtime_s", declared=True)
        found = self._history.get((team, name))
        if not found:
            return None
        mean = sum(found) / len(found)
        runs = "run" if len(found) == 1 else f"{len(found)} runs"
        return Estimate(mean, f"mean of team {team}'s last {runs} of {name!r}")

    def seconds(self, team: str, name: str, declared_s: float | None = None) -> float | None:
        """The estimate's seconds alone (no words: what a simulator asks for every job)."""
        if declared_s is not None:
            return declared_s
        found = self._history.get((team, name))
        return sum(found) / len(found) if found else None
