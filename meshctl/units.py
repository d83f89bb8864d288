"""Quantities written the way people write them, parsed into numbers whose names carry the unit.

Every parser takes what a YAML file may hold (a number or a string such as ``"80GiB"``) and
returns a float in the field's unit: GiB for memory, Gbps for bandwidth, seconds for durations,
GPUs for accelerators, cores for CPUs. A bare number is already in the field's unit. The
parsers raise ``ValueError`` with a message saying what was expected; the model layer turns it
into a file:line error. Pure: standard library only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Final

_QUANTITY = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z/]*)\s*$")

# Binary and decimal byte units, as multiples of one GiB.
_GIB_PER: Final[Mapping[str, float]] = {
    "": 1.0,
    "ki": 2**-20,
    "kib": 2**-20,
    "kb": 1e3 / 2**30,
    "k": 1e3 / 2**30,
    "mi": 2**-10,
    "mib": 2**-10,
    "mb": 1e6 / 2**30,
    "m": 1e6 / 2**30,
    "gi": 1.0,
    "gib": 1.0,
    "gb": 1e9 / 2**30,
    "g": 1e9 / 2**30,
    "ti": 2**10,
    "tib": 2**10,
    "tb": 1e12 / 2**30,
    "t": 1e12 / 2**30,
    "pi": 2**20,
    "pib": 2**20,
}
_GBPS_PER: Final[Mapping[str, float]] = {
    "": 1.0,
    "mbps": 1e-3,
    "mbit/s": 1e-3,
    "gbps": 1.0,
    "gbit/s": 1.0,
    "tbps": 1e3,
    "tbit/s": 1e3,
}
_SECONDS_PER: Final[Mapping[str, float]] = {
    "": 1.0,
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "d": 86400.0,
}
_CORES_PER: Final[Mapping[str, float]] = {"": 1.0, "m": 1e-3}

# Upper bounds that catch typos (an extra zero, MiB written as GiB) without limiting real
# hardware: the largest single machines sold today have 32 TiB of RAM and a few hundred cores.
MAX_MEMORY_GIB: Final = 64 * 1024.0
MAX_GPU_MEMORY_GIB: Final = 1024.0
MAX_NIC_GBPS: Final = 100_000.0
MAX_CPUS: Final = 4096.0
MAX_GPUS_PER_NODE: Final = 64
MAX_NODES: Final = 100_000
MAX_DURATION_S: Final = 366 * 86400.0
MAX_USD_PER_HOUR: Final = 1_000_000.0
MAX_USD: Final = 1e12  # a month's spend or budget, for a whole mesh
MAX_USD_PER_GIB: Final = 100.0  # data transfer: list prices are cents a GiB
MAX_MEMORY_GIB_TOTAL: Final = 1e12  # GPU memory of a whole team or mesh, not one node


def _split(value: object, what: str) -> tuple[float, str]:
    if isinstance(value, bool):
        raise ValueError(f"expected {what}, got a boolean")
    if isinstance(value, int | float):
        try:
            return float(value), ""
        except OverflowError:
            raise ValueError(f"expected {what}, got a number too large to hold") from None
    if not isinstance(value, str):
        raise ValueError(f"expected {what}, got {type(value).__name__}")
    match = _QUANTITY.match(value)
    if match is None:
        raise ValueError(f"expected {what}, got {value!r}")
    return float(match.group(1)), match.group(2).lower()


def _scaled(value: object, table: Mapping[str, float], what: str) -> float:
    number, unit = _split(value, what)
    if unit not in table:
        raise ValueError(f"expected {what}, got unknown unit {unit!r} in {value!r}")
    return _checked(number * table[unit], what)


def _checked(number: float, what: str) -> float:
    if not math.isfinite(number):
        raise ValueError(f"expected {what}, got a non-finite number")
    if number < 0:
        raise ValueError(f"expected {what}, got a negative quantity {number:g}")
    return number


def bounded(number: float, upper: float, what: str) -> float:
    """``number`` if it is at most ``upper``; an error naming the bound otherwise."""
    if number > upper:
        raise ValueError(f"expected {what} of at most {upper:g}, got {number:g}")
    return number


def parse_memory_gib(value: object) -> float:
    """``"80GiB"``, ``"512MiB"``, ``"1.5TiB"``, ``"80GB"`` (decimal) or a number of GiB."""
    return _scaled(value, _GIB_PER, "a memory size such as 80GiB or 512MiB")


def parse_bandwidth_gbps(value: object) -> float:
    """``"400Gbps"``, ``"3.2Tbps"``, ``"100Mbps"`` or a number of Gbps."""
    return _scaled(value, _GBPS_PER, "a bandwidth such as 400Gbps or 3.2Tbps")


def parse_duration_s(value: object) -> float:
    """``"90s"``, ``"10m"``, ``"2h"``, ``"1d"``, ``"250ms"`` or a number of seconds."""
    return _scaled(value, _SECONDS_PER, "a duration such as 30s, 10m or 2h")


def parse_duration_min(value: object) -> float:
    """A duration in minutes: ``"5m"``, ``"90s"``, ``"2h"`` or a number of minutes (the one
    field whose name says minutes, ``idle_minutes``, takes the forms every duration takes)."""
    number, unit = _split(value, "a duration such as 30s, 10m or 2h")
    if unit == "":
        return _checked(number, "a duration in minutes")
    return parse_duration_s(value) / 60.0


def parse_percent(value: object) -> float:
    """A percentage: ``15`` or ``"15%"``."""
    if isinstance(value, str):
        value = value.strip().removesuffix("%")
    return _scaled(value, {"": 1.0}, "a percentage such as 15 or 15%")


def parse_cpus(value: object) -> float:
    """``4``, ``0.5`` or Kubernetes-style millicores ``"500m"``."""
    return _scaled(value, _CORES_PER, "a CPU count such as 4, 0.5 or 500m")


def parse_gpus(value: object) -> float:
    """A whole number of GPUs, or a fraction of one GPU (``0.25``, ``"25%"``).

    A GPU is shared only below one: 1.5 GPUs is not a thing a device plugin can hand out.
    """
    what = "a whole number of GPUs or a fraction of one GPU (0 < x < 1), such as 8 or 0.25"
    if isinstance(value, str) and value.strip().endswith("%"):
        number = _scaled(value.strip()[:-1], {"": 1.0}, what) / 100.0
    else:
        number = _scaled(value, {"": 1.0}, what)
    if number >= 1 and not number.is_integer():
        raise ValueError(f"expected {what}, got {number:g}")
    return number


def parse_usd(value: object) -> float:
    """A price in US dollars: ``12.5`` or ``"$12.5"``."""
    if isinstance(value, str):
        value = value.strip().removeprefix("$")
    return _scaled(value, {"": 1.0, "usd": 1.0}, "an amount in USD such as 12.5")


def _num(number: float) -> str:
    return f"{number:.10g}"


def format_gib(gib: float) -> str:
    """The shortest human form of a memory size: ``80GiB``, ``512MiB``, ``1.5TiB``."""
    if gib >= 1024 and (gib / 1024).is_integer():
        return f"{_num(gib / 1024)}TiB"
    if gib < 1:
        return f"{_num(gib * 1024)}MiB"
    return f"{_num(gib)}GiB"


def format_gbps(gbps: float) -> str:
    """``400Gbps``, ``3.2Tbps``, ``100Mbps``."""
    if gbps >= 1000:
        return f"{_num(gbps / 1000)}Tbps"
    if gbps < 1:
        return f"{_num(gbps * 1000)}Mbps"
    return f"{_num(gbps)}Gbps"


def count_of(number: int, noun: str, plural: str | None = None) -> str:
    """``1 cloud pool``, ``3 cloud pools``, ``0 processes`` (``plural``: where adding "s" is
    not the plural)."""
    return f"{number:,} {noun if number == 1 else plural or noun + 's'}"
