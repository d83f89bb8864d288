"""``meshctl policy diff`` for people: a summary, the per-team figures and the jobs that
moved, as terminal tables or as Markdown for a pull-request comment. The same rows feed both;
``-o json|yaml`` prints the report itself (``meshctl.app.policydiff``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from meshctl.cli.render import ago

SHOWN = 50  # moved jobs listed; the JSON has every one

GROUP_HEADERS = ("Team", "Class", "Jobs", "Moved", "Cloud GPU-h", "Spend/month",
                 "Wait p50", "Wait p95", "Preempted", "Refused")  # fmt: skip
CHANGE_HEADERS = ("Job", "Team", "Pool", "Wait", "Cost", "Preempted", "Refused", "Why")


def summary(report: Mapping[str, Any]) -> list[str]:
    """The few lines that say what the change does."""
    base, head = report["base"], report["head"]
    window = report["window"]
    lines = [
        f"base {base['policies']} ({base['policy_hash'][:12]}) -> "
        f"head {head['policies']} ({head['policy_hash'][:12]})",
        f"replayed {report['source']}: {report['jobs_compared']:,} jobs over "
        f"{window['days']:g} days",
    ]
    for left in report["left_out"]:
        lines.append(f"not replayed: {left['jobs']:,} {left['reason']}")
    fidelity = report["fidelity"]
    if fidelity is not None:
        lines.append(
            f"fidelity of the base replay: {fidelity['same_pool_share']:.1%} of "
            f"{fidelity['jobs_that_ran']:,} jobs in the pool they really ran in; start "
            f"times off by {ago(fidelity['start_error_p50_s'])} (p50), "
            f"{ago(fidelity['start_error_p95_s'])} (p95)"
        )
    spend = report["spend_usd_per_month"]
    lines.append(
        f"moved: {report['moved']:,} of {report['jobs_compared']:,} jobs; spend "
        f"${spend['base']:,.0f} -> ${spend['head']:,.0f} a month "
        f"({_signed(report['spend_delta_usd_per_month'])})"
    )
    crossings = report["budget_crossings"]
    if crossings["base"] != crossings["head"]:
        lines.append(f"budget crossings: {crossings['base']} -> {crossings['head']}")
    return lines


def group_rows(report: Mapping[str, Any]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for g in report["groups"]:
        b, h = g["base"], g["head"]
        rows.append(
            (
                g["team"],
                g["priority_class"],
                f"{g['jobs']:,}",
                f"{g['moved']:,}",
                _pair(_hours(b["cloud_gpu_hours"]), _hours(h["cloud_gpu_hours"])),
                _pair(f"${b['spend_usd_per_month']:,.0f}", f"${h['spend_usd_per_month']:,.0f}"),
                _pair(ago(b["wait_p50_s"]), ago(h["wait_p50_s"])),
                _pair(ago(b["wait_p95_s"]), ago(h["wait_p95_s"])),
                _pair(str(b["preemptions"]), str(h["preemptions"])),
                _pair(str(b["refused"]), str(h["refused"])),
            )
        )
    return rows


def change_rows(report: Mapping[str, Any]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for c in report["changes"][:SHOWN]:
        b, h = c["base"], c["head"]
        rows.append(
            (
                c["job_id"],
                c["team"],
                _pair(b["pool"] or "-", h["pool"] or "-"),
                _pair(_wait(b["wait_s"]), _wait(h["wait_s"])),
                _pair(f"${b['cost_usd']:,.2f}", f"${h['cost_usd']:,.2f}"),
                _pair(_yes(b["preempted"]), _yes(h["preempted"])),
                _pair(_yes(b["refused"] is not None), _yes(h["refused"] is not None)),
                "; ".join(c["rules"]),
            )
        )
    return rows


def markdown(report: Mapping[str, Any]) -> str:
    """The report as a pull-request comment: the summary, then two tables."""
    out = ["### meshctl policy diff", ""]
    out += [f"- {line}" for line in summary(report)]
    out += ["", _table(GROUP_HEADERS, group_rows(report))]
    changes = report["changes"]
    if changes:
        shown = f" (the first {SHOWN} of {len(changes):,})" if len(changes) > SHOWN else ""
        out += ["", f"#### Jobs that move{shown}", "", _table(CHANGE_HEADERS, change_rows(report))]
    else:
        out += ["", "No job moves."]
    return "\n".join(out) + "\n"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(headers), line(["---"] * len(headers)), *(line(r) for r in rows)])


def _pair(before: str, after: str) -> str:
    return before if before == after else f"{before} -> {after}"


def _hours(by_pool: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(f"{p['pool']} {p['gpu_hours']:,.1f}" for p in by_pool) or "-"


def _wait(seconds: float | None) -> str:
    return "never ran" if seconds is None else ago(seconds)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _signed(usd: float) -> str:
    return f"+${usd:,.0f}" if usd >= 0 else f"-${-usd:,.0f}"
