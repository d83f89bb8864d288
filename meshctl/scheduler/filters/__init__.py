"""Filters, one small module each. The order in ``FILTERS`` is cheapest and most selective
first: health and policy are set lookups, the accelerator check compares strings, the
resource fit walks the GPUs."""

from __future__ import annotations

from meshctl.scheduler.filters.accelerator import AcceleratorFilter
from meshctl.scheduler.filters.eligibility import EligibilityFilter
from meshctl.scheduler.filters.fit import FitFilter
from meshctl.scheduler.filters.health import HealthFilter
from meshctl.scheduler.framework import Filter

FILTERS: tuple[Filter, ...] = (
    HealthFilter(),
    EligibilityFilter(),
    AcceleratorFilter(),
    FitFilter(),
)

__all__ = ["FILTERS", "AcceleratorFilter", "EligibilityFilter", "FitFilter", "HealthFilter"]
