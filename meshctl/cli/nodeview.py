"""A node's data cache as ``meshctl nodes show`` gives it: data for ``-o json`` (the shape
``shapes.NodeCacheData``) from its agent's report (``meshctl.data.cache.NodeCache.inventory``,
as the controller keeps it in ``run/agents.json``), and the same in words for the table."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from meshctl.cli.render import Column

GIB = 1024**3
COUNTERS = ("source_bytes", "peer_bytes", "hits", "misses", "refetched")
ENTRY_COLUMNS = (
    Column("location", "Location"),
    Column("version", "Version"),
    Column("size", "Size", "right"),
    Column("state", "State"),
    Column("source", "From"),
    Column("last_used", "Last used"),
    Column("pinned", "Pinned"),
)


def cache_data(
    report: Mapping[str, Any] | None, agents: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The cache its agent reported (None: it keeps none, or no report), keys checked and
    defaults filled in: an agent of another version may say less. ``agents``: every node's
    agent by "pool/node", to name the peer an entry came from."""
    if not report:
        return None
    capacity, used = _int(report.get("capacity_bytes")), _int(report.get("used_bytes"))
    entries = [e for e in report.get("entries") or () if isinstance(e, Mapping)]
    return {
        "root": str(report.get("root") or ""),
        "capacity_bytes": capacity,
        "used_bytes": used,
        "used_pct": round(100.0 * used / capacity, 2) if capacity else None,
        "entries": [_entry(e, agents) for e in entries],
        **{name: _int(report.get(name)) for name in COUNTERS},
        "errors": [str(x) for x in report.get("errors") or ()],
        "failed": {str(k): str(v) for k, v in dict(report.get("failed") or {}).items()},
    }


def _entry(entry: Mapping[str, Any], agents: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    from meshctl.jsondata import timestamp

    complete = bool(entry.get("complete"))
    fetched = entry.get("fetched_bytes")
    source = str(entry.get("fetched_from") or "") or None
    used_s = entry.get("last_used_s") or None
    return {
        "key": str(entry.get("key") or ""),
        "location": str(entry.get("location") or ""),
        "version": str(entry.get("version") or ""),
        "size_bytes": _int(entry.get("size_bytes")),
        "fetched_bytes": None if fetched is None else _int(fetched),
        "complete": complete,
        "pinned": bool(entry.get("pinned")),
        "fetched_from": source,
        "peer": _peer(source, agents),
        "last_used_at": timestamp(float(used_s)) if complete and used_s else None,
    }


def _peer(source: str | None, agents: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The node whose agent answers at ``source`` (a peer's base URL), if known."""
    if not source or source == "source":
        return None
    where = urllib.parse.urlsplit(source).netloc
    found = [
        k for k, a in agents.items() if urllib.parse.urlsplit(str(a.get("url"))).netloc == where
    ]
    return found[0] if len(found) == 1 else None


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


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
