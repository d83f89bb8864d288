"""Invalid policies are rejected with file, line, field and the expression: one case each."""

from __future__ import annotations

import pytest
from helpers import compiled, policy_text, sources

from meshctl.files import load_text
from meshctl.model.policy import MAX_RULES_PER_FILE
from meshctl.policy import compile_policies
from meshctl.policy.compiled import Source
from meshctl.problems import InvalidFileError

pytestmark = pytest.mark.unit


def problems(*specs: str) -> list[str]:
    with pytest.raises(InvalidFileError) as caught:
        compiled(*specs)
    return [str(p) for p in caught.value.problems]


CLASSES = "priority_classes: [{name: high, value: 10}, {name: low, value: 1}]\n"


@pytest.mark.parametrize(
    ("specs", "expected"),
    [
        pytest.param(
            ["pools: [{name: a, when: 'job.kind ==', deny: pool.cloud}]"],
            "p0.yaml:5: spec.pools[0].when: syntax error at column 12: mismatched input"
            " '<EOF>' expecting a value in `job.kind ==`",
            id="cel-syntax",
        ),
        pytest.param(
            ["pools: [{name: a, when: 'job.gpu > 0', deny: pool.cloud}]"],
            "p0.yaml:5: spec.pools[0].when: job has no field 'gpu'; did you mean"
            " 'resources.gpus'? in `job.gpu > 0`",
            id="unknown-field",
        ),
        pytest.param(
            ['pools: [{name: a, deny: \'pool.labels.tier == "x" && victim.kind == "train"\'}]'],
            "p0.yaml:5: spec.pools[0].deny: variable 'victim' is not available here; expected"
            ' one of: job, mesh, now, pool in `pool.labels.tier == "x" && victim.kind =='
            ' "train"`',
            id="variable-not-here",
        ),
        pytest.param(
            ["burst: [{name: b, to: 'pool.cloud', max_usd_per_hour: -5}]"],
            "p0.yaml:5: spec.burst[0].max_usd_per_hour: expected an amount in USD such as 12.5,"
            " got a negative quantity -5",
            id="negative-limit",
        ),
        pytest.param(
            ["pools: [{name: a, allow: pool.cloud, deny: pool.cloud}]"],
            "p0.yaml:5: spec.pools[0]: a pool rule has exactly one of `allow` or `deny`",
            id="allow-and-deny",
        ),
        pytest.param(
            ["pools: [{name: a, alow: pool.cloud}]"],
            "p0.yaml:5: spec.pools[0].alow: unknown field 'alow'; did you mean 'allow'?",
            id="unknown-key",
        ),
        pytest.param(
            [CLASSES, "priority_classes: [{name: high, value: 99}]"],
            "p1.yaml:5: spec.priority_classes[0]: priority class 'high' is also set at"
            " p0.yaml:5; it may be set in one place only",
            id="class-in-two-files",
        ),
        pytest.param(
            [
                CLASSES + "default_priority_class: {train: high}",
                "default_priority_class: {train: low}",
            ],
            "p1.yaml:5: spec.default_priority_class.train: the default priority class of train"
            " jobs is also set at p0.yaml:6; it may be set in one place only",
            id="default-class-in-two-files",
        ),
        pytest.param(
            ["default_priority_class: {train: urgent}"],
            "p0.yaml:5: spec.default_priority_class.train: expected a defined priority class"
            " (none), got 'urgent'",
            id="undefined-class",
        ),
        pytest.param(
            ["pools: [{name: a, deny: pool.cloud}]", "pools: [{name: a, allow: pool.cloud}]"],
            "p1.yaml:5: spec.pools[0].name: pool rule 'a' is also set at p0.yaml:5; it may be"
            " set in one place only",
            id="rule-name-twice",
        ),
        pytest.param(
            ["quotas: [{team: vision, gpus: 4}]", "quotas: [{team: vision, gpus: 8}]"],
            "p1.yaml:5: spec.quotas[0].team: the quota of team 'vision' is also set at"
            " p0.yaml:5; it may be set in one place only",
            id="quota-twice",
        ),
        pytest.param(
            [
                "budgets: [{name: a, scope: {provider: aws}, usd_per_month: 10}]",
                "budgets: [{name: b, scope: {provider: aws}, usd_per_month: 20}]",
            ],
            "p1.yaml:5: spec.budgets[0].scope: the budget of provider:aws is also set at"
            " p0.yaml:5; it may be set in one place only",
            id="budget-scope-twice",
        ),
        pytest.param(
            ["budgets: [{name: a, scope: {provider: aws, team: x}, usd_per_month: 10}]"],
            "p0.yaml:5: spec.budgets[0].scope: a budget scope names exactly one of pool,"
            " provider or team",
            id="budget-scope-two-things",
        ),
        pytest.param(
            ["scoring: {weights: {cost: 2}}", "scoring: {weights: {wait: 3}}"],
            "p1.yaml:5: spec.scoring.weights: scoring.weights is also set at p0.yaml:5; it may"
            " be set in one place only",
            id="weights-twice",
        ),
        pytest.param(
            ["forecast: {unknown_runtime_s: 1h}", "forecast: {unknown_runtime_s: 3h}"],
            "p1.yaml:5: spec.forecast.unknown_runtime_s: forecast.unknown_runtime_s is also set"
            " at p0.yaml:5; it may be set in one place only",
            id="unknown-runtime-twice",
        ),
        pytest.param(
            ["forecast: {unknown_runtime_s: 0}"],
            "p0.yaml:5: spec.forecast.unknown_runtime_s: expected greater than 0, got 0",
            id="unknown-runtime-zero",
        ),
        pytest.param(
            ["pools: [{name: a, deny: '" + "(" * 40 + "pool.cloud" + ")" * 40 + "'}]"],
            "p0.yaml:5: spec.pools[0].deny: brackets nest deeper than 32 levels at column 33;"
            " expected at most 32 levels of (), [] and {} in `"
            + "(" * 40
            + "pool.cloud"
            + ")" * 27
            + "...`",
            id="too-deep",
        ),
        pytest.param(
            ["pools: [{name: a, deny: 'pool.name == \"" + "x" * 5000 + "\"'}]"],
            "p0.yaml:5: spec.pools[0].deny: expression is 5015 characters long; expected at"
            ' most 4096 in `pool.name == "' + "x" * 63 + "...`",
            id="too-long",
        ),
    ],
)
def test_invalid_policy(specs, expected):
    assert problems(*specs)[0] == expected


def test_every_problem_of_every_file_is_reported_at_once():
    reported = problems(
        "pools: [{name: a, when: 'job.gpu > 0', deny: pool.cloud}, {name: b, deny: 'pool.x'}]",
        "quotas: [{team: t, gpus: 1}, {team: t, gpus: 2}]",
    )
    assert [r.split(": ")[0] for r in reported] == ["p0.yaml:5", "p0.yaml:5", "p1.yaml:5"]


def test_too_many_rules_in_one_file():
    rules = ", ".join(f"{{name: r{i}, deny: pool.cloud}}" for i in range(MAX_RULES_PER_FILE + 1))
    with pytest.raises(InvalidFileError) as caught:
        sources(f"pools: [{rules}]")
    assert str(caught.value).endswith(
        f"expected at most {MAX_RULES_PER_FILE} rules in a file, got {MAX_RULES_PER_FILE + 1}"
    )


def test_thousands_of_rules_across_files_compile():
    files = [
        ", ".join(
            f"{{name: r{f}-{i}, when: 'job.team == \"t{i}\"', deny: pool.cloud}}"
            for i in range(500)
        )
        for f in range(4)
    ]
    policies = compile_policies(sources(*(f"pools: [{rules}]" for rules in files)))
    assert len(policies.pool_rules) == 2000


RULES = """\
# routing
pools:
  - name: a          # cloud pools are out
    deny: pool.cloud
"""
CLASSES_DOC = "priority_classes: [{name: high, value: 10}]"


def _hash(*files: tuple[str, str]) -> str:
    """The hash of policy files given as (path, spec)."""
    out = []
    for path, spec in files:
        (loaded,) = load_text(policy_text(path.split("/")[-1].split(".")[0], spec), path)
        out.append(Source(path, loaded.document, loaded.lines))
    return compile_policies(out).content_hash


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(
            [("/elsewhere/p0.yaml", RULES), ("/elsewhere/p1.yaml", CLASSES_DOC)],
            id="another-folder",
        ),
        pytest.param([("p1.yaml", CLASSES_DOC), ("p0.yaml", RULES)], id="another-order"),
        pytest.param(
            [("p0.yaml", RULES.replace("# routing\n", "").replace("  # cloud pools are out", "")),
             ("p1.yaml", CLASSES_DOC)],
            id="other-comments",
        ),
        pytest.param(
            [("p0.yaml", "pools: [{deny: pool.cloud, name: a}]"), ("p1.yaml", CLASSES_DOC)],
            id="another-layout",
        ),
    ],
)  # fmt: skip
def test_the_policy_hash_is_over_content_alone(other):
    base = _hash(("p0.yaml", RULES), ("p1.yaml", CLASSES_DOC))
    assert _hash(*other) == base


def test_other_file_names_give_the_same_hash():
    # the metadata name is content: keep it, rename the files
    (a,) = load_text(policy_text("routing", RULES), "x.yaml")
    (b,) = load_text(policy_text("routing", RULES), "policies/renamed.yaml")
    hashes = {compile_policies([Source(d.path, d.document, d.lines)]).content_hash for d in (a, b)}
    assert len(hashes) == 1


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(("deny: pool.cloud", "deny: '!pool.cloud'"), id="an-expression"),
        pytest.param(("name: a", "name: b"), id="a-rule-name"),
        pytest.param(("deny: pool.cloud", "deny: pool.cloud\n    reason: why"), id="a-reason"),
        pytest.param(("    deny: pool.cloud", "    allow: pool.cloud"), id="allow-for-deny"),
    ],
)
def test_any_change_to_a_rule_changes_the_hash(change):
    base = _hash(("p0.yaml", RULES))
    assert _hash(("p0.yaml", RULES.replace(*change))) != base


def test_a_time_without_a_zone_is_utc(tmp_path, monkeypatch):
    import datetime as dt

    from meshctl.app.context import utc

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    assert utc(dt.datetime(2026, 1, 3, 3, 0)) == dt.datetime(2026, 1, 3, 3, 0, tzinfo=dt.UTC)
