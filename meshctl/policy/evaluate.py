"""Evaluating a compiled policy set: (job, mesh snapshot, now) -> verdict. Pure: no I/O.

``bind`` takes the snapshot and the time once; the selectors that read only ``pool`` (and
``mesh`` or ``now``) are evaluated there, once per pool, not once per job. ``evaluate`` then
builds the job's CEL map once and runs each rule's ``when`` once.

An expression that fails at run time (a missing key, a value whose type only shows then) fails
closed: it never widens what a job may use. A deny whose ``when`` fails applies, one whose
selector fails for a pool denies that pool; an allow whose ``when`` fails applies (it
restricts), one whose selector fails does not pick the pool; a burst or preemption rule that
fails gives nothing. The failure stays in the trace (outcome "error") and in
``Verdict.errors``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

import cel

from meshctl.model.job import Job
from meshctl.policy.compiled import BurstRuleC, PolicySet, PoolRuleC, PreemptionRuleC
from meshctl.policy.explain import Scope, failure
from meshctl.policy.facts import MeshSnapshot, PoolFacts, VictimFacts, job_map, mesh_map
from meshctl.policy.facts import pool_map as build_pool_map
from meshctl.policy.facts import victim_map as build_victim_map
from meshctl.policy.names import did_you_mean
from meshctl.policy.refs import Compiled
from meshctl.policy.tenancy import budget_standings, quota_standing
from meshctl.policy.verdict import (
    BurstTarget,
    BurstVerdict,
    Outcome,
    PoolVerdict,
    PreemptionRights,
    RuleError,
    TraceRow,
    Verdict,
    VictimVerdict,
    errors_of,
)

POOL_ONLY = frozenset({"pool", "mesh", "now"})
JOB_ONLY = frozenset({"job"})
PLAIN_POOL = frozenset({"pool"})
MESH_ONLY = frozenset({"mesh", "now"})
Result = tuple[Outcome, str]


MATCHED: Result = ("matched", "")
NOT_MATCHED: Result = ("not matched", "")  # why: worked out when the trace is read


def run(expr: Compiled, context: cel.Context) -> tuple[Outcome, str]:
    """Evaluate a condition: matched / not matched, or error with the reason."""
    try:
        value = expr.program.execute(context)
    except Exception as err:
        return "error", failure(expr, err)
    if value is True:
        return MATCHED
    if value is False:
        return NOT_MATCHED
    return "error", f"expected a boolean, got {type(value).__name__} {value!r}"


class _Trace:
    """Every evaluation, kept raw; ``Verdict.trace`` turns it into ``RuleTrace``s on demand
    (most verdicts are never explained, and building records per rule and pool is costly)."""

    def __init__(self, scope: Scope | None = None) -> None:
        self.entries: list[TraceRow] = []
        self.scope = scope

    def add(
        self, section: str, rule: Any, part: str, expr: Any, result: Result, pool: str | None = None
    ) -> Outcome:
        self.entries.append((section, rule, part, expr, result, pool, self.scope))
        return result[0]


class KeptAnswers:
    """Answers that do not change from one binding to the next, kept: the policies are bound
    again at every cycle (free GPUs and waits change), and building a CEL context costs more
    than the rest of a binding. What a selector that reads only ``pool`` says of a pool is
    keyed by the expression and the pool's whole CEL map (``frozen``): a pool whose GPUs,
    labels or price changed is another key. What an operand that reads only ``job`` says of
    a job is keyed by the expression and the job file (one frozen ``Job`` object: the
    simulator and the controller share one per file). Hold one per policy set, or none (each
    binding then makes its own); at ``LIMIT`` answers of a kind it starts that kind afresh."""

    LIMIT = 16_384

    def __init__(self) -> None:
        self._answers: dict[tuple[int, Hashable], tuple[Compiled, Result]] = {}
        self._of_jobs: dict[tuple[int, int], tuple[Compiled, Job, Result]] = {}

    def of_pool(self, expr: Compiled, pool_map: Mapping[str, Any], frozen: Hashable) -> Result:
        """``expr`` of the pool ``pool_map``; ``frozen``: ``frozen(pool_map)``."""
        key = (id(expr), frozen)
        found = self._answers.get(key)
        if found is not None and found[0] is expr:  # the same object, not a reused id()
            return found[1]
        if len(self._answers) >= self.LIMIT:
            self._answers.clear()
        result = run(expr, cel.Context({"pool": pool_map}))
        self._answers[key] = (expr, result)
        return result

    def of_job(self, expr: Compiled, job: Job, job_map: Mapping[str, Any]) -> Result:
        """``expr``, which reads only ``job``, of ``job`` (whose CEL map is ``job_map``): a
        job file is decided again at every cycle, its map the same each time (it reads the
        file and the policy set's classes, which the expression belongs to)."""
        key = (id(expr), id(job))
        found = self._of_jobs.get(key)
        if found is not None and found[0] is expr and found[1] is job:  # not reused id()s
            return found[2]
        if len(self._of_jobs) >= self.LIMIT:
            self._of_jobs.clear()
        result = run(expr, cel.Context({"job": job_map}))
        self._of_jobs[key] = (expr, job, result)
        return result


def frozen(pool_map: Mapping[str, Any]) -> Hashable:
    """A pool's CEL map as a key: its ``repr``, which tells apart every value such a map
    holds (strings, numbers by type, booleans, lists, maps); a map whose labels were written
    in another order is another key, asked once more, never a wrong answer."""
    return repr(pool_map)


class BoundPolicies:
    """A policy set bound to one mesh snapshot and one moment."""

    def __init__(
        self,
        policies: PolicySet,
        mesh: MeshSnapshot,
        now: dt.datetime,
        answers: KeptAnswers | None = None,
    ) -> None:
        self.policies, self.mesh = policies, mesh
        self._mesh_map, self._now = mesh_map(mesh), now
        self._context = cel.Context({"mesh": self._mesh_map, "now": now})
        self._pool_maps = {p.name: build_pool_map(p) for p in mesh.pools}
        self._kept = answers or KeptAnswers()
        self._pool_keys: dict[str, Hashable] = {}  # each pool's map, frozen when first asked
        self._scope = Scope({"mesh": self._mesh_map, "now": now}, self._pool_maps)
        self._pool_only: dict[tuple[int, str], Result] = {}  # a selector that reads no job
        self._budgets = budget_standings(policies.budgets, mesh)  # mesh-only: once per bind
        self._job_fields = policies.job_fields
        self._job_in_context: Job | None = None  # the job being decided
        self._job_map: dict[str, Any] = {}  # its CEL map
        self._job_added = False  # whether the context holds it yet (only what reads more asks)
        self._victim_in_context: VictimFacts | None = None  # whose map "victim" holds now
        # preemptor -> the preemption rules whose `when` matches it (they read job and mesh)
        self._preempting: dict[int, tuple[Job, list[PreemptionRuleC]]] = {}
        static = policies.victims_static or (False,) * len(policies.preemption_rules)
        self._victims_static = {
            id(r): flag for r, flag in zip(policies.preemption_rules, static, strict=True)
        }
        self._victims_memo: dict[tuple[int, int, int, int, str], tuple[Job, Job, Result]] = {}
        self._mesh_part: dict[int, Result] = {}  # per rule's condition: ``_mesh_half``
        self._mesh_operands: dict[str, Result] = {}  # by source: rules repeat an operand

    def _select(self, expr: Compiled, pool: str) -> tuple[Outcome, str]:
        """What a selector says of ``pool``: once per binding for one that reads no job, from
        ``answers`` (kept between bindings) for one that reads only the pool."""
        cached = self._pool_only.get((id(expr), pool))
        if cached is not None:
            return cached
        if expr.roots <= PLAIN_POOL:
            pool_map, key = self._pool_maps[pool], self._pool_keys.get(pool)
            if key is None:
                key = self._pool_keys[pool] = frozen(pool_map)
            found = self._kept.of_pool(expr, pool_map, key)
        else:
            context = self._with_job()
            context.add_variable("pool", self._pool_maps[pool])
            found = run(expr, context)
        if expr.roots <= POOL_ONLY:
            self._pool_only[(id(expr), pool)] = found
        return found

    # --- one job ---------------------------------------------------------------------------

    def priority_of(self, job: Job) -> tuple[str | None, int, str | None]:
        """(class, value, problem): the job's class, else its kind's default class."""
        name = job.spec.priority_class or self.policies.default_class.get(job.spec.kind)
        if name is None:
            return None, 0, None
        value = self.policies.priority_classes.get(name)
        if value is None:
            classes = self.policies.priority_classes
            defined = ", ".join(sorted(classes)) or "none"
            hint = did_you_mean(name, classes)
            return name, 0, f"priority class {name!r} is not defined (defined: {defined}){hint}"
        return name, value, None

    def evaluate(self, job: Job) -> Verdict:
        klass, priority, problem = self.priority_of(job)
        self._set_job(job, klass)
        trace = _Trace(self._scope)
        eligible = self._eligibility(trace)
        burst = self._burst(job, trace, eligible)
        pools = tuple(
            PoolVerdict(
                p.name,
                eligible[p.name][0],
                eligible[p.name][0] and (not p.cloud or burst.target(p.name) is not None),
                eligible[p.name][1],
                eligible[p.name][2],
            )
            for p in self.mesh.pools
        )
        res = job.spec.resources
        gpu_memory = (res.gpu_memory_gib or 0.0) * res.total_gpus
        p = self.policies
        return Verdict(
            job=job.metadata.name,
            policy_hash=p.content_hash,
            priority_class=klass,
            priority=priority,
            priority_problem=problem,
            pools=pools,
            burst=burst,
            preemption=self._rights(trace),
            quota=quota_standing(job.spec.team, res.total_gpus, gpu_memory, p.quotas, self.mesh),
            budgets=self._budgets,
            weights=p.weights,
            packing=p.packing,
            pool_preference=p.pool_preference,
            trace_rows=tuple(trace.entries),
        )

    def _set_job(self, job: Job, klass: str | None) -> None:
        if self._job_in_context is not job:
            the_map = job_map(job, klass or "", self._job_fields)
            self._scope = Scope(
                {"mesh": self._mesh_map, "now": self._now, "job": the_map}, self._pool_maps
            )
            self._job_in_context, self._job_map, self._job_added = job, the_map, False

    def _with_job(self) -> cel.Context:
        """The context, holding the job being decided (added when first needed: an operand
        that reads only the job is answered from ``answers``)."""
        if not self._job_added:
            self._context.add_variable("job", self._job_map)
            self._job_added = True
        return self._context

    def _conjunction(self, parts: Any) -> Result:
        """CEL's ``&&`` over ``parts``: false if any is false (the first false one ends it),
        else an error if any failed, else true."""
        return _and(map(self._operand, parts))

    def _operand(self, part: Compiled) -> Result:
        job = self._job_in_context
        if job is not None and part.roots <= JOB_ONLY:
            return self._kept.of_job(part, job, self._job_map)
        return run(part, self._with_job())

    def _mesh_half(self, when: Any) -> Result:
        """The conjunction of a condition's operands that read only the mesh and the time:
        the same for every job of this binding, so evaluated once, when first asked; an
        operand that several rules write alike (a shared wait test), once for them all."""
        found = self._mesh_part.get(id(when))
        if found is None:
            mesh_only = (p for p in when.parts if p.roots <= MESH_ONLY)
            found = self._mesh_part[id(when)] = _and(map(self._mesh_operand, mesh_only))
        return found

    def _mesh_operand(self, part: Compiled) -> Result:
        found = self._mesh_operands.get(part.source)
        if found is None:
            found = self._mesh_operands[part.source] = run(part, self._context)
        return found

    def _when(self, section: str, rule: Any, trace: _Trace) -> Outcome:
        return self._condition(section, rule, trace)[0]

    def _condition(self, section: str, rule: Any, trace: _Trace) -> Result:
        """The rule's condition: its mesh-only operands evaluated once per binding. A false
        operand decides whichever half it is in; otherwise a failure does."""
        result = self._mesh_half(rule.when)
        if result[0] != "not matched":
            rest = self._conjunction(p for p in rule.when.parts if not p.roots <= MESH_ONLY)
            if rest[0] == "not matched" or result[0] == "matched":
                result = rest
        trace.add(section, rule, "when", rule.when, result)
        return result

    def _eligibility(self, trace: _Trace) -> dict[str, tuple[bool, str | None, str]]:
        """Per pool: (eligible, deciding rule, reason). A deny wins; allows restrict. A rule
        whose ``when`` failed applies (failing closed)."""
        whens = [(r, self._condition("pools", r, trace)) for r in self.policies.pool_rules]
        active = [r for r, (outcome, _) in whens if outcome != "not matched"]
        failed = {id(r): detail for r, (outcome, detail) in whens if outcome == "error"}
        allows = [r for r in active if r.effect == "allow"]
        out: dict[str, tuple[bool, str | None, str]] = {}
        for pool in self.mesh.pools:
            out[pool.name] = self._pool_eligibility(pool, (active, allows), failed, trace)
        return out

    def _picks(self, rule: PoolRuleC, pool: PoolFacts, trace: _Trace) -> Result:
        """What the rule's allow or deny selector says of ``pool`` (recorded in the trace)."""
        result = self._select(rule.selector, pool.name)
        trace.add("pools", rule, rule.effect, rule.selector, result, pool.name)
        return result

    def _pool_eligibility(
        self,
        pool: PoolFacts,
        rules: tuple[list[PoolRuleC], list[PoolRuleC]],
        failed: Mapping[int, str],
        trace: _Trace,
    ) -> tuple[bool, str | None, str]:
        active, allows = rules
        for rule in (r for r in active if r.effect == "deny"):
            outcome, detail = self._picks(rule, pool, trace)
            if outcome == "error" or (outcome == "matched" and id(rule) in failed):
                return False, rule.name, _closed("denied", rule, detail or failed[id(rule)])
            if outcome == "matched":
                return False, rule.name, rule.reason or f"denied by {rule.name}"
        if not allows:
            return True, None, "no rule restricts this pool"
        broken: list[tuple[PoolRuleC, str]] = []
        for rule in allows:
            outcome, detail = self._picks(rule, pool, trace)
            if outcome == "matched":
                return True, rule.name, rule.reason or f"allowed by {rule.name}"
            if outcome == "error":
                broken.append((rule, detail))
        if broken:
            return False, broken[0][0].name, _closed("not selected", *broken[0])
        names = ", ".join(r.name for r in allows)
        return False, None, f"not selected by the allow rules that apply ({names})"

    def _burst(
        self, job: Job, trace: _Trace, eligible: Mapping[str, tuple[bool, str | None, str]]
    ) -> BurstVerdict:
        burst_rules = self.policies.burst_rules
        active = [r for r in burst_rules if self._when("burst", r, trace) == "matched"]
        chosen: dict[str, list[BurstRuleC]] = {}
        for rule in active:
            for pool in self.mesh.pools:
                result = self._select(rule.to, pool.name)
                if trace.add("burst", rule, "to", rule.to, result, pool.name) == "matched":
                    chosen.setdefault(pool.name, []).append(rule)
        blocked = self._burst_blockers(job, chosen, eligible)
        targets = tuple(
            _target(pool, rules, job.spec.limits.max_usd_per_hour)
            for pool, rules in chosen.items()
            if pool not in dict(blocked)
        )
        return BurstVerdict(bool(targets), tuple(r.name for r in active), targets, blocked)

    def _burst_blockers(
        self,
        job: Job,
        chosen: Mapping[str, list[BurstRuleC]],
        eligible: Mapping[str, tuple[bool, str | None, str]],
    ) -> tuple[tuple[str, str], ...]:
        exceeded = [b for b in self._budgets if b.state == "exceeded"]
        blocked = []
        for name in chosen:
            pool = self.mesh.pool(name)
            assert pool is not None
            scopes = {f"pool:{name}", f"provider:{pool.provider}", f"team:{job.spec.team}"}
            over = [b for b in exceeded if b.scope in scopes]
            if not eligible[name][0]:
                blocked.append((name, f"not eligible: {eligible[name][2]}"))
            elif over:
                blocked.append(
                    (
                        name,
                        f"budget {over[0].name} exceeded "
                        f"({over[0].spent_usd:g} of {over[0].limit_usd:g} USD)",
                    )
                )
        return tuple(blocked)

    def _rights(self, trace: _Trace) -> PreemptionRights:
        rules = self.policies.preemption_rules
        active = [r for r in rules if self._when("preemption", r, trace) == "matched"]
        return PreemptionRights(
            bool(active),
            tuple(r.name for r in active),
            max((r.grace_s for r in active), default=0.0),
            max((r.min_runtime_s for r in active), default=0.0),
        )

    # --- one preemptor against one victim --------------------------------------------------

    def may_preempt(self, job: Job, victim: VictimFacts) -> VictimVerdict:
        """Whether ``job`` may take ``victim``'s GPUs: the victim has lower priority, and some
        rule whose ``when`` matches picks it with ``victims`` and its minimum runtime is met.
        Every rule is looked at; among those that allow it, the longest grace wins (the
        victim-friendly choice, independent of rule order). A ``victims`` expression that
        fails takes no victim; the failure is in the verdict's ``errors``."""
        klass, priority, _ = self.priority_of(job)
        if victim.priority >= priority:
            return VictimVerdict(
                False, None, 0.0, f"victim priority {victim.priority} >= preemptor's {priority}"
            )
        self._set_job(job, klass)
        found = self._preempting.get(id(job))
        if found is None or found[0] is not job:  # a preemptor meets many victims: once each
            rules = [
                r
                for r in self.policies.preemption_rules
                if self._when("preemption", r, _Trace()) == "matched"
            ]
            found = self._preempting[id(job)] = (job, rules)
        trace = _Trace()
        picked = [r for r in found[1] if self._picks_victim(r, job, victim, trace) == "matched"]
        failed = any(row[4][0] == "error" for row in trace.entries)
        return _victim_verdict(victim, picked, errors_of(tuple(trace.entries)) if failed else ())

    def _picks_victim(
        self, rule: PreemptionRuleC, job: Job, victim: VictimFacts, trace: _Trace
    ) -> Outcome:
        # A `victims` expression that reads neither runtime field gives the same answer for
        # every victim of one job file, priority and pool: asked once per cycle.
        key = (id(rule), id(job), id(victim.job), victim.priority, victim.pool)
        memo = self._victims_memo.get(key) if self._victims_static[id(rule)] else None
        if memo is not None and memo[0] is job and memo[1] is victim.job:
            result = memo[2]
        else:
            if self._victim_in_context is not victim:
                victim_class, _, _ = self.priority_of(victim.job)
                self._context.add_variable("victim", build_victim_map(victim, victim_class or ""))
                self._victim_in_context = victim
            result = run(rule.victims, self._with_job())
            if self._victims_static[id(rule)]:
                self._victims_memo[key] = (job, victim.job, result)
        return trace.add("preemption", rule, "victims", rule.victims, result)


def _and(results: Iterable[Result]) -> Result:
    """CEL's ``&&`` over ``results``, read in order: the first false one ends it; else the
    first failure, if any; else true."""
    failed: Result | None = None
    for result in results:
        if result[0] == "not matched":
            return result
        if result[0] == "error" and failed is None:
            failed = result
    return failed or MATCHED


def _victim_verdict(
    victim: VictimFacts, picked: list[PreemptionRuleC], errors: tuple[RuleError, ...]
) -> VictimVerdict:
    allowing = [r for r in picked if victim.runtime_s >= r.min_runtime_s]
    if allowing:
        best = max(allowing, key=lambda r: (r.grace_s, r.name))
        return VictimVerdict(True, best.name, best.grace_s, f"allowed by {best.name}", errors)
    if picked:
        rule = min(picked, key=lambda r: (r.min_runtime_s, r.name))
        ran = f"victim ran {victim.runtime_s:g} s < {rule.min_runtime_s:g} s"
        return VictimVerdict(False, rule.name, rule.grace_s, ran, errors)
    reason = "no preemption rule lets this job take the victim"
    return VictimVerdict(False, None, 0.0, reason, errors)


def _closed(what: str, rule: PoolRuleC, detail: str) -> str:
    """``denied: rule r could not be evaluated (no key 'x' in job.labels); failing closed``"""
    reason = detail.split("; ")[0]
    return f"{what}: rule {rule.name} could not be evaluated ({reason}); failing closed"


def _target(pool: str, rules: list[BurstRuleC], job_limit: float | None) -> BurstTarget:
    """Several rules naming one pool: the most restrictive settings of them all win."""
    limits = [r.max_usd_per_hour for r in rules if r.max_usd_per_hour is not None]
    if job_limit is not None:
        limits.append(job_limit)
    return BurstTarget(
        pool, all(r.spot for r in rules), min(limits, default=None), tuple(r.name for r in rules)
    )


def bind(
    policies: PolicySet,
    mesh: MeshSnapshot,
    now: dt.datetime,
    answers: KeptAnswers | None = None,
) -> BoundPolicies:
    return BoundPolicies(policies, mesh, now, answers)
