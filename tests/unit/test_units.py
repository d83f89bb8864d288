from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshctl import units

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("parse", "text", "expected"),
    [
        pytest.param(units.parse_memory_gib, "80GiB", 80.0, id="gib"),
        pytest.param(units.parse_memory_gib, "512MiB", 0.5, id="mib"),
        pytest.param(units.parse_memory_gib, "1.5TiB", 1536.0, id="tib"),
        pytest.param(units.parse_memory_gib, "2Gi", 2.0, id="k8s-gi"),
        pytest.param(units.parse_memory_gib, "1GB", 1e9 / 2**30, id="decimal-gb"),
        pytest.param(units.parse_memory_gib, 16, 16.0, id="bare-number-is-gib"),
        pytest.param(units.parse_memory_gib, " 8 GiB ", 8.0, id="spaces"),
        pytest.param(units.parse_bandwidth_gbps, "400Gbps", 400.0, id="gbps"),
        pytest.param(units.parse_bandwidth_gbps, "3.2Tbps", 3200.0, id="tbps"),
        pytest.param(units.parse_bandwidth_gbps, "100Mbps", 0.1, id="mbps"),
        pytest.param(units.parse_duration_s, "10m", 600.0, id="minutes"),
        pytest.param(units.parse_duration_s, "2h", 7200.0, id="hours"),
        pytest.param(units.parse_duration_s, "250ms", 0.25, id="millis"),
        pytest.param(units.parse_duration_s, 90, 90.0, id="bare-seconds"),
        pytest.param(units.parse_cpus, "500m", 0.5, id="millicores"),
        pytest.param(units.parse_cpus, 4, 4.0, id="cores"),
        pytest.param(units.parse_gpus, 0.25, 0.25, id="quarter-gpu"),
        pytest.param(units.parse_gpus, "25%", 0.25, id="percent-gpu"),
        pytest.param(units.parse_gpus, 8, 8.0, id="whole-gpus"),
        pytest.param(units.parse_usd, "$12.5", 12.5, id="dollars"),
        pytest.param(units.parse_duration_min, "5m", 5.0, id="minutes-in-minutes"),
        pytest.param(units.parse_duration_min, "90s", 1.5, id="seconds-in-minutes"),
        pytest.param(units.parse_duration_min, 10, 10.0, id="bare-minutes"),
        pytest.param(units.parse_percent, "15%", 15.0, id="percent-sign"),
        pytest.param(units.parse_percent, 15, 15.0, id="bare-percent"),
    ],
)
def test_parses_human_forms(parse, text, expected):
    assert parse(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("parse", "value", "message"),
    [
        pytest.param(units.parse_memory_gib, "80Gx", "unknown unit 'gx'", id="unknown-unit"),
        pytest.param(units.parse_memory_gib, "-4GiB", "negative quantity -4", id="negative"),
        pytest.param(units.parse_memory_gib, "lots", "expected a memory size", id="words"),
        pytest.param(units.parse_memory_gib, True, "got a boolean", id="boolean"),
        pytest.param(units.parse_memory_gib, [1], "got list", id="list"),
        pytest.param(units.parse_memory_gib, float("inf"), "non-finite", id="infinite"),
        pytest.param(units.parse_bandwidth_gbps, "400GiB", "unknown unit 'gib'", id="bytes-as-bw"),
        pytest.param(units.parse_gpus, 1.5, "fraction of one GPU", id="fraction-above-one"),
        pytest.param(units.parse_duration_s, "10 fortnights", "unknown unit", id="bad-duration"),
    ],
)
def test_rejects_with_what_was_expected(parse, value, message):
    with pytest.raises(ValueError, match=message):
        parse(value)


def test_bounded_names_the_bound():
    with pytest.raises(ValueError, match="at most 64, got 640"):
        units.bounded(640, 64, "GPUs")


@given(st.integers(min_value=1, max_value=2**20))
def test_format_gib_round_trips(mib):
    gib = mib / 1024
    assert units.parse_memory_gib(units.format_gib(gib)) == pytest.approx(gib)


@given(st.floats(min_value=0.001, max_value=90_000, allow_nan=False))
def test_format_gbps_round_trips(gbps):
    assert units.parse_bandwidth_gbps(units.format_gbps(gbps)) == pytest.approx(gbps, rel=1e-5)


@pytest.mark.parametrize(
    ("number", "noun", "plural", "said"),
    [
        (1, "cloud pool", None, "1 cloud pool"),  # was "preflight of 1 cloud pools"
        (0, "cloud pool", None, "0 cloud pools"),
        (3, "pool", None, "3 pools"),
        (1, "process", "processes", "1 process"),
        (35, "process", "processes", "35 processes"),
        (1200, "instance", None, "1,200 instances"),
    ],
)
def test_a_count_agrees_with_its_noun(
    number: int, noun: str, plural: str | None, said: str
) -> None:
    assert units.count_of(number, noun, plural) == said
