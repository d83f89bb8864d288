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


class Ledger:
    def __init__(self, epoch_s: float = 0.0) -> None:
        self.epoch_s = epoch_s
        self._months: dict[tuple[int, int], tuple[dict[str, float], dict[str, float]]] = {}
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
        pools, teams = self._months.setdefault(self.month(end), ({}, {}))
        pools[charge.pool] = pools.get(charge.pool, 0.0) + usd
        teams[charge.team] = teams.get(charge.team, 0.0) + usd

    def this_month(
        self, now_s: float, live: Iterable[Charge]
    ) -> tuple[dict[str, float], dict[str, float]]:
        """USD this month by pool and by team: what ended this month, and the ``live``
        instances' part since it began."""
        booked_pools, booked_teams = self._months.get(self.month(now_s), ({}, {}))
        pools, teams = dict(booked_pools), dict(booked_teams)
        start = self.month_start_s(now_s)
        for charge in live:
            usd = _usd(charge, max(charge.launched_at_s, start), now_s)
            pools[charge.pool] = pools.get(charge.pool, 0.0) + usd
            teams[charge.team] = teams.get(charge.team, 0.0) + usd
        return pools, teams


def _usd(charge: Charge, start_s: float, end_s: float) -> float:
    return max(0.0, end_s - start_s) / 3600.0 * charge.usd_per_hour
