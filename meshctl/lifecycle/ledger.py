"""The spend ledger: what cloud capacity cost this calendar month (UTC), per pool and per team,
at the price actually paid (``snapshot.price_paid``: the discounted on-demand price, or spot).

Each instance is charged from its launch to its end (now, while it lives) at its price per
hour, to the team of the job it was launched for. What budgets read is this month's part: an
instance that ended is booked into the month it ended in (its part since that month began);
a live one adds its part since this month began. The controller books every instance record
each cycle; the simulator books instances as they end; both read ``this_month``.

Pure: times are seconds passed in (``epoch_s`` shifts a clock that starts at 0, as the
simulator's does, onto the calendar).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Charge:
    pool: str
    team: str
    usd_per_hour: float
    launched_at_s: float
    ended_at_s: float | None = None  # None: still running


@dataclass(frozen=True, slots=True)
class Spend:
    """USD spent this month, per (pool, team)."""

    usd: dict[tuple[str, str], float]

    @property
    def by_pool(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for (pool, _), usd in self.usd.items():
            out[pool] = out.get(pool, 0.0) + usd
        return out

    @property
    def by_team(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for (_, team), usd in self.usd.items():
            out[team] = out.get(team, 0.0) + usd
        return out

    def of_pool(self, pool: str) -> dict[str, float]:
        """A pool's spend by team."""
        return {team: usd for (p, team), usd in self.usd.items() if p == pool}


class Ledger:
    def __init__(self, epoch_s: float = 0.0) -> None:
        self.epoch_s = epoch_s
        self._months: dict[tuple[int, int], dict[tuple[str, str], float]] = {}
        self.total_usd: dict[str, float] = defaultdict(float)  # per pool, every month

    def month(self, t_s: float) -> tuple[int, int]:
        moment = dt.datetime.fromtimestamp(self.epoch_s + t_s, dt.UTC)
        return moment.year, moment.month

    def month_start_s(self, t_s: float) -> float:
        year, month = self.month(t_s)
        return dt.datetime(year, month, 1, tzinfo=dt.UTC).timestamp() - self.epoch_s

    def close(self, charge: Charge) -> None:
        """Book an instance that has ended."""
        end = charge.ended_at_s
        assert end is not None
        self.total_usd[charge.pool] += _usd(charge, charge.launched_at_s, end)
        usd = _usd(charge, max(charge.launched_at_s, self.month_start_s(end)), end)
        booked = self._months.setdefault(self.month(end), {})
        key = (charge.pool, charge.team)
        booked[key] = booked.get(key, 0.0) + usd

    def this_month(self, now_s: float, live: Iterable[Charge]) -> Spend:
        """USD this month: what ended this month, and the ``live`` instances' part since it
        began."""
        usd = dict(self._months.get(self.month(now_s), {}))
        start = self.month_start_s(now_s)
        for charge in live:
            key = (charge.pool, charge.team)
            usd[key] = usd.get(key, 0.0) + _usd(charge, max(charge.launched_at_s, start), now_s)
        return Spend(usd)


def _usd(charge: Charge, start_s: float, end_s: float) -> float:
    return max(0.0, end_s - start_s) / 3600.0 * charge.usd_per_hour
