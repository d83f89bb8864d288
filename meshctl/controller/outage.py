"""The state store's outage, as the controller's log tells it.

A cycle that cannot read or write the store (Postgres restarting, a full disk, a lost
connection: ``StoreError``) stops where it is; what it wrote stays written (every write is
versioned on its own, and an attempt is recorded before Ray is asked), and the next cycle
starts again from the store. The log says so once, in one line, not a traceback every
cycle; and once a cycle goes through again, how long the store was away.
"""

from __future__ import annotations


class Outage:
    def __init__(self) -> None:
        self.since: float | None = None  # when the first cycle of this outage failed
        self.cycles = 0  # cycles failed since

    def failed(self, why: str, now: float) -> str | None:
        """A cycle failed on the store: the line to log, or None when the outage is said."""
        self.cycles += 1
        if self.since is not None:
            return None
        self.since = now
        return f"state store unavailable: {why}; the cycles resume when it answers"

    def answered(self, now: float) -> str | None:
        """A cycle went through: the line that ends an outage, or None when there was none."""
        if self.since is None:
            return None
        said = (
            f"state store answers again after {now - self.since:.1f} s "
            f"({self.cycles} cycle{'s' if self.cycles != 1 else ''} failed meanwhile)"
        )
        self.since, self.cycles = None, 0
        return said
