"""``meshctl train``: bad input is one line with exit 2 and nothing queued; a good request is
queued as a train job with its scaling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from meshctl.cli.app import app

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["model"], "MODULE:FUNCTION: expected module:function, e.g. model:train_loop"),
        (["m:f", "--workers", "3", "--workers-per-node", "2"],
         "--workers: expected a multiple of --workers-per-node 2, got 3"),
        (["m:f", "--config", "steps"], "--config: expected KEY=VALUE, got 'steps'"),
        (["m:f", "--hang-timeout", "soon"], "--hang-timeout:"),
        (["m:f", "--memory-per-worker", "lots"], "--memory-per-worker:"),
        (["missing.yaml"], "missing.yaml: no such job file"),
    ],
    ids=["not module:function", "workers do not split", "config without =",
         "bad hang timeout", "bad memory", "no such file"],
)  # fmt: skip
def test_bad_requests_are_one_line_with_exit_2(
    cli, tmp_path: Path, args: list[str], message: str
) -> None:
    result = cli.invoke(app, ["--home", str(tmp_path / "home"), "train", *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "home" / "state.db").exists()  # nothing queued


def test_a_job_file_without_a_train_section_is_refused(cli, tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "apiVersion: meshctl/v1\nkind: Job\nmetadata: {name: j}\n"
        "spec: {kind: batch, entrypoint: python x.py}\n"
    )
    result = cli.invoke(app, ["--home", str(tmp_path / "home"), "train", str(job)])
    assert result.exit_code == 2
    assert "spec.train: expected a train section" in result.stderr


def test_a_loop_is_queued_as_a_train_job_with_its_scaling(cli, tmp_path: Path) -> None:
    from meshctl.state import JobRecord, open_store

    home = tmp_path / "home"
    (tmp_path / "model.py").write_text("def train_loop(config):\n    pass\n")
    args = ["--home", str(home), "train", "model:train_loop", "--workers", "4",
            "--working-dir", str(tmp_path),
            "--workers-per-node", "2", "--gpus-per-worker", "1", "--config", "steps=50",
            "--config", "tag=x", "--no-follow", "-o", "json"]  # fmt: skip
    result = cli.invoke(app, args)
    assert result.exit_code == 0, result.output
    job_id = json.loads(result.stdout)["id"]
    with open_store(home) as store:
        record = store.get(JobRecord, job_id)
    assert record is not None
    spec = record.spec["spec"]
    assert spec["kind"] == "train"
    assert spec["resources"]["nodes"] == 2
    assert spec["resources"]["gpus"] == 2
    assert spec["train"]["loop"] == "model:train_loop"
    assert spec["train"]["config"] == {"steps": 50, "tag": "x"}


@pytest.mark.parametrize(
    ("state", "exit_code"),
    [("succeeded", None), ("failed", 1)],
    ids=["succeeded: exit 0", "failed: exit 1"],
)
def test_following_prints_the_events_until_the_job_ends(
    capsys: pytest.CaptureFixture[str], state: str, exit_code: int | None
) -> None:
    import contextlib

    from meshctl.cli.train_cmd import _follow
    from meshctl.errors import CommandError
    from meshctl.state import Event, JobRecord, JobState, MemoryStore

    store = MemoryStore()
    store.create(JobRecord("t-1", "t", "default", JobState(state), 0, {}, None, 1.0, 2.0))
    store.append_event(Event(1.0, "job.admitted", "t-1", "placed on n-0"))
    store.append_event(Event(2.0, f"job.{state}", "t-1", "the end"))

    class Context:
        @contextlib.contextmanager
        def store(self):  # type: ignore[no-untyped-def]
            yield store

    if exit_code is None:
        _follow(Context(), "t-1", timeout=5)
    else:
        with pytest.raises(CommandError, match="t-1 failed") as raised:
            _follow(Context(), "t-1", timeout=5)
        assert raised.value.exit_code == exit_code
    out = capsys.readouterr().out
    assert "job.admitted: placed on n-0" in out
    assert f"job.{state}: the end" in out


@pytest.mark.parametrize(("state", "exit_code"), [("succeeded", None), ("failed", 1)])
def test_following_through_the_server_prints_each_event_once_until_the_job_ends(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    state: str,
    exit_code: int | None,
) -> None:
    from meshctl.cli import train_cmd
    from meshctl.errors import CommandError

    monkeypatch.setattr(train_cmd.time, "sleep", lambda _: None)
    admitted = {"occurred_at": "2026-12-01T14:04:50Z", "kind": "job.admitted", "message": "n-0"}
    ended = {"occurred_at": "2026-12-01T14:05:00Z", "kind": f"job.{state}", "message": "end"}
    shown = iter([
        {"state": "pending", "events": []},
        {"state": "running", "events": [admitted]},
        {"state": "running", "events": [admitted]},
        {"state": state, "events": [admitted, ended]},
    ])  # fmt: skip

    class Remote:
        def call(self, method: str, path: str) -> dict[str, object]:
            assert (method, path) == ("GET", "/v1/jobs/t-1")
            return next(shown)

    if exit_code is None:
        train_cmd._follow_remote(Remote(), "t-1", timeout=60, quiet=False)
    else:
        with pytest.raises(CommandError, match="t-1 failed") as raised:
            train_cmd._follow_remote(Remote(), "t-1", timeout=60, quiet=False)
        assert raised.value.exit_code == exit_code
    out = capsys.readouterr().out.splitlines()
    assert [line.split(" ", 1)[1] for line in out] == ["job.admitted: n-0", f"job.{state}: end"]


LOOPS = [
    pytest.param("absent:loop", "", "cannot import absent: ModuleNotFoundError: No module named "
                 "'absent'", id="no such module in the working directory"),
    pytest.param("model:loop", "import no_such_package\n", "cannot import model: "
                 "ModuleNotFoundError: No module named 'no_such_package'",
                 id="the module's own import fails"),
    pytest.param("model:loop", "def other():\n    pass\n", "module model has no loop",
                 id="no such function"),
    pytest.param("model:loop", "loop = 3\n", "model.loop is not callable", id="not callable"),
    pytest.param("model:loop", "raise SystemExit('no GPU here')\n",
                 "cannot import model: SystemExit: no GPU here", id="the module exits"),
]  # fmt: skip


@pytest.mark.parametrize(("loop", "source", "why"), LOOPS)
def test_a_loop_that_does_not_import_is_refused_before_queueing(
    cli, tmp_path: Path, loop: str, source: str, why: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    if source:
        (work / "model.py").write_text(source)
    home = tmp_path / "home"
    result = cli.invoke(
        app, ["--home", str(home), "train", loop, "--working-dir", str(work), "--no-follow"]
    )
    assert (result.exit_code, result.stderr) == (2, f"error: train.loop: {loop} in {work}: {why}\n")
    assert not (home / "state.db").exists()  # nothing queued


def test_a_train_job_file_s_loop_is_checked_in_its_working_directory(cli, tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "apiVersion: meshctl/v1\nkind: Job\nmetadata: {name: j}\n"
        "spec: {kind: train, working_dir: code, train: {loop: 'model:fit'}}\n"
    )
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "model.py").write_text("def fit():\n    pass\n")
    home = str(tmp_path / "home")
    assert cli.invoke(app, ["--home", home, "submit", str(job), "--dry-run"]).exit_code == 0
    (tmp_path / "code" / "model.py").write_text("def other():\n    pass\n")
    refused = cli.invoke(app, ["--home", home, "submit", str(job)])
    assert refused.exit_code == 2
    assert refused.stderr.endswith("module model has no fit\n")


def test_a_loop_that_imports_too_slowly_is_queued_with_a_warning(tmp_path: Path) -> None:
    from meshctl.app.admission import check_loop
    from meshctl.model import Job

    (tmp_path / "slow.py").write_text("import time\ntime.sleep(30)\n")
    job = Job.model_validate(
        {"metadata": {"name": "j"}, "spec": {"kind": "train", "train": {"loop": "slow:f"}}}
    )
    warned: list[str] = []
    assert check_loop(job, tmp_path, warned.extend, timeout_s=0.5) is job
    assert warned == ["train.loop: slow:f did not import within 0.5 s; not checked"]


def test_the_defaults_fit_a_node_of_the_scaffold(cli, tmp_path: Path) -> None:
    """A train job with no sizing flags asks for a GPU per worker and fits, four workers to a
    node, on each GPU node of the mesh ``meshctl init`` writes (4 GPUs, 1 CPU, 2 GiB)."""
    import yaml

    from meshctl.files.shipped import data_dir
    from meshctl.model import Mesh
    from meshctl.state import JobRecord, open_store

    home = tmp_path / "home"
    (tmp_path / "model.py").write_text("def train_loop(config):\n    pass\n")
    args = ["--home", str(home), "train", "model:train_loop", "--workers-per-node", "4",
            "--workers", "4", "--working-dir", str(tmp_path),
            "--no-follow", "-o", "json"]  # fmt: skip
    result = cli.invoke(app, args)
    assert result.exit_code == 0, result.output
    with open_store(home) as store:
        record = store.get(JobRecord, json.loads(result.stdout)["id"])
    assert record is not None
    asked = record.spec["spec"]["resources"]
    assert asked["gpus"] == 4
    mesh = Mesh.model_validate(yaml.safe_load((data_dir("examples") / "mesh.yaml").read_text()))
    groups = [g for p in mesh.spec.pools for g in getattr(p, "nodes", []) if g.gpus >= 4]
    assert groups
    for group in groups:
        assert asked["cpus"] <= group.cpus, group.name
        assert asked["memory_gib"] <= group.memory_gib, group.name
