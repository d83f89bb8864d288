"""A trace job's group (Philly's virtual cluster, ITP's cluster) as read from the trace files,
and the workload rules that make it the job's team (``ClassRules.teams_from``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshctl.sim.core import workload as wl
from meshctl.sim.run import traces

pytestmark = pytest.mark.unit

SHARED = traces.traces_dir()
needs_shared = pytest.mark.skipif(
    not (SHARED / "philly" / "philly.csv").is_file(),
    reason=f"the shared traces are not at {SHARED} (a clone without ../shared/traces)",
)


@pytest.mark.parametrize(
    ("file", "text", "groups"),
    [
        pytest.param(
            "trace.csv",
            "timestamp,duration,num_gpus,gpu_time,cluster\n"
            "2017-10-01 00:00:00,10,1,10,6214e9\n"
            "2017-10-01 00:00:05,20,2,40,11cb48\n",
            ["6214e9", "11cb48"],
            id="philly-cluster-column",
        ),
        pytest.param(
            "trace.csv",
            "timestamp,duration,num_gpus,gpu_time,cluster\n"
            "2017-10-01 00:00:00,10,1,10,\n"
            "2017-10-01 00:00:05,20,2,40, b436b2 \n",
            [None, "b436b2"],
            id="philly-empty-cluster-is-none-and-spaces-go",
        ),
        pytest.param(
            "trace.csv",
            "timestamp,duration,num_gpus\n2017-10-01 00:00:00,10,1\n",
            [None],
            id="philly-without-the-column",
        ),
        pytest.param(
            "trace.csv",
            "timestamp,duration,num_gpus,cluster\n"
            "2017-10-01 00:00:00,10,0,6214e9\n"  # no GPU: dropped, its group with it
            "2017-10-01 00:00:05,20,1,7f04ca\n",
            ["7f04ca"],
            id="philly-dropped-row-keeps-the-others-in-line",
        ),
        pytest.param(
            "cluster07.csv",
            "job_id,submission_time,duration,num_gpu\na,100,10,1\nb,50,20,8\n",
            ["cluster07", "cluster07"],
            id="itp-the-file-is-the-cluster",
        ),
    ],
)
def test_readers_give_each_job_its_group(tmp_path: Path, file, text, groups) -> None:
    path = tmp_path / file
    path.write_text(text)
    loaded = traces.load(str(path))
    assert [j.group for j in loaded] == groups


def test_an_itp_folder_gives_each_file_its_cluster(tmp_path: Path) -> None:
    (tmp_path / "cluster01.csv").write_text("job_id,submission_time,duration,num_gpu\na,10,5,1\n")
    (tmp_path / "cluster02.csv").write_text("job_id,submission_time,duration,num_gpu\nb,4,5,2\n")
    loaded = {j.name: (j.group, j.arrival_s) for j in traces.itp(tmp_path)}
    # times from the first arrival of all the files: cluster02's job came 6 s before
    assert loaded == {"cluster01:2": ("cluster01", 6.0), "cluster02:2": ("cluster02", 0.0)}


@needs_shared
@pytest.mark.parametrize(
    ("name", "groups"),
    [
        pytest.param("philly", 15, id="philly-15-virtual-clusters"),
        pytest.param("itp", 10, id="itp-10-clusters"),
        pytest.param("itp:cluster04", 1, id="itp-one-cluster"),
    ],
)
def test_named_traces_carry_their_groups(name, groups) -> None:
    loaded = traces.load(name)
    assert all(j.group for j in loaded)
    assert len({j.group for j in loaded}) == groups


@needs_shared
def test_the_philly_virtual_clusters_are_those_of_its_node_table() -> None:
    vcs = {line.split(",")[0] for line in (SHARED / "philly" / "philly_vc_nodes.csv").open()}
    seen = {j.group for j in traces.load("philly")}
    assert len(seen & vcs) == 11  # four tiny ones (23dbec, ...: 18 jobs) have no nodes listed


JOBS = [
    wl.TraceJob("j0", 0.0, 100.0, 1.0, "6214e9"),
    wl.TraceJob("j1", 10.0, 7200.0, 16.0, "11cb48"),
    wl.TraceJob("j2", 20.0, 30.0, 0.5, None),
    wl.TraceJob("j3", 30.0, 400.0, 8.0, "6214e9"),
]


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        pytest.param(wl.ClassRules(), None, id="default-draws-every-team"),
        pytest.param(
            wl.ClassRules(teams_from="group"),
            ["6214e9", "11cb48", "drawn", "6214e9"],
            id="group-where-there-is-one-else-drawn",
        ),
        pytest.param(
            wl.ClassRules(teams=("only",), teams_from="group"),
            ["6214e9", "11cb48", "only", "6214e9"],
            id="group-falls-back-to-the-rules-teams",
        ),
    ],
)
def test_team_from_the_group(rules: wl.ClassRules, expected) -> None:
    drawn = wl.classify(JOBS, seed=3)
    got = wl.classify(JOBS, seed=3, rules=rules)
    if expected is None:
        assert [j.team for j in got] == [j.team for j in drawn]
        assert all(j.team in rules.teams for j in got)
        return
    want = [d.team if e == "drawn" else e for e, d in zip(expected, drawn, strict=True)]
    assert [j.team for j in got] == want


def test_teams_from_groups_leaves_kinds_and_criticalities_as_drawn() -> None:
    jobs = [wl.TraceJob(f"j{i}", float(i), 60.0 * (1 + i % 90), float(1 + i % 8), f"g{i % 3}")
            for i in range(200)]  # fmt: skip
    drawn = wl.classify(jobs, seed=7)
    grouped = wl.classify(jobs, seed=7, rules=wl.ClassRules(teams_from="group"))
    assert [(j.kind, j.criticality) for j in grouped] == [(j.kind, j.criticality) for j in drawn]
    assert [j.team for j in grouped] == [f"g{int(j.id[1:]) % 3}" for j in grouped]
    assert {j.team for j in drawn} <= set(wl.ClassRules().teams)


def test_the_group_survives_the_transforms() -> None:
    fitted = wl.replicate(wl.scale_arrivals(wl.window(JOBS, 5.0, 1.0), 2.0), 2)
    assert [(j.name, j.group) for j in fitted] == [
        ("j1~0", "11cb48"),
        ("j1~1", "11cb48"),
        ("j2~0", None),
        ("j2~1", None),
        ("j3~0", "6214e9"),
        ("j3~1", "6214e9"),
    ]


def test_an_unknown_teams_from_is_refused() -> None:
    with pytest.raises(ValueError, match="teams_from: expected 'draw' or 'group', got 'vc'"):
        wl.ClassRules(teams_from="vc")  # type: ignore[arg-type]
