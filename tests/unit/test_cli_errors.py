"""Errors, warnings and exit codes as an API: one clean line per flag error, ``warning:``
never ``error:`` with exit 0, and under ``-o json|yaml`` one JSON error document on stderr."""

from __future__ import annotations

import json
import re

import pytest
import typer
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from meshctl.app.submitting import name_of as _name_of
from meshctl.cli.app import app
from meshctl.cli.errors import MeshGroup, _expected, requested_output
from meshctl.clouds.base import Unavailable
from meshctl.controller.submit import Rejected, new_job_id
from meshctl.errors import EXIT_TIMEOUT, CommandError, Failure, InvalidRequestError, MeshctlError
from meshctl.model.base import NAME_PATTERN
from meshctl.pools.local import LocalPoolError
from meshctl.pools.ray import PoolError
from meshctl.problems import InvalidFileError, Problem
from meshctl.state.store import ConflictError, NotFoundError, StoreError
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.unit

RUN = ["--", "python", "x.py"]

FLAG_ERRORS = [
    pytest.param(
        ["submit", "--memory", "5XB", *RUN],
        "--memory: expected a memory size such as 80GiB or 512MiB, got unknown unit 'xb' in '5XB'",
        id="submit --memory with an unknown unit",
    ),
    pytest.param(
        ["submit", "--gpus", "99", *RUN],
        "--gpus: expected GPUs per node of at most 64, got 99",
        id="submit --gpus over the bound",
    ),
    pytest.param(
        ["submit", "--gpus", "1.5", *RUN],
        "--gpus: expected a whole number of GPUs or a fraction of one GPU (0 < x < 1), "
        "such as 8 or 0.25, got 1.5",
        id="submit --gpus neither whole nor a fraction",
    ),
    pytest.param(
        ["submit", "--kind", "nap", *RUN],
        "--kind: expected 'train', 'inference', 'batch' or 'interactive', got 'nap'",
        id="submit --kind unknown",
    ),
    pytest.param(
        ["submit", "--team", "Search", *RUN],
        "--team: expected a name of lower-case letters, digits and '-' (at most 63 "
        "characters), got 'Search'",
        id="submit --team not a name",
    ),
    pytest.param(
        ["submit", "--gpus", "0.5", "--nodes", "2", *RUN],
        "--gpus/--nodes: a fraction of a GPU is for single-node jobs; use whole GPUs",
        id="submit a fraction for a gang (no value echoed for a whole section)",
    ),
    pytest.param(
        ["train", "--memory-per-worker", "3XB", "m:f"],
        "--memory-per-worker: expected a memory size such as 80GiB or 512MiB, "
        "got unknown unit 'xb' in '3XB'",
        id="train --memory-per-worker",
    ),
    pytest.param(
        ["train", "--checkpoint-interval", "soon", "m:f"],
        "--checkpoint-interval: expected a duration such as 30s, 10m or 2h, got 'soon'",
        id="train --checkpoint-interval (a union: no branch names in the flag)",
    ),
    pytest.param(
        ["train", "--timeout", "soon", "m:f"],
        "--timeout: expected a duration such as 30s, 10m or 2h, got 'soon'",
        id="train --timeout",
    ),
    pytest.param(
        ["jobs", "wait", "j", "--timeout", "-5"],
        "--timeout: expected a duration such as 30s, 10m or 2h, got a negative quantity -5",
        id="jobs wait --timeout negative",
    ),
    pytest.param(
        ["sim", "run", "--trace", "synthetic", "--cycle", "soon"],
        "--cycle: expected a duration such as 30s, 10m or 2h, got 'soon'",
        id="sim run --cycle",
    ),
    pytest.param(
        ["sim", "run", "--trace", "synthetic", "--restart=-1"],
        "--restart: expected a duration such as 30s, 10m or 2h, got a negative quantity -1",
        id="sim run --restart",
    ),
    pytest.param(
        ["nodes", "drain", "n", "--deadline", "10 parsecs"],
        "--deadline: expected a duration such as 30s, 10m or 2h, got unknown unit 'parsecs' "
        "in '10 parsecs'",
        id="nodes drain --deadline",
    ),
]


USAGE_ERRORS = [
    pytest.param(
        ["submit", "--gpus", "x9", *RUN],
        "--gpus: expected a number, got 'x9' (meshctl submit --help)",
        id="a float flag given text",
    ),
    pytest.param(
        ["submit", "--nodes", "0", *RUN],
        "--nodes: expected 1 or more, got 0 (meshctl submit --help)",
        id="a flag under its minimum",
    ),
    pytest.param(
        ["jobs", "list", "--limit", "x"],
        "--limit: expected a whole number, got 'x' (meshctl jobs list --help)",
        id="an int flag given text",
    ),
    pytest.param(
        ["jobs", "list", "-o", "xml"],
        "--output: 'xml' is not one of 'table', 'json', 'yaml' (meshctl jobs list --help)",
        id="an output that is not one",
    ),
    pytest.param(
        ["jobs", "wait"], "Missing argument 'jobs' (meshctl jobs wait --help)", id="no argument"
    ),
    pytest.param(
        ["jobs", "list", "--bogus"],
        "No such option: --bogus (meshctl jobs list --help)",
        id="an unknown option",
    ),
    pytest.param(
        ["nope"], "No such command 'nope'. Did you mean 'nodes'? (meshctl --help)", id="command"
    ),
]


@pytest.mark.parametrize(("args", "line"), USAGE_ERRORS)
def test_a_usage_error_is_one_line_too(cli: CliRunner, args: list[str], line: str) -> None:
    result = cli.invoke(app, args)
    assert (result.exit_code, result.stderr) == (2, f"error: {line}\n")


@pytest.mark.parametrize(("args", "line"), FLAG_ERRORS)
def test_a_flag_error_is_one_clean_line(cli: CliRunner, args: list[str], line: str) -> None:
    result = cli.invoke(app, args)
    assert (result.exit_code, result.stderr) == (2, f"error: {line}\n")
    assert "Value error" not in result.stderr
    assert len(re.findall(r"\bgot\b", result.stderr)) <= 1


def raising(err: Exception) -> typer.Typer:
    """A root group like meshctl's whose one command, ``go``, raises ``err``."""
    root = typer.Typer(cls=MeshGroup)

    @root.callback()
    def main() -> None:
        """A callback, so that ``go`` is a command of the group and not the app itself."""

    @root.command()
    def go() -> None:
        raise err

    return root


ERRORS = [
    pytest.param(
        InvalidFileError(
            [
                Problem("job.yaml", 3, "metadata.name", "expected a name, got 'Bad'"),
                Problem("job.yaml", None, "", "cannot be read"),
            ]
        ),
        2,
        "error: job.yaml:3: metadata.name: expected a name, got 'Bad'\n"
        "error: job.yaml: cannot be read\n",
        id="InvalidFileError: exit 2, one line per problem",
    ),
    pytest.param(
        InvalidRequestError("--state: expected one of queued, running, got 'x'"),
        2,
        "error: --state: expected one of queued, running, got 'x'\n",
        id="InvalidRequestError: exit 2",
    ),
    pytest.param(
        Rejected("job big can never run on this mesh: no node has 64 GPUs"),
        2,
        "error: job big can never run on this mesh: no node has 64 GPUs\n",
        id="controller Rejected: exit 2",
    ),
    pytest.param(
        CommandError("1 of 1 did not succeed: j-1 cancelled"),
        1,
        "error: 1 of 1 did not succeed: j-1 cancelled\n",
        id="CommandError: exit 1",
    ),
    pytest.param(
        CommandError("timed out after 5 s: j-1 running", exit_code=EXIT_TIMEOUT),
        124,
        "error: timed out after 5 s: j-1 running\n",
        id="CommandError with the code it carries: 124",
    ),
    pytest.param(
        StoreError("the state store is closed"),
        1,
        "error: the state store is closed\n",
        id="state StoreError: exit 1",
    ),
    pytest.param(
        ConflictError("job", "j-1", expected=1, actual=2),
        1,
        "error: job 'j-1' changed concurrently: expected version 1, found version 2\n",
        id="state ConflictError: exit 1",
    ),
    pytest.param(
        NotFoundError("job", "j-1"), 1, "error: job 'j-1' not found\n", id="state NotFoundError"
    ),
    pytest.param(
        PoolError("dashboard at http://127.0.0.1:8265 does not answer: refused"),
        1,
        "error: dashboard at http://127.0.0.1:8265 does not answer: refused\n",
        id="pools PoolError: exit 1",
    ),
    pytest.param(
        LocalPoolError("the head did not start within 90 s"),
        1,
        "error: the head did not start within 90 s\n",
        id="pools LocalPoolError: exit 1",
    ),
    pytest.param(
        Unavailable("no credentials"), 1, "error: no credentials\n", id="clouds Unavailable"
    ),
    pytest.param(PoolError(""), 1, "error: PoolError\n", id="a failure without a message"),
    pytest.param(
        FileNotFoundError(2, "No such file or directory", "mesh.yaml"),
        1,
        "error: [Errno 2] No such file or directory: 'mesh.yaml'\n",
        id="an OSError: exit 1",
    ),
    pytest.param(
        OSError("disk full\nwhile writing state.db"),
        1,
        "error: disk full\n",
        id="an OSError's first line only",
    ),
]


@pytest.mark.parametrize(("err", "code", "stderr"), ERRORS)
def test_each_kind_of_error_has_its_exit_code_and_line(
    cli: CliRunner, err: Exception, code: int, stderr: str
) -> None:
    result = cli.invoke(raising(err), ["go"])
    assert (result.exit_code, result.stdout, result.stderr) == (code, "", stderr)


class OutsideError(Failure):
    """A failure raised outside meshctl.state and meshctl.pools."""


def test_a_failure_is_known_by_its_class_not_its_module(cli: CliRunner) -> None:
    assert not OutsideError.__module__.startswith(("meshctl.state", "meshctl.pools"))
    result = cli.invoke(raising(OutsideError("the controller did not answer")), ["go"])
    assert (result.exit_code, result.stderr) == (1, "error: the controller did not answer\n")
    assert "Traceback" not in result.stderr


BUGS = [
    pytest.param(ValueError("a bug"), id="a ValueError"),
    pytest.param(
        type("StrayError", (Exception,), {"__module__": "meshctl.state.sqlite_dialect"})("a bug"),
        id="an Error class in meshctl.state that is not a Failure",
    ),
    pytest.param(MeshctlError("raise a subclass"), id="MeshctlError itself"),
]


@pytest.mark.parametrize("err", BUGS)
def test_any_other_error_is_a_bug_and_still_raises(cli: CliRunner, err: Exception) -> None:
    result = cli.invoke(raising(err), ["go"])
    assert result.exception is err
    assert result.stderr == ""


def test_a_warning_is_a_warning_and_exits_0(cli: CliRunner) -> None:
    result = cli.invoke(app, ["submit", "--gpus", "1", *RUN])
    assert result.exit_code == 0
    job_id = result.stdout.strip()
    assert (
        result.stderr == f"warning: {job_id} is queued, but no controller is running: meshctl up\n"
    )
    as_data = cli.invoke(app, ["submit", "--gpus", "1", "-o", "json", *RUN])
    assert as_data.exit_code == 0
    queued = json.loads(as_data.stdout)
    assert json.loads(as_data.stderr) == {
        "warning": {
            "message": f"{queued['id']} is queued, but no controller is running: meshctl up"
        }
    }


def error_document(stderr: str) -> dict[str, object]:
    """The one JSON error document a failing command writes (stderr's last line; the lines
    before, if any, are JSON warnings)."""
    lines = stderr.strip().splitlines()
    assert [json.loads(line) for line in lines[:-1]] == [
        json.loads(line) for line in lines[:-1] if "warning" in json.loads(line)
    ]
    document = json.loads(lines[-1])
    assert set(document) == {"error"}
    assert set(document["error"]) == {"exit_code", "message", "problems"}
    return document["error"]  # type: ignore[no-any-return]


def test_an_invalid_file_under_json_is_one_document_with_located_problems(
    cli: CliRunner, tmp_path
) -> None:
    bad = tmp_path / "job.yaml"
    bad.write_text(
        "apiVersion: meshctl/v1\nkind: Job\nmetadata: {name: Bad}\nspec:\n  kind: nap\n"
        "  entrypoint: x\n"
    )
    result = cli.invoke(app, ["validate", str(bad), "-o", "json"])
    assert (result.exit_code, result.stdout) == (2, "")
    error = error_document(result.stderr)
    assert error["exit_code"] == 2
    assert error["problems"] == [
        {
            "file": str(bad),
            "line": 3,
            "field": "metadata.name",
            "message": "expected a name of lower-case letters, digits and '-' (at most 63 "
            "characters), got 'Bad'",
        },
        {
            "file": str(bad),
            "line": 5,
            "field": "spec.kind",
            "message": "expected 'train', 'inference', 'batch' or 'interactive', got 'nap'",
        },
    ]
    assert error["message"] == f"{bad}:3: metadata.name: " + str(
        error["problems"][0]["message"]  # type: ignore[index]
    )


JSON_FAILURES = [
    pytest.param(
        ["submit", "--memory", "5XB", "-o", "json", *RUN],
        2,
        {"file": None, "line": None, "field": "--memory"},
        id="a flag of ours",
    ),
    pytest.param(
        ["submit", "--gpus", "x9", "--output=yaml", *RUN],
        2,
        {"file": None, "line": None, "field": "--gpus"},
        id="a usage error of typer's (a float flag given text)",
    ),
    pytest.param(
        ["jobs", "list", "-o", "json", "--bogus"],
        2,
        {"file": None, "line": None, "field": None},
        id="an unknown option",
    ),
    pytest.param(
        ["jobs", "show", "nope", "-ojson"],
        2,
        {"file": None, "line": None, "field": None},
        id="an unknown job",
    ),
    pytest.param(
        ["submit", "--gpus", "64", "-o", "json", *RUN],
        2,
        {"file": None, "line": None, "field": None},
        id="a job that can never run",
    ),
]


@pytest.mark.parametrize(("args", "code", "where"), JSON_FAILURES)
def test_every_failure_under_json_is_one_error_document(
    cli: CliRunner, args: list[str], code: int, where: dict[str, object]
) -> None:
    result = cli.invoke(app, args)
    assert (result.exit_code, result.stdout) == (code, "")
    error = error_document(result.stderr)
    assert error["exit_code"] == code
    [problem] = error["problems"]  # type: ignore[misc]
    assert {k: problem[k] for k in where} == where
    assert problem["message"] in str(error["message"])
    assert "Traceback" not in result.stderr


def test_a_failing_result_under_json_still_gets_its_document(cli: CliRunner) -> None:
    queued = cli.invoke(app, ["submit", str(EXAMPLES / "jobs" / "serve-pii.yaml")])
    job_id = queued.stdout.strip()
    assert cli.invoke(app, ["jobs", "cancel", job_id]).exit_code == 0
    result = cli.invoke(app, ["jobs", "wait", job_id, "-o", "json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout) == [{"id": job_id, "state": "cancelled"}]
    assert error_document(result.stderr)["message"] == (
        f"1 of 1 did not succeed: {job_id} cancelled"
    )


OUTPUTS = [
    pytest.param(["jobs", "list", "-o", "json"], "json", id="-o json"),
    pytest.param(["jobs", "list", "--output", "YAML"], "yaml", id="--output YAML"),
    pytest.param(["jobs", "list", "--output=json"], "json", id="--output=json"),
    pytest.param(["jobs", "list", "-ojson"], "json", id="-ojson"),
    pytest.param(["jobs", "list", "-o", "json", "-o", "table"], "table", id="the last one wins"),
    pytest.param(["submit", "--", "prog", "-o", "json"], None, id="the user's command's own -o"),
    pytest.param(["jobs", "list"], None, id="none"),
]


@pytest.mark.parametrize(("args", "expected"), OUTPUTS)
def test_the_output_asked_for_is_read_before_parsing(args: list[str], expected: str | None) -> None:
    assert requested_output(args) == expected


@given(st.lists(st.text(max_size=300), max_size=6))
def test_any_command_gives_a_valid_job_name_and_id(command: list[str]) -> None:
    name = _name_of(command)
    assert re.fullmatch(NAME_PATTERN, name), name
    assert len(name) <= 40
    assert re.fullmatch(NAME_PATTERN, new_job_id(name))


NAMES = [
    pytest.param(["python", "train.py", "--lr", "0.1"], "train", id="the script"),
    pytest.param(["python", "-m", "pkg.embed"], "pkg", id="a module"),
    pytest.param(["python", "-c", "print('hi')"], "python", id="an inline program"),
    pytest.param(
        ["python", "-c", "import ray; ray.init(); " * 8],
        "python",
        id="a long multi-statement program names no job",
    ),
    pytest.param(["/usr/bin/python3.12", "-V"], "python3", id="the interpreter"),
    pytest.param(["x" * 39 + "-y.py"], "x" * 39, id="a cut that would end in '-'"),
    pytest.param([], "job", id="nothing"),
    pytest.param(["¡¿"], "job", id="nothing usable"),
]


@pytest.mark.parametrize(("command", "name"), NAMES)
def test_the_name_of_a_command(command: list[str], name: str) -> None:
    assert _name_of(command) == name


def test_the_output_asked_for_ends_with_its_command_line(
    cli: CliRunner, capsys: pytest.CaptureFixture[str]
) -> None:
    """A command line's ``-o json`` is its own: after it, in the same process (tests, a
    runner), warnings are ``warning:`` lines again and problems are printed, not kept."""
    from meshctl.cli import render

    assert cli.invoke(app, ["jobs", "list", "-o", "json"]).exit_code == 0
    capsys.readouterr()
    render.warnings(["after"])
    render.problems(["kept?"])
    assert capsys.readouterr().err == "warning: after\nerror: kept?\n"


CLICK_WORDS = [
    # id, click's message, as meshctl says it
    pytest.param("'x9' is not a valid float", "expected a number, got 'x9'", id="float"),
    pytest.param("'x' is not a valid integer", "expected a whole number, got 'x'", id="integer"),
    pytest.param("0 is not in the range x>=1", "expected 1 or more, got 0", id="at least"),
    pytest.param("0 is not in the range x>0", "expected more than 0, got 0", id="more than"),
    pytest.param("9 is not in the range x<=8", "expected 8 or less, got 9", id="at most"),
    pytest.param("9 is not in the range x<9", "expected less than 9, got 9", id="less than"),
    pytest.param("9 is not in the range 1<=x<=8", "expected 1 to 8, got 9", id="from to"),
    pytest.param("9 is not in the range 1<x<8", "expected 1<x<8, got 9", id="other: as said"),
    pytest.param("Missing argument 'jobs'", "Missing argument 'jobs'", id="another message"),
]  # fmt: skip


@pytest.mark.parametrize(("said", "words"), CLICK_WORDS)
def test_clicks_words_for_a_refused_value_are_meshctls(said: str, words: str) -> None:
    assert _expected(said) == words
