"""The simulator's inference model: hand-computed traffic and surges, and every GPU-second of
the pool accounted for once."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshctl.lifecycle.serving import ServeSpec
from meshctl.sim.core.inference import DAY_S, Service, Surge, Traffic, replay, static, surges

pytestmark = pytest.mark.unit

SPEC = ServeSpec(least=1, most=8, target=2.0, upscale_delay_s=30, downscale_delay_s=600)
ONE_GPU = Service(SPEC, gpus_per_replica=1.0, service_s=1.0, grace_s=30.0, start_s=10.0)


def test_the_diurnal_rate_peaks_at_its_hour_and_bottoms_at_half():
    traffic = Traffic(peak_rps=100.0)
    assert traffic.rate(14 * 3600) == pytest.approx(100.0)
    assert traffic.rate(2 * 3600) == pytest.approx(50.0)  # twelve hours later: the trough
    assert traffic.rate(8 * 3600) == pytest.approx(75.0)  # half-way: the mean
    surged = Traffic(peak_rps=100.0, surges=(Surge(14 * 3600, 600, 8.0),))
    assert surged.rate(14 * 3600 + 1) == pytest.approx(800.0, rel=1e-6)
    assert surged.rate(14 * 3600 + 600) == pytest.approx(100.0, rel=1e-3)


def test_surges_are_seeded_and_never_overlap():
    found = surges(seed=3, days=10, per_day=2, factor=8, duration_s=1800)
    assert found == surges(seed=3, days=10, per_day=2, factor=8, duration_s=1800)
    assert 5 <= len(found) <= 40
    for a, b in itertools.pairwise(found):
        assert b.start_s >= a.start_s + a.duration_s
    assert all(s.start_s < 10 * DAY_S for s in found)


def test_a_steady_service_serves_on_one_replica_and_training_has_the_rest():
    # 2 requests a second of 1 s each: 2 in flight, the target of one replica
    flat = Traffic(peak_rps=2.0, trough=1.0)
    out = replay(ONE_GPU, flat, gpus=10, seconds=1000)
    assert out.serving_gpu_s == pytest.approx(1000.0)
    assert out.training_gpu_s == pytest.approx(9000.0)
    assert (out.idle_gpu_s, out.moving_gpu_s, out.lent_gpu_s) == (0.0, 0.0, 0.0)
    assert out.utilisation == pytest.approx(1.0)


def test_a_surge_serves_its_first_new_replica_after_the_delay_the_grace_and_the_start():
    # x4 at t=100: 8 in flight want 4 replicas; seen at 100, decided at 130 (30 s later),
    # serving at 170 (grace 30 s + start 10 s): 70 s from the surge
    traffic = Traffic(peak_rps=2.0, trough=1.0, surges=(Surge(100.0, 2000.0, 4.0),))
    out = replay(ONE_GPU, traffic, gpus=10, seconds=1000)
    assert out.surge_to_serving_s == [70.0]
    # lent: 3 replicas over the least from 170 to 1000; moving: 3 GPUs from 130 to 170
    assert out.lent_gpu_s == pytest.approx(3 * 830)
    assert out.moving_gpu_s == pytest.approx(3 * 40)
    # serving: 1 GPU to 170 (busy: min(1, 8/2)), then 4
    assert out.serving_gpu_s == pytest.approx(170 + 4 * 830)


def test_a_static_split_holds_the_peak_all_day():
    traffic = Traffic(peak_rps=8.0, trough=0.5)  # 8 in flight at the peak: 4 replicas
    out = static(ONE_GPU, traffic, gpus=10, seconds=DAY_S)
    assert out.training_gpu_s == pytest.approx(6 * DAY_S)
    # serving: the mean rate (6/s, 6 in flight) over 2 per replica: 3 GPUs busy on average
    assert out.serving_gpu_s == pytest.approx(3 * DAY_S, rel=1e-3)
    assert out.idle_gpu_s == pytest.approx(1 * DAY_S, rel=1e-3)


@settings(max_examples=60, deadline=None)
@given(
    st.floats(0.5, 40),  # peak rps
    st.floats(0.2, 1.0),  # trough
    st.lists(st.tuples(st.floats(0, 80_000), st.floats(60, 7200), st.floats(1, 8)), max_size=4),
    st.floats(5, 60),  # step
)
def test_every_gpu_second_is_counted_once(peak, trough, drawn, step):
    drawn.sort()
    kept, end = [], -1.0
    for start, duration, factor in drawn:
        if start >= end:
            kept.append(Surge(start, duration, factor))
            end = start + duration
    traffic = Traffic(peak, trough, surges=tuple(kept))
    gpus, seconds = 20.0, DAY_S
    for out in (
        replay(ONE_GPU, traffic, gpus, seconds, step),
        static(ONE_GPU, traffic, gpus, seconds, step),
    ):
        total = out.serving_gpu_s + out.idle_gpu_s + out.training_gpu_s + out.moving_gpu_s
        assert total == pytest.approx(gpus * seconds, rel=1e-9)
        assert min(out.serving_gpu_s, out.idle_gpu_s, out.training_gpu_s) >= -1e-6
