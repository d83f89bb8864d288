"""What the command line does to start quickly: typer builds only the command a command line
runs, modules meshctl never uses are imported on first use, and a home where no controller
ever ran is not asked about one. (How long it takes: benchmarks/cli_startup.py; what a real
process imports: tests/integration/test_cli_process.py.)"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer.main

from meshctl.app.context import AppContext
from meshctl.cli import deferred
from meshctl.cli.app import app, for_command
from meshctl.cli.argv import ROOT_VALUE_OPTIONS

pytestmark = pytest.mark.unit

EVERY = None  # the whole app

COMMAND_LINES = [
    pytest.param(["submit", "--gpus", "1", "--", "python", "x.py"], {"submit"}, id="a command"),
    pytest.param(["jobs", "list"], {"jobs"}, id="a group"),
    pytest.param(["--home", "/tmp/h", "submit", "x.yaml"], {"submit"}, id="an option's value"),
    pytest.param(["--home", "jobs", "submit"], {"submit"}, id="a value that is a command name"),
    pytest.param(["--mesh=m.yaml", "-mm.yaml", "-m", "m.yaml", "sim", "run"], {"sim"}, id="forms"),
    pytest.param([], EVERY, id="nothing: the help"),
    pytest.param(["--help"], EVERY, id="the root's help"),
    pytest.param(["-h", "submit"], EVERY, id="help before a command"),
    pytest.param(["--install-completion"], EVERY, id="another root option"),
    pytest.param(["jobz", "list"], EVERY, id="a mistyped command: typer suggests one"),
    pytest.param(["--home"], EVERY, id="an option without its value"),
]


def names(built: typer.Typer) -> set[str]:
    return {str(c.name) for c in built.registered_commands} | {
        str(g.name) for g in built.registered_groups
    }


@pytest.mark.parametrize(("args", "expected"), COMMAND_LINES)
def test_a_command_line_builds_only_the_command_it_runs(args: list[str], expected: set[str] | None):
    built = for_command(args)
    assert built is app if expected is None else names(built) == expected


def test_the_whole_app_is_left_as_it_is():
    before = names(app)
    assert names(for_command(["submit"])) == {"submit"}
    assert names(app) == before
    assert {"submit", "jobs", "sim"} <= before


def test_the_root_options_that_take_a_value_are_those_the_parser_skips():
    root = typer.main.get_command(app)
    takes_value = {
        name
        for param in root.params
        if not getattr(param, "is_flag", True) and not getattr(param, "is_eager", False)
        for name in param.opts
    }
    assert takes_value == ROOT_VALUE_OPTIONS


# --- a module deferred --------------------------------------------------------------------


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A package whose ``__init__`` imports a submodule ``heavy`` that counts its imports."""
    name = f"pkg_{tmp_path.name.replace('-', '_')}"
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("from . import heavy\nLIGHT = 1\n")
    (root / "heavy.py").write_text(
        "import builtins\n"
        "builtins.heavy_imports = getattr(builtins, 'heavy_imports', 0) + 1\n"
        "VALUE = 42\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]
    import builtins

    builtins.__dict__.pop("heavy_imports", None)


def test_a_deferred_submodule_is_imported_on_first_use_once(package: str):
    import builtins
    import importlib

    deferred.defer(f"{package}.heavy")
    imported = importlib.import_module(package)
    assert imported.LIGHT == 1
    assert getattr(builtins, "heavy_imports", 0) == 0
    assert imported.heavy.VALUE == 42  # the first use imports it
    assert imported.heavy.VALUE == 42
    assert builtins.heavy_imports == 1  # type: ignore[attr-defined]
    real = sys.modules[f"{package}.heavy"]  # the stand-in gave way to the module
    assert str(real.__file__).endswith("heavy.py")
    assert deferred.load(f"{package}.heavy") is real


def test_from_import_of_a_deferred_submodule_works(package: str):
    deferred.defer(f"{package}.heavy")
    namespace: dict[str, object] = {}
    exec(f"from {package}.heavy import VALUE", namespace)
    assert namespace["VALUE"] == 42


def test_probing_a_deferred_module_does_not_import_it(package: str):
    import builtins
    import importlib

    deferred.defer(f"{package}.heavy")
    importlib.import_module(package)
    stand_in = sys.modules[f"{package}.heavy"]
    assert getattr(stand_in, "__file__", None) is None
    assert getattr(builtins, "heavy_imports", 0) == 0


def test_deferring_a_module_already_imported_changes_nothing(package: str):
    import importlib

    real = importlib.import_module(f"{package}.heavy")
    deferred.defer(f"{package}.heavy")
    assert sys.modules[f"{package}.heavy"] is real


# --- a home where no controller ever ran ----------------------------------------------------


def test_a_home_never_up_has_no_controller_to_ask(tmp_path: Path):
    context = AppContext(tmp_path / "home", None, None)
    assert (context.ever_up(), context.nudge(), context.enforced()) == (False, False, None)


def test_a_home_that_was_up_is_asked(tmp_path: Path):
    (tmp_path / "home" / "run").mkdir(parents=True)
    context = AppContext(tmp_path / "home", None, None)
    assert context.ever_up()
    assert (context.nudge(), context.enforced()) == (False, None)  # none runs now


# --- which read asks the home's local API -------------------------------------------------

LOCAL_API_ASKED = [
    # id, the context's named files and store, whether its local API is asked
    pytest.param({}, True, id="nothing named: what the controller runs with"),
    pytest.param({"mesh_path": Path("m.yaml")}, False, id="a mesh of its own"),
    pytest.param({"providers_dir": Path("providers")}, False, id="catalogs of its own"),
    pytest.param({"store_url": "sqlite:///x.db"}, False, id="a store of its own"),
]  # fmt: skip


@pytest.mark.parametrize(("named", "asked"), LOCAL_API_ASKED)
def test_a_command_that_names_its_own_files_reads_them_itself(
    tmp_path: Path, named: dict[str, object], asked: bool
):
    context = AppContext(**{"home": tmp_path, "mesh_path": None, "providers_dir": None, **named})
    api = context.local_api()
    assert (api is not None) == asked
    assert api is None or api.socket == tmp_path / "run" / "api.sock"
