"""The trace-driven benchmarks run end to end in a real process, at small sizes, and print sane
JSON. Skipped when the shared traces (../shared/traces) are not beside the project."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "traces"
needs_traces = pytest.mark.skipif(
    not TRACES.is_dir(), reason=f"shared trace data not found at {TRACES} (clone without it)"
)


def _run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _json(script: str, *args: str) -> dict[str, Any]:
    done = _run(script, *args, "--json")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    result: dict[str, Any] = json.loads(lines[0])
    return result


@needs_traces
def test_schedule_benchmark_reports_a_cycle():
    result = _json("schedule.py", "--jobs", "500", "--runs", "1")
    assert result["jobs"] == 500
    assert result["decisions_per_s"] > 0
    assert result["cycle_s"] > 0
    assert 0 < result["placed"] <= 500
    assert 0 < result["gpu_allocation_pct"] <= 100


@needs_traces
def test_schedule_benchmark_takes_the_size_and_the_exhaustive_search():
    bounded = _json("schedule.py", "--nodes", "64", "--jobs", "300", "--runs", "1")
    every = _json("schedule.py", "--nodes", "64", "--jobs", "300", "--runs", "1",
                  "--candidates", "0")  # fmt: skip
    assert (bounded["nodes"], bounded["gpus"], every["candidates"]) == (64, 512, 0)
    assert bounded["placed"] > 0
    assert 0 < bounded["mean_score"] <= 1
    assert bounded["peak_rss_mib"] > 0


@needs_traces
def test_controller_scale_times_the_real_cycle_and_its_phases():
    result = _json("controller_scale.py", "--nodes", "64", "--queued", "300", "--history",
                   "2000", "--runs", "1")  # fmt: skip
    assert (result["nodes"], result["gpus"], result["history"]) == (64, 512, 2000)
    assert result["first_dispatched"] > 0  # the first cycle placed what fit on the empty pool
    assert set(result["phases_s_median"]) == {"observe", "decide", "apply", "record"}
    assert result["cycle_s_median"] > 0


@needs_traces
def test_explain_scale_times_the_command_against_a_filled_store():
    result = _json("explain_scale.py", "--history", "2000", "--queued", "200", "--runs", "1")
    assert (result["history"], result["queued"], result["store"]) == (2000, 200, "sqlite")
    assert 0 < result["explain_reads_s"] < result["explain_command_s"]


@needs_traces
def test_openb_packing_reports_every_strategy():
    result = _json("openb_packing.py", "--max-nodes", "120")
    assert set(result["allocation_pct"]) == {"binpack", "spread", "fgd"}
    assert all(0 < pct <= 100 for pct in result["allocation_pct"].values())
    assert result["max_candidates"] == result["nodes"] == 120
    assert result["gpus_requested"] >= result["gpus"]  # filled to 100% of capacity


@pytest.mark.parametrize("script", ["schedule.py", "openb_packing.py"])
def test_missing_traces_exit_2(tmp_path: Path, script: str):
    done = _run(script, "--trace-dir", str(tmp_path / "absent"))
    assert done.returncode == 2
    assert "trace data not found" in done.stderr


@pytest.mark.parametrize("side", ["meshctl", "ray_train"])
def test_recovery_benchmark_measures_each_side_recovering_from_a_killed_node(side: str):
    """A node killed mid-training, with meshctl or with plain Ray Train: one side per test (a
    local Ray cluster starts and a run recovers, so more than ``_run`` allows); the ratios of
    the two are the benchmark's, from a run of both."""
    every = 5
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "recovery.py"), "--side", side,
         "--steps", "30", "--every", str(every), "--kill-at", "12", "--loss", "kill", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=360,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    result = json.loads(lines[0])
    assert result["checkpoint_interval_steps"] == every
    figures = result["kill"][side]
    assert set(figures) == {"detect_s", "resume_s", "steps_lost", "ettr"}
    assert 0 <= figures["steps_lost"] <= every, figures
    assert figures["detect_s"] >= 0, figures
    assert figures["resume_s"] > 0, figures
    assert 0 < figures["ettr"] < 1, figures
    [other] = {"meshctl", "ray_train"} - {side}
    assert set(result["kill"][other].values()) == {None}  # not run
    assert result["summary"]["kill"]["resume_ratio"] is None


@needs_traces
def test_sim_speed_reports_events_and_the_simpy_ratio():
    result = _json("sim_speed.py", "--days", "0.5", "--replicate", "1")
    assert result["jobs"] > 0
    assert result["events"] >= 2 * result["jobs"]  # an arrival and an end each, at least
    assert result["events_per_s"] > 0
    assert result["wall_s"] > 0
    assert result["peak_rss_mib"] > 0
    assert result["simpy_ratio"] > 0


@needs_traces
def test_sim_speed_takes_the_size_and_keeps_the_load():
    result = _json("sim_speed.py", "--days", "0.2", "--replicate", "1", "--gpus", "20000")
    assert (result["gpus"], result["replicate"]) == (20000, 2)  # twice the GPUs, twice the jobs
    assert result["jobs"] > 0


@needs_traces
def test_sim_speed_repeats_the_window_back_to_back():
    once = _json("sim_speed.py", "--days", "0.2", "--replicate", "1", "--no-replay")
    thrice = _json(
        "sim_speed.py", "--days", "0.2", "--replicate", "1", "--repeat", "3", "--no-replay"
    )
    assert (thrice["repeat"], thrice["jobs"]) == (3, 3 * once["jobs"])
    assert thrice["simpy_ratio"] is None  # not replayed


def test_differential_benchmark_counts_scenarios_and_no_mismatch():
    result = _json("differential.py", "--random", "3")
    assert result["scenarios"] == result["named"] + 3 >= 20
    assert result["actions_compared"] > 0
    assert result["mismatches"] == 0


def test_surge_model_benchmark_reports_the_gain_over_a_static_split():
    result = _json("surge_model.py", "--days", "1")
    assert 0 < result["utilisation_static"] < result["utilisation_shared"] <= 1
    assert result["gain_pp"] > 0
    assert result["gpu_hours_lent"] > 0


def test_surge_engine_benchmark_runs_both_splits_through_the_engine():
    # 256 GPUs, half a day, seed 1: one surge
    result = _json("surge_engine.py", "--gpus", "256", "--days", "0.5", "--seed", "1")
    shared, static = result["shared"], result["static"]
    assert 0 < static["utilisation"] < shared["utilisation"] <= 1
    assert static["loans"] == 0  # held at its peak: it never borrows
    assert shared["loans"] > 0
    assert shared["replica_gpu_hours"] >= shared["serving_gpu_hours"] > 0
    assert shared["surge_to_serving_p99_s"] < 90


def test_agent_benchmark_reports_probe_cost_and_detection_times():
    """The embedded mesh with agents on the fake GPU driver: one XID trial and one silent
    node, not waiting for Ray's own verdict on it (about a minute)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "agent.py"),
         "--probes", "3", "--cpu-window", "2", "--trials", "1", "--no-ray-dead", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["probe_ms"] > result["probe_ms_no_gpu"] > 0
    assert result["cpu_pct"] >= 0  # a window this short may hold no probe
    assert 0 < result["xid_to_cordon_s"] < 30
    # dead after 8 s of silence counted from the last fresh probe (every 2 s)
    assert result["dead_after_s"] - 3 < result["silent_node_detect_s"] < 60
    assert result["ray_dead_s"] is None  # not waited for


@pytest.mark.parametrize("cloud", ["aws"])
def test_burst_benchmark_boots_joins_runs_and_leaks_nothing(cloud: str):
    """One burst to an emulated cloud, booted from its startup script; about 35 s here. The
    script's GCP side differs in the provider it builds alone; a burst to GCP for real is
    controller/test_burst_gcp.py's."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "burst.py"), "--trials", "1",
         "--cloud", cloud, "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    row = result[cloud]
    assert 0 < row["request_to_joined_s"] < row["request_to_running_s"]
    assert row["teardown_s"] > 0
    assert row["leaked"] == 0
    assert result["leaked"] == 0
    [other] = {"aws", "gcp"} - {cloud}
    assert other not in result  # not run
    assert result["plain_ray_start_s"] > 0
