"""A node's data cache in words, for ``meshctl nodes show``'s table, from its data
(``meshctl.app.nodes.cache_data``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from meshctl.cli.render import Column

GIB = 1024**3
ENTRY_COLUMNS = (
    Column("location", "Location"),
    Column("version", "Version"),
    Column("size", "Size", "right"),
    Column("state", "State"),
    Column("source", "From"),
    Column("last_used", "Last used"),
    Column("pinned", "Pinned"),
)


# --- in words -----------------------------------------------------------------------------


def cache_lines(cache: Mapping[str, Any]) -> list[str]:
    """Its root, capacity and use, and its counters, a line each."""
    pct = "" if cache["used_pct"] is None else f" ({cache['used_pct']:.1f}%)"
    lines = [
        f"root {cache['root'] or '-'}",
        f"capacity {_gib(cache['capacity_bytes'])} GiB, used {_gib(cache['used_bytes'])} GiB{pct}, "
        f"{len(cache['entries'])} entries",
        f"read from sources {size_text(cache['source_bytes'])}, from peers "
        f"{size_text(cache['peer_bytes'])}; hits {cache['hits']}, misses {cache['misses']}, "
        f"refetched {cache['refetched']}",
    ]
    lines += [f"failed: {location}: {why}" for location, why in cache["failed"].items()]
    lines += [f"error: {error}" for error in cache["errors"]]
    return lines


def entry_cells(entry: Mapping[str, Any], now_s: float) -> dict[str, str]:
    """One entry for the table."""
    import datetime as dt

    size = entry["size_bytes"]
    fetched = entry["fetched_bytes"]
    state = "complete" if entry["complete"] else "fetching"
    if not entry["complete"] and fetched is not None:
        pct = f" ({100 * fetched / size:.0f}%)" if size else ""
        state += f" {size_text(fetched)} of {size_text(size)}{pct}"
    source = entry["fetched_from"]
    if source and source != "source":
        source = f"peer {entry['peer'] or source}"
    used = entry["last_used_at"]
    ago = None if used is None else now_s - dt.datetime.fromisoformat(used).timestamp()
    return {
        "location": entry["location"],
        "version": entry["version"][:8],
        "size": size_text(size),
        "state": state,
        "source": source or "-",
        "last_used": "-" if ago is None else age_text(ago),
        "pinned": "yes" if entry["pinned"] else "no",
    }


def size_text(size_bytes: int) -> str:
    """``512 B``, ``3 KiB``, ``1.5 GiB``, ``2 TiB`` (to one decimal)."""
    for unit, scale in (("TiB", 1024**4), ("GiB", GIB), ("MiB", 1024**2), ("KiB", 1024)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{size_bytes} B"


def age_text(seconds: float) -> str:
    """``12 s ago``, ``5 min ago``, ``3 h ago``, ``2 d ago``."""
    for unit, scale in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= scale:
            return f"{int(seconds // scale)} {unit} ago"
    return f"{max(0, int(seconds))} s ago"


def _gib(size_bytes: int) -> str:
    return f"{size_bytes / GIB:,.3f}".rstrip("0").rstrip(".")
