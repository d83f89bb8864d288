"""Policy files -> one compiled policy set, with every conflict between files reported.

How files combine (also in README.md): files are read in the order given, a directory's
files in name order. Rules accumulate; anything that can have only one value (a priority
class, the default class of a job kind, a team's quota, a budget's scope, each scoring
setting, a rule's name) may be set in one place only: a second setting is a conflict that
validation reports with both locations, never resolved silently.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from meshctl.model.policy import (
    UNKNOWN_RUNTIME_S,
    Budget,
    Policy,
    Reclaim,
    Rule,
    TeamQuota,
    Weights,
)
from meshctl.policy.expr.guards import Unguarded, string_literal
from meshctl.policy.refs import (
    Compiled,
    ExpressionError,
    compile_checked,
    conjuncts,
    fields_read,
)
from meshctl.problems import InvalidFileError, Loc, Problem, dotted

WHEN_VARS = frozenset({"job", "mesh", "now"})
POOL_VARS = WHEN_VARS | {"pool"}
VICTIM_VARS = WHEN_VARS | {"victim"}


@dataclass(frozen=True, slots=True)
class Source:
    """One policy file as read: where it came from, the line of each of its keys, and its text
    (to point at the line of a problem inside an expression that spans several)."""

    path: str
    policy: Policy
    lines: Mapping[Loc, int] = field(default_factory=dict)
    text: str = ""

    def origin(self, *loc: str | int) -> Origin:
        for end in range(len(loc), -1, -1):
            if loc[:end] in self.lines:
                return Origin(self.path, self.lines[loc[:end]])
        return Origin(self.path, 1)


@dataclass(frozen=True, slots=True)
class Origin:
    path: str
    line: int

    @property
    def text(self) -> str:
        return f"{self.path}:{self.line}"

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class Condition:
    """A rule's ``when``: the whole expression, and the operands of its top-level ``&&``.

    Evaluating the operands apart lets the ones that read only ``mesh`` and ``now`` run once
    per snapshot instead of once per job (see evaluate.py).
    """

    source: str
    parts: tuple[Compiled, ...]


@dataclass(frozen=True, slots=True)
class PoolRuleC:
    name: str
    origin: Origin
    when: Condition
    effect: Literal["allow", "deny"]
    selector: Compiled
    reason: str
    lines: Mapping[str, int] = field(default_factory=dict)  # part (when, deny ...) -> its line


@dataclass(frozen=True, slots=True)
class BurstRuleC:
    name: str
    origin: Origin
    when: Condition
    to: Compiled
    spot: bool
    max_usd_per_hour: float | None
    lines: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PreemptionRuleC:
    name: str
    origin: Origin
    when: Condition
    victims: Compiled
    grace_s: float
    min_runtime_s: float
    lines: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PolicySet:
    paths: tuple[str, ...]
    content_hash: str
    priority_classes: Mapping[str, int]
    default_class: Mapping[str, str]
    pool_rules: tuple[PoolRuleC, ...]
    burst_rules: tuple[BurstRuleC, ...]
    preemption_rules: tuple[PreemptionRuleC, ...]
    quotas: Mapping[str, TeamQuota]
    budgets: tuple[Budget, ...]
    weights: Weights
    packing: str
    pool_preference: tuple[str, ...]
    job_fields: frozenset[str] | None  # the job fields any expression reads (None: all)
    # whether any expression reads a pool's expected wait (which differs by priority)
    reads_waits: bool = True
    # per preemption rule (by position): whether its `victims` reads neither runtime field
    victims_static: tuple[bool, ...] = ()
    # the teams the policies declare (``teams``) or give a quota: when any, a job naming
    # another team is refused at submit
    teams: frozenset[str] = frozenset()
    # what the wait forecast assumes of a job with no runtime declared or estimated
    unknown_runtime_s: float = UNKNOWN_RUNTIME_S
    # how a team below its quota takes back what it lent (``spec.reclaim``, else its defaults)
    reclaim: Reclaim = field(default_factory=Reclaim)
    # what does not stop the set but should be said: map lookups no presence test guards
    # (a rule that fails closed for every job without the key), in file order
    warnings: tuple[Problem, ...] = ()


class _Builder:
    """Collects one policy set from several files, recording problems instead of stopping."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []  # what validation says without failing
        self.claims: dict[str, Origin] = {}
        self.classes: dict[str, int] = {}
        self.default_class: dict[str, str] = {}
        self.pool_rules: list[PoolRuleC] = []
        self.burst_rules: list[BurstRuleC] = []
        self.preemption_rules: list[PreemptionRuleC] = []
        self.quotas: dict[str, TeamQuota] = {}
        self.teams: set[str] = set()
        self.budgets: list[Budget] = []
        self.scoring: dict[str, object] = {}
        self.unknown_runtime_s = UNKNOWN_RUNTIME_S
        self.reclaim = Reclaim()
        self.sources: list[str] = []

    def claim(self, what: str, origin: Origin, field_name: str) -> bool:
        """Whether ``what`` is set here for the first time; a conflict problem otherwise."""
        first = self.claims.setdefault(what, origin)
        if first is origin:
            return True
        self.problems.append(
            Problem(
                origin.path,
                origin.line,
                field_name,
                f"{what} is also set at {first}; it may be set in one place only",
            )
        )
        return False

    def condition(self, src: Source, loc: Loc, text: str, rule: str) -> Condition | None:
        whole = self.expression(src, loc, text, WHEN_VARS, rule)
        if whole is None:
            return None
        operands = conjuncts(text)
        if len(operands) == 1:
            return Condition(text, (whole,))
        return Condition(text, tuple(compile_checked(part, WHEN_VARS) for part in operands))

    def expression(
        self, src: Source, loc: Loc, text: str, allowed: frozenset[str], rule: str
    ) -> Compiled | None:
        """``text`` compiled; None, with every problem it has recorded, when it cannot be.
        A map lookup no presence test guards is a warning (``rule`` names the rule)."""
        self.sources.append(text)
        origin = src.origin(*loc)
        try:
            compiled = compile_checked(text, allowed)
        except ExpressionError as err:
            for message, pos in err.found:
                line = file_line(src, origin.line, text, pos)
                self.problems.append(
                    Problem(origin.path, line, dotted(loc), f"{message} in `{_short(text)}`")
                )
            return None
        for missing in compiled.unguarded:
            line = file_line(src, origin.line, text, missing.pos)
            self.warnings.append(Problem(origin.path, line, dotted(loc), _unguarded(rule, missing)))
        return compiled


def _unguarded(rule: str, missing: Unguarded) -> str:
    fix = missing.guarded if missing.guarded is not None else missing.guard
    return (
        f"rule {rule!r}: {missing.lookup} is not guarded: the rule fails closed wherever "
        f"{missing.operand} has no key {string_literal(missing.key)}; "
        + ("write" if missing.guarded is not None else "guard it with")
        + f" `{_short(fix, 160)}`"
    )


def file_line(src: Source, key_line: int, expression: str, pos: int | None) -> int:
    """The file line of offset ``pos`` in an expression whose key is on ``key_line``: for one
    written over several lines (a block scalar, ``>-`` or ``|``, or a plain one continued), the
    line that holds it, found by matching the expression's words to the file's lines."""
    lines = src.text.splitlines()
    if pos is None or not 0 < key_line <= len(lines):
        return key_line
    indent = len(lines[key_line - 1]) - len(lines[key_line - 1].lstrip())
    last = min(len(lines), key_line + expression.count(" ") + expression.count("\n") + 1)
    cursor = 0
    for number in range(key_line, last + 1):
        raw = lines[number - 1]
        if number > key_line and raw.strip() and len(raw) - len(raw.lstrip()) <= indent:
            break  # the next key: the expression ended
        piece = raw.split(":", 1)[1] if number == key_line and ":" in raw else raw
        piece = piece.strip().strip("'\"")
        if not piece or piece in (">-", ">", "|", "|-", ">+", "|+"):
            continue
        found = expression.find(piece, cursor)
        if found < 0:
            continue
        if found <= pos < found + len(piece) + 1:
            return number
        cursor = found + len(piece)
    return key_line


def _short(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _add_classes(b: _Builder, src: Source) -> None:
    spec = src.policy.spec
    for i, pc in enumerate(spec.priority_classes):
        origin = src.origin("spec", "priority_classes", i)
        if b.claim(f"priority class {pc.name!r}", origin, f"spec.priority_classes[{i}]"):
            b.classes[pc.name] = pc.value
    for kind, name in spec.default_priority_class.items():
        origin = src.origin("spec", "default_priority_class", kind)
        if b.claim(
            f"the default priority class of {kind} jobs",
            origin,
            f"spec.default_priority_class.{kind}",
        ):
            b.default_class[kind] = name


def _rule(
    b: _Builder,
    src: Source,
    section: str,
    i: int,
    rule: Rule,
    part: str,
    text: str,
    allowed: frozenset[str],
) -> tuple[Origin, Condition, Compiled] | None:
    """A rule's origin, condition and selector, compiled; None (problems recorded) if any fails."""
    loc: Loc = ("spec", section, i)
    origin = src.origin(*loc)
    when = b.condition(src, (*loc, "when"), rule.when, rule.name)
    selector = b.expression(src, (*loc, part), text, allowed, rule.name)
    kind = "pool" if section == "pools" else section
    named = b.claim(f"{kind} rule {rule.name!r}", origin, f"spec.{section}[{i}].name")
    return (origin, when, selector) if when and selector and named else None


def _lines(src: Source, section: str, i: int, *parts: str) -> dict[str, int]:
    return {part: src.origin("spec", section, i, part).line for part in ("when", *parts)}


def _add_rules(b: _Builder, src: Source) -> None:
    spec = src.policy.spec
    for i, pool_rule in enumerate(spec.pools):
        effect: Literal["allow", "deny"] = "allow" if pool_rule.allow is not None else "deny"
        text = pool_rule.allow if pool_rule.allow is not None else pool_rule.deny
        assert text is not None  # the model requires exactly one
        if parts := _rule(b, src, "pools", i, pool_rule, effect, text, POOL_VARS):
            lines = _lines(src, "pools", i, effect)
            b.pool_rules.append(
                PoolRuleC(pool_rule.name, *parts[:2], effect, parts[2], pool_rule.reason, lines)
            )
    for i, burst in enumerate(spec.burst):
        if parts := _rule(b, src, "burst", i, burst, "to", burst.to, POOL_VARS):
            lines = _lines(src, "burst", i, "to")
            b.burst_rules.append(
                BurstRuleC(burst.name, *parts, burst.spot, burst.max_usd_per_hour, lines)
            )
    for i, pre in enumerate(spec.preemption):
        if parts := _rule(b, src, "preemption", i, pre, "victims", pre.victims, VICTIM_VARS):
            lines = _lines(src, "preemption", i, "victims")
            b.preemption_rules.append(
                PreemptionRuleC(pre.name, *parts, pre.grace_s, pre.min_runtime_s, lines)
            )


def _add_tenancy(b: _Builder, src: Source) -> None:
    spec = src.policy.spec
    for i, quota in enumerate(spec.quotas):
        origin = src.origin("spec", "quotas", i)
        if b.claim(f"the quota of team {quota.team!r}", origin, f"spec.quotas[{i}].team"):
            b.quotas[quota.team] = quota
    for i, team in enumerate(spec.teams):
        origin = src.origin("spec", "teams", i)
        if b.claim(f"team {team.name!r}", origin, f"spec.teams[{i}].name"):
            b.teams.add(team.name)
    for i, budget in enumerate(spec.budgets):
        origin = src.origin("spec", "budgets", i)
        scoped = b.claim(f"the budget of {budget.scope.key}", origin, f"spec.budgets[{i}].scope")
        named = b.claim(f"budget {budget.name!r}", origin, f"spec.budgets[{i}].name")
        if scoped and named:
            b.budgets.append(budget)
    if spec.scoring is not None:
        for key in ("weights", "packing", "pool_preference"):
            value = getattr(spec.scoring, key)
            origin = src.origin("spec", "scoring", key)
            if value is not None and b.claim(f"scoring.{key}", origin, f"spec.scoring.{key}"):
                b.scoring[key] = value
    unknown = spec.forecast.unknown_runtime_s if spec.forecast is not None else None
    if unknown is not None:
        origin = src.origin("spec", "forecast", "unknown_runtime_s")
        if b.claim("forecast.unknown_runtime_s", origin, "spec.forecast.unknown_runtime_s"):
            b.unknown_runtime_s = unknown
    if spec.reclaim is not None:
        origin = src.origin("spec", "reclaim")
        if b.claim("reclaim", origin, "spec.reclaim"):
            b.reclaim = spec.reclaim


def _check_class_references(b: _Builder, sources: Sequence[Source]) -> None:
    defined = ", ".join(sorted(b.classes)) or "none"
    for src in sources:
        for kind, name in src.policy.spec.default_priority_class.items():
            if name not in b.classes:
                origin = src.origin("spec", "default_priority_class", kind)
                b.problems.append(
                    Problem(
                        origin.path,
                        origin.line,
                        f"spec.default_priority_class.{kind}",
                        f"expected a defined priority class ({defined}), got {name!r}",
                    )
                )


def content_hash(sources: Sequence[Source]) -> str:
    """A hash of what the policies say, not where they are written: each document's content
    as JSON (so comments, layout and key order do not count), in sorted order (so neither
    the files' names nor their order do). Any change to a rule changes it."""
    documents = sorted(src.policy.model_dump_json() for src in sources)
    digest = hashlib.sha256()
    for document in documents:
        digest.update(hashlib.sha256(document.encode()).digest())
    return digest.hexdigest()[:16]


def compile_policies(sources: Sequence[Source]) -> PolicySet:
    """The combined, compiled policy set; ``InvalidFileError`` with every problem otherwise."""
    b = _Builder()
    for src in sources:
        for add in (
            _add_classes,
            _add_rules,
            _add_tenancy,
        ):
            add(b, src)
    _check_class_references(b, sources)
    if b.problems:
        raise InvalidFileError(b.problems)
    weights = b.scoring.get("weights")
    preference = b.scoring.get("pool_preference")
    return PolicySet(
        paths=tuple(s.path for s in sources),
        content_hash=content_hash(sources),
        priority_classes=b.classes,
        default_class=b.default_class,
        pool_rules=tuple(b.pool_rules),
        burst_rules=tuple(b.burst_rules),
        preemption_rules=tuple(b.preemption_rules),
        quotas=b.quotas,
        budgets=tuple(b.budgets),
        weights=weights if isinstance(weights, Weights) else Weights(),
        packing=str(b.scoring.get("packing", "binpack")),
        pool_preference=tuple(preference) if isinstance(preference, list) else (),
        job_fields=_union(fields_read(text, ("job", "victim")) for text in b.sources),
        reads_waits=any("expected_wait_s" in text for text in b.sources),
        victims_static=tuple(
            not ((fields_read(r.victims.source, ("victim",)) or {"*"}) & VICTIM_DYNAMIC)
            for r in b.preemption_rules
        ),
        teams=frozenset(b.teams | set(b.quotas)),
        unknown_runtime_s=b.unknown_runtime_s,
        reclaim=b.reclaim,
        warnings=tuple(b.warnings),
    )


VICTIM_DYNAMIC = frozenset({"runtime_s", "since_checkpoint_s", "*"})  # "*": victim used whole


def _union(field_sets: Iterable[frozenset[str] | None]) -> frozenset[str] | None:
    out: set[str] = set()
    for fields in field_sets:
        if fields is None:
            return None
        out |= fields
    return frozenset(out)
