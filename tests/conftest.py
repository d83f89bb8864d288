"""Shared fixtures: paths to the project's own data, a CLI runner, a throwaway Postgres server
(``postgres``, ``pg_url``), and helpers for tests that wait on a real process (``wait_until``)
or need a port nothing listens on (``closed_port``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pgserver import PgServer, pg_server
from typer.testing import CliRunner

from meshctl.host.ports import free_port

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
PROVIDERS = ROOT / "providers"


@pytest.fixture(scope="session", autouse=True)
def _file_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The checked-files cache (``meshctl.files.cache``) of this run's own, also for the commands
    and controllers the tests start: never the user's ~/.cache."""
    os.environ["MESHCTL_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))


def onprem_policies(folder: Path) -> Path:
    """The shipped policies copied to ``folder``, less what names the shipped mesh's cloud pools
    (the budgets of aws and gcp, the pool preference): policies naming a pool or provider a
    mesh does not have are refused, and many tests run a mesh of on-prem pools only."""
    import shutil

    shutil.copytree(ROOT / "policies", folder)
    (folder / "budgets.yaml").unlink()
    preference = folder / "onprem-first.yaml"
    text = preference.read_text()
    assert "[onprem, gcp-burst, aws-burst]" in text
    preference.write_text(text.replace("[onprem, gcp-burst, aws-burst]", "[]"))
    return folder


def wait_until(
    what: str | Callable[[], str],
    ready: Callable[[], T],
    timeout_s: float = 60.0,
    every_s: float = 0.2,
) -> T:
    """Poll ``ready()`` every ``every_s`` until it returns something true, and return that;
    past ``timeout_s`` fail with ``what`` (a callable: worded at the moment it fails, e.g. with
    a log). A generous deadline, never a fixed sleep: the machine may be loaded."""
    deadline = time.monotonic() + timeout_s
    while not (found := ready()):
        assert time.monotonic() < deadline, what() if callable(what) else what
        time.sleep(every_s)
    return found


def closed_port() -> int:
    """A loopback port nothing listens on, nor will for a while (``meshctl.host.ports`` leases it):
    a dashboard that does not answer."""
    return free_port()


@pytest.fixture(scope="session")
def postgres() -> Iterator[PgServer]:
    """A throwaway Postgres server (``pgserver.py``), started once for the run when a test
    asks for it; it fails, never skips, where the Postgres binaries are missing."""
    with pg_server() as server:
        yield server


@pytest.fixture(scope="session")
def _pg_shared(postgres: PgServer) -> str:
    return postgres.database()


@pytest.fixture
def pg_url(postgres: PgServer, _pg_shared: str) -> str:
    """The URL (with its password) of an empty database on the throwaway server: one database
    for the run, emptied before each test (quicker than a new one each time)."""
    return postgres.clean(_pg_shared)


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """A runner whose state home is a temporary directory (never the user's ~/.meshctl)."""
    monkeypatch.setenv("MESHCTL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MESHCTL_PROVIDERS", raising=False)
    return CliRunner()


TIERS = ("unit", "integration", "e2e")
BUDGET_S = 60.0  # a test's budget (docs/TESTING.md); the summary names what took longer


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test belongs to exactly one tier, so `make unit` and `make integration` see all."""
    for item in items:
        tiers = [t for t in TIERS if item.get_closest_marker(t)]
        if len(tiers) != 1:
            raise pytest.UsageError(
                f"{item.nodeid}: expected one tier marker of {TIERS}, got {tiers}"
            )


# Modules whose tests run whole benchmarks, each starting meshes or clusters of its own: one
# group, on one worker, one at a time, so that two never start their clusters at once beside
# the other worker's mesh (a Ray node then took over 90 s to come up).
BENCHMARKS = "benchmark runs"
BENCHMARK_MODULES = frozenset(
    {"tests/integration/test_benchmarks_run.py", "tests/integration/serve/test_surge.py"}
)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` (what the Makefile runs): the tests of a module outside tests/unit
    stay on one worker, in order, since they share what the module starts (a mesh, a
    server) and some walk a story step by step; the benchmark runs form one group; every
    other test goes to whichever worker is free. (pytest-xdist's own loadgroup groups by
    ``xdist_group`` marks, which it writes into node ids that pytest 9 no longer reads
    back: every test went anywhere.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroups(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            if module in BENCHMARK_MODULES:
                return BENCHMARKS
            return nodeid if module.startswith("tests/unit/") else module

    return ModuleGroups(config, log)


_over_budget: list[tuple[float, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each phase of a test (set-up, call, teardown) over ``BUDGET_S`` is named at the end; a
    module's shared set-up (a mesh) counts in its first test's set-up."""
    if report.duration > BUDGET_S:
        _over_budget.append((report.duration, f"{report.nodeid} ({report.when})"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _over_budget:
        terminalreporter.section(f"over the {BUDGET_S:.0f} s budget of a test (docs/TESTING.md)")
        for duration, what in sorted(_over_budget, reverse=True):
            terminalreporter.write_line(f"{duration:7.1f} s  {what}")
