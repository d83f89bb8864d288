"""``meshctl submit`` as a request, without a server process: the flags read once (the typer
command and the submit client's reader held equal to ``meshctl.app.submitflags``), the reader's
cases, the home a command line runs in, what an API's refusal becomes, warnings in headers, and
who the caller on the home's local API socket is. (As real processes, against a served socket:
``tests/integration/test_submit_served.py``.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main

from meshctl.app import submitflags
from meshctl.app.remote import read_warning, refused, warning_header
from meshctl.cli import argv, submitclient
from meshctl.cli.app import app
from meshctl.cli.render import Output
from meshctl.errors import CommandError, InvalidRequestError
from meshctl.problems import InvalidFileError
from meshctl.server.access import charged_team
from meshctl.server.errors import ApiError
from meshctl.server.identity import LOCAL
from meshctl.server.routes.common import PEER_UID, local_caller

pytestmark = pytest.mark.unit

# --- the flags, once ---------------------------------------------------------------------------

KINDS = {"float": "float", "int": "int", "str": "str", "path": "path", "bool": "boolean",
         "output": "choice"}  # fmt: skip
"""The table's kinds, as the typer command parses them (its parameter types' names; an int
with a minimum is an ``int range``)."""


def typer_options() -> dict[str, Any]:
    command = typer.main.get_command(app)
    submit = command.commands["submit"]  # type: ignore[attr-defined]
    return {
        next(o for o in p.opts if o.startswith("--")): p
        for p in submit.params
        if type(p).__name__ == "TyperOption"
    }


def test_the_typer_command_declares_the_tables_flags_and_no_other() -> None:
    assert set(typer_options()) == set(submitflags.BY_NAME)


@pytest.mark.parametrize("flag", [*submitflags.JOB, *submitflags.HOW], ids=lambda f: f.name)
def test_each_flag_is_the_same_in_the_typer_command(flag: submitflags.Flag) -> None:
    option = typer_options()[flag.name]
    default = option.default.value if isinstance(option.default, Output) else option.default
    assert default == flag.default
    assert option.type.name.removesuffix(" range") == KINDS[flag.kind]
    assert option.is_flag is (flag.kind == "bool")
    assert getattr(option.type, "min", None) == flag.minimum
    aliases = {alias for alias, name in submitflags.ALIASES.items() if name == flag.name}
    assert set(option.opts) == {flag.name} | aliases
    if flag.kind == "output":
        assert tuple(o.value for o in Output) == submitflags.OUTPUTS
        assert option.type.case_sensitive is False


# --- the submit client's reader ---------------------------------------------------------------

READS = [
    # id, command line, (args, the values that differ from the defaults) or None: the CLI's
    pytest.param(["submit", "--gpus", "1", "--", "python", "-c", "pass"],
                 (["python", "-c", "pass"], {"gpus": 1.0}), id="a command"),
    pytest.param(["--home", "/h", "submit", "job.yaml", "--dry-run", "-o", "JSON"],
                 (["job.yaml"], {"dry-run": True, "output": "json"}), id="a file, flags after"),
    pytest.param(["--home=/h", "submit", "--nodes=2", "-oyaml", "--", "x"],
                 (["x"], {"nodes": 2, "output": "yaml"}), id="forms with ="),
    pytest.param(["submit", "--name", "a", "--name", "b", "--", "x", "--gpus", "3"],
                 (["x", "--gpus", "3"], {"name": "b"}), id="the last wins; after -- the command's"),
    pytest.param(["submit", "--working-dir", ".", "--no-data-check", "--explain", "--", "x"],
                 (["x"], {"working-dir": ".", "no-data-check": True, "explain": True}),
                 id="a folder and switches"),
    pytest.param(["submit", "--help"], None, id="help"),
    pytest.param(["submit", "-h"], None, id="short help"),
    pytest.param(["submit", "--gpu", "1", "--", "x"], None, id="an unknown flag"),
    pytest.param(["submit", "--gpus", "lots", "--", "x"], None, id="not a number"),
    pytest.param(["submit", "--nodes", "0", "--", "x"], None, id="under the least"),
    pytest.param(["submit", "--nodes", "1.5", "--", "x"], None, id="not whole"),
    pytest.param(["submit", "-o", "xml", "--", "x"], None, id="not an output"),
    pytest.param(["submit", "--dry-run=yes", "--", "x"], None, id="a switch with a value"),
    pytest.param(["submit", "--gpus"], None, id="no value"),
    pytest.param(["--mesh", "m.yaml", "submit", "--", "x"], None, id="another root option"),
    pytest.param(["--home"], None, id="no command"),
    pytest.param(["jobs", "list"], None, id="another command"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "expected"), READS)
def test_what_the_submit_client_reads(
    args: list[str], expected: tuple[list[str], dict[str, Any]] | None
) -> None:
    found = submitclient.read(args)
    if expected is None:
        assert found is None
        return
    assert found is not None
    defaults = {f.key: f.default for f in submitflags.BY_NAME.values()}
    changed = {k: v for k, v in found.values.items() if v != defaults[k]}
    assert (found.args, changed) == expected


def test_a_request_carries_the_job_flags_given_and_how(tmp_path: Path) -> None:
    found = submitclient.read(["submit", "--gpus", "1", "--team", "default", "--cpus", "2",
                               "--working-dir", str(tmp_path), "--dry-run", "--", "x"])  # fmt: skip
    assert found is not None
    body, folder = submitclient.outgoing(found.args, found.values)
    assert body == {
        "flags": {"gpus": 1.0, "cpus": 2.0, "working-dir": str(tmp_path)},  # --team: default
        "dry_run": True, "explain": False, "data_check": True, "command": ["x"],
    }  # fmt: skip
    assert folder == tmp_path.resolve()


def test_a_job_file_goes_as_its_path_and_text_with_its_working_dir(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    job = tmp_path / "job.yaml"
    job.write_text("spec:\n  working_dir: code\n")
    body, folder = submitclient.outgoing([str(job)], {**defaults(), "no-data-check": True})
    assert body["file"] == {"path": str(job), "text": job.read_text()}
    assert (body["data_check"], folder) == (False, (tmp_path / "code").resolve())
    job.write_text("spec: [not: a mapping")
    assert submitclient.outgoing([str(job)], defaults())[1] is None  # the server says why


@pytest.mark.parametrize(
    ("args", "says"),
    [(["nope.yaml"], "nope.yaml: no such job file"),
     ([], "expected JOB.yaml, or -- and a command (see --help)")],
)  # fmt: skip
def test_what_cannot_be_sent_is_the_clis_own_error(args: list[str], says: str) -> None:
    with pytest.raises(InvalidRequestError, match=re.escape(says)):
        submitclient.outgoing(args, defaults())


def defaults() -> dict[str, object]:
    return {f.key: f.default for f in submitflags.BY_NAME.values()}


def test_the_client_imports_the_standard_library_only() -> None:
    """What ``meshctl submit`` imports to read, build and send its request (the folder packed
    too): none of the CLI's frameworks, the models or the store."""
    script = (
        "import sys; from pathlib import Path; from meshctl.cli import submitclient, render\n"
        "found = submitclient.read(['submit', '--working-dir', '.', '--gpus', '1', '--', 'x'])\n"
        "body, folder = submitclient.outgoing(found.args, found.values)\n"
        "nowhere = Path('/nonexistent')\n"
        "submitclient.packed(body, folder, nowhere)\n"
        "submitclient.send(nowhere, body, None, local=True)\n"
        "render.submitted({'id': 'x', 'name': 'x', 'priority': 1, 'decision': None}, [], 'table')\n"
        "heavy = {'typer', 'rich', 'pydantic', 'yaml', 'sqlite3', 'click', 'fastapi'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m in "
        "('meshctl.model', 'meshctl.state', 'meshctl.cli.app')))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESHCTL_")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, cwd=Path(__file__).parent, check=True)  # fmt: skip
    assert done.stdout.splitlines()[-1] == "[]", done.stderr


# --- the home a command line runs in (read before the CLI is imported) --------------------------

HOMES = [
    pytest.param(["submit", "x.yaml"], {"MESHCTL_HOME": "/env"}, "/env", id="from the env"),
    pytest.param(["--home", "/h", "submit"], {"MESHCTL_HOME": "/env"}, "/h", id="option"),
    pytest.param(["--home=/h", "submit"], {}, "/h", id="option="),
    pytest.param(["--home", "/a", "--home", "/b", "submit"], {}, "/b", id="the last option"),
    pytest.param(["-m", "--home", "submit"], {"MESHCTL_HOME": "/env"}, "/env", id="a value"),
    pytest.param(["submit", "--home", "/h"], {"MESHCTL_HOME": "/env"}, "/env", id="after"),
    pytest.param(["submit"], {"MESHCTL_HOME": ""}, "~/.meshctl", id="empty env"),
    pytest.param(["submit"], {}, "~/.meshctl", id="default"),
]


@pytest.mark.parametrize(("args", "env", "expected"), HOMES)
def test_the_home_a_command_line_runs_in(args: list[str], env: dict[str, str], expected: str):
    assert argv.home(args, env) == Path(expected).expanduser()


# --- answers ------------------------------------------------------------------------------------

FILE_PROBLEMS = {"error": "a.yaml:1: spec: missing", "problems": [
    {"file": "a.yaml", "line": 1, "field": "spec", "message": "missing"},
    {"file": "a.yaml", "line": None, "field": None, "message": "bad"}]}  # fmt: skip
REFUSALS = [
    # id, status, answer, where, the error's type, its message
    pytest.param(422, FILE_PROBLEMS, None, InvalidFileError,
                 "a.yaml:1: spec: missing\na.yaml: bad", id="a job file's problems"),
    pytest.param(422, {"error": "--gpus: expected"}, "server s", InvalidRequestError,
                 "--gpus: expected", id="a flag"),
    pytest.param(401, {"error": "no token"}, "server s", InvalidRequestError, "server s: no token",
                 id="unauthorised"),
    pytest.param(403, {"error": "not yours"}, "server s", InvalidRequestError, "not yours",
                 id="forbidden"),
    pytest.param(503, {"error": "pool down"}, None, CommandError, "pool down",
                 id="the world failed, said as in process"),
    pytest.param(500, "not json", "server s", CommandError, "server s: HTTP 500: HTTP 500",
                 id="a failing server"),
]  # fmt: skip


@pytest.mark.parametrize(("status", "said", "where", "kind", "message"), REFUSALS)
def test_what_an_apis_refusal_becomes(
    status: int, said: Any, where: str | None, kind: type[Exception], message: str
) -> None:
    found = refused(status, said, where)
    assert type(found) is kind
    assert str(found) == message


@pytest.mark.parametrize("line", ["plain", 'with "quotes" and \\ a backslash', "ünïcode → ok"])
def test_a_warning_travels_in_a_header_and_back(line: str) -> None:
    header = warning_header(line)
    assert header.isascii()
    assert header.startswith("299 - ")
    assert read_warning(header) == line
    assert read_warning('299 other "theirs"') == "theirs"
    assert read_warning("not quoted") == "not quoted"


# --- the caller on the local socket -------------------------------------------------------------


def test_the_homes_owner_on_the_socket_is_the_local_admin_and_no_one_else() -> None:
    owner = os.getuid()
    assert local_caller({"extensions": {PEER_UID: owner}}, owner) is LOCAL
    with pytest.raises(ApiError) as other:
        local_caller({"extensions": {PEER_UID: owner + 1}}, owner)
    assert other.value.status == 403
    assert f"uid {owner + 1} is not this home's owner" in other.value.message
    with pytest.raises(ApiError) as unknown:
        local_caller({}, owner)
    assert unknown.value.status == 401


@pytest.mark.parametrize(("asked", "charged"), [("search", "search"), (None, None)])
def test_the_local_admin_charges_the_team_asked_for_or_the_jobs_default(
    asked: str | None, charged: str | None
) -> None:
    assert charged_team(LOCAL, asked) == charged
