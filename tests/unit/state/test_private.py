"""The state folder is private whatever the umask: folders 0700, files 0600.

Each test runs under a loose umask (002: group-writable, world-readable), creates state the
way meshctl does (store, submit with a working directory, a controller cycle with its
heartbeat and log copies, run files, health signals), then walks the home. The same walk runs
after a real ``meshctl up`` in tests/integration/controller/test_local_mesh.py.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshctl.cli.app import app
from meshctl.pools import local
from meshctl.pools.health import set_signal
from meshctl.state import open_store
from meshctl.state.private import private_dir, private_home, write_private

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def loose_umask() -> Iterator[None]:
    old = os.umask(0o002)
    try:
        yield
    finally:
        os.umask(old)


def modes(root: Path) -> dict[str, int]:
    """Every path under ``root`` (and root) -> its permission bits."""
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            path = Path(folder) / name
            found[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def assert_private(root: Path, runnable: frozenset[str] = frozenset()) -> None:
    for name, mode in modes(root).items():
        path = root / name
        expected = 0o700 if path.is_dir() or name in runnable else 0o600
        assert mode == expected, f"{name}: {mode:o}, expected {expected:o}"


def test_the_store_is_private(tmp_path: Path) -> None:
    home = tmp_path / "a" / "home"  # missing parents too
    with open_store(home) as store:
        store.decisions()  # the WAL files exist while it is open
        assert {"state.db", "state.db-wal", "state.db-shm"} <= set(modes(home))
        assert_private(home)
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700


def test_an_older_looser_home_is_tightened_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home = tmp_path / "home"
    (home / "run").mkdir(parents=True, mode=0o755)
    home.chmod(0o755)
    (home / "state.db").touch(mode=0o644)
    (home / "state.db").chmod(0o644)
    with caplog.at_level(logging.WARNING, "meshctl.state"), open_store(home):
        pass
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "state.db").stat().st_mode) == 0o600
    assert f"{home} was mode 755; made it 700" in caplog.text


@pytest.mark.parametrize(
    ("setup", "kept"),
    [
        pytest.param(lambda p: p.chmod(0o1777), 0o1777, id="a shared folder (sticky, like /tmp)"),
        pytest.param(lambda p: (p / "notes.txt").touch(), 0o755, id="a folder of other things"),
    ],
)
def test_a_home_that_is_not_meshctl_s_alone_keeps_its_modes(
    tmp_path: Path, setup: object, kept: int
) -> None:
    home = tmp_path / "shared"
    home.mkdir()
    home.chmod(0o755)
    setup(home)  # type: ignore[operator]
    private_home(home)
    assert stat.S_IMODE(home.stat().st_mode) == kept


def test_submit_copies_the_working_directory_privately(cli: CliRunner, tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "src" / "train.py").write_text("print('x')\n")
    (work / "run.sh").write_text("#!/bin/sh\n")
    (work / "run.sh").chmod(0o775)
    result = cli.invoke(app, ["submit", "--working-dir", str(work), "--", "python", "src/train.py"])
    assert result.exit_code == 0, result.output
    home = tmp_path / "home"
    [package] = (home / "packages").iterdir()
    runnable = frozenset({f"packages/{package.name}/run.sh"})
    assert_private(home, runnable)


def test_run_files_tokens_and_health_signals_are_private(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run = home / "run"
    private_home(home)
    token = run / "pool-p.token"
    private_dir(run)
    write_private(token, "secret")
    cluster = local.LocalCluster("p", "http://x", "x", str(token), str(tmp_path / "ray"), str(run))
    cluster.save(local.run_file(run, "p"))
    set_signal(home, "p", "n1", "GPU XID 79")
    assert_private(home)


def test_a_controller_cycle_writes_privately(tmp_path: Path) -> None:
    from meshctl.controller.deciding.decide import Rules
    from meshctl.controller.logs import LogCopier
    from meshctl.controller.loop import Controller
    from meshctl.state import MemoryStore
    from tests.unit.controller.test_decide import MESH
    from tests.unit.controller.test_loop import Clock, FakePool, queue

    home = tmp_path / "home"
    private_home(home)
    (home / "run").mkdir(mode=0o700)
    store, pool = MemoryStore(), FakePool()
    loop = Controller(store, Rules(MESH, {}, None), {"onprem": pool}, clock=Clock(),
                      heartbeat=home / "run" / "controller.heartbeat",
                      logs=LogCopier(home))  # fmt: skip
    record = queue(store)
    loop.cycle()
    pool.logs[f"meshctl-{record.id}-1"] = b"hello\n"
    loop.cycle()
    assert "controller.heartbeat" in os.listdir(home / "run")
    assert (home / "logs" / record.id / "1.log").is_file()
    assert_private(home)
