"""Trace loaders: the shared public traces (skipped when ../shared/traces is absent) and bad
files, which fail as one line naming the file, line and column."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshctl.problems import InvalidFileError
from meshctl.sim.run import traces

pytestmark = pytest.mark.unit

SHARED = traces.traces_dir()
needs_shared = pytest.mark.skipif(
    not (SHARED / "philly" / "philly.csv").is_file(),
    reason=f"the shared traces are not at {SHARED} (a clone without ../shared/traces)",
)


@needs_shared
@pytest.mark.parametrize(
    ("name", "jobs", "first_gpus"),
    [
        pytest.param("philly", 82_247, None, id="philly"),
        pytest.param("itp", 69_351, None, id="itp-all-clusters"),
        pytest.param("itp:cluster04", 15_802, 16.0, id="itp-one-cluster"),
        pytest.param("openb", 6_203, None, id="openb-default-pods-with-gpus"),
    ],
)
def test_named_traces_load(name, jobs, first_gpus) -> None:
    loaded = traces.load(name)
    assert len(loaded) == jobs
    assert min(j.arrival_s for j in loaded) == 0.0
    assert all(j.gpus > 0 and j.duration_s > 0 for j in loaded)
    if first_gpus is not None:
        assert min(loaded, key=lambda j: j.arrival_s).gpus == first_gpus


@needs_shared
def test_the_stepfun_preset_comes_from_the_fault_trace() -> None:
    model = traces.stepfun_failures()
    assert 200 < model.node_mtbf_s / 86_400 < 300  # about 239 days by the trace's own note
    median = sorted(model.repair_samples_s)[len(model.repair_samples_s) // 2] / 86_400
    assert 0.5 < median < 1.5  # about 0.85 days


@needs_shared
def test_a_pod_list_without_times_is_refused() -> None:
    with pytest.raises(InvalidFileError, match="without times"):
        traces.load("openb:multigpu50")


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "timestamp,duration,num_gpus\n2017-10-01 00:00:00,10,1\n2017-10-01 00:00:05,x,1\n",
            r"trace.csv:3: duration: expected a number >= 0, got 'x'",
            id="philly-bad-duration",
        ),
        pytest.param(
            "timestamp,duration,num_gpus\nyesterday,10,1\n",
            r"trace.csv:2: timestamp: expected YYYY-MM-DD HH:MM:SS, got 'yesterday'",
            id="philly-bad-timestamp",
        ),
        pytest.param(
            "job_id,submission_time,duration,num_gpu\na,0,10,\n",
            r"trace.csv:2: num_gpu: expected a number >= 0, got nothing",
            id="itp-missing-gpus",
        ),
        pytest.param("a,b\n1,2\n", r"trace.csv:1: header: expected the columns", id="unknown"),
    ],
)
def test_a_bad_trace_file_is_one_line_naming_where(tmp_path, text, expected) -> None:
    with pytest.raises(InvalidFileError, match=expected):
        traces.load(write(tmp_path, text))


def test_a_csv_trace_is_read_by_its_header(tmp_path) -> None:
    text = "job_id,submission_time,duration,num_gpu\na,100,10,2\nb,160,0,1\nc,130,5,0\na,150,9,1\n"
    loaded = traces.load(write(tmp_path, text))
    # no GPU or no duration: dropped; a job id seen twice is two jobs (named by line)
    assert [(j.name, j.arrival_s, j.gpus) for j in loaded] == [
        ("trace:2", 0.0, 2.0),
        ("trace:5", 50.0, 1.0),
    ]


def test_a_file_that_is_not_text_is_one_line(tmp_path) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(b"job_id,submission_time,duration,num_gpu\n\xff\xfe,1,2,3\n")
    with pytest.raises(InvalidFileError, match="not a readable CSV file"):
        traces.load(str(path))


def test_an_unknown_name_says_what_is_expected() -> None:
    with pytest.raises(InvalidFileError, match="expected a trace name"):
        traces.load("no-such-trace")
