"""``meshctl submit`` as a request, read, sent and printed before anything heavy is imported.

The entry point (``entry.py``) hands a ``submit`` command line to ``run`` first. It reads it
with submit's flag table (``meshctl.app.submitflags``), builds the request (``outgoing``: the
job as written, a job file's path and text or a command and its flags, the folder that goes
with it) and sends it, ``POST /v1/jobs``: to the API server when one is configured
(``meshctl.app.remote``), else to the home's local API while a controller runs
(``HOME/run/api.sock``, ``meshctl.server.local``). The job is parsed and checked there, warm;
the answer is printed by the one renderer (``render.submitted``) and ``run`` returns the exit
status.

``run`` returns None, and the full CLI runs the command, for whatever it does not fully
understand: help, a flag it cannot read or a value it would refuse (the CLI says why), a root
option other than ``--home``, a mesh, catalogs or store named in the environment, and a home
where no controller serves the socket (the CLI then admits the job in its own process,
through the same application-layer call, ``meshctl.app.submitting``). The typer command builds
and sends its request with the same functions (``outgoing``, ``send``).

The standard library only, and PyYAML for a job file's ``working_dir`` and for ``-o yaml``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from meshctl.app import submitflags
from meshctl.cli import argv
from meshctl.errors import EXIT_INVALID, Failure, InvalidRequestError, MeshctlError

if TYPE_CHECKING:
    from meshctl.app.remote import Answered

# Root options and their variables that name other files than those the controller runs
# with: a submission that names them is admitted in process, against those files.
NAMED_ENV = ("MESHCTL_MESH", "MESHCTL_PROVIDERS", "MESHCTL_STORE")
JOBS = "/v1/jobs"


class Read(NamedTuple):
    """A submit command line: its words that are not flags (a job file, or the command)
    and every flag's value by key (``submitflags.Flag.key``), defaults included."""

    args: list[str]
    values: dict[str, object]


def run(args: Sequence[str], environ: Mapping[str, str] = os.environ) -> int | None:
    """The exit status of ``meshctl ARGS`` (a submit) sent as a request; None: the full CLI
    runs it."""
    found = read(args)
    if found is None or any(environ.get(name) for name in NAMED_ENV):
        return None
    output = str(found.values["output"])
    try:
        body, folder = outgoing(found.args, found.values)
        answered = send(argv.home(args, environ), body, folder, local=True)
    except MeshctlError as err:
        return failed(err, output)
    if answered is None:
        return None
    from meshctl.cli import render

    render.remember_output(output)
    render.submitted(answered.document, answered.warnings, output)
    return 0


def read(args: Sequence[str]) -> Read | None:
    """``args`` as ``meshctl [--home DIR] submit ...`` reads them, or None: not only that,
    or not something this reader takes as the CLI would (``--help``, an unknown flag, a value
    it would refuse)."""
    words = iter(args)
    for word in words:
        if word == "submit":
            break
        if not ((word == "--home" and next(words, None) is not None) or word.startswith("--home=")):
            return None
    else:
        return None
    values = {flag.key: flag.default for flag in submitflags.BY_NAME.values()}
    found: list[str] = []
    for word in words:
        if word == "--":
            found += words
        elif word.startswith("-") and word != "-":
            if not _flag(word, words, values):
                return None
        else:
            found.append(word)
    return Read(found, values)


def _flag(word: str, words: Any, values: dict[str, object]) -> bool:
    """Read one flag (and its value, from ``words`` when not in ``word``) into ``values``;
    whether it was one this reader takes."""
    name, equals, inline = word.partition("=")
    if name.startswith("-o") and not name.startswith("--") and len(name) > 2:
        name, equals, inline = "-o", "=", word[2:]  # -ojson
    flag = submitflags.BY_NAME.get(submitflags.ALIASES.get(name, name))
    if flag is None:
        return False
    if flag.kind == "bool":
        values[flag.key] = True
        return not equals
    text = inline if equals else next(words, None)
    value = None if text is None else _value(flag, text)
    values[flag.key] = value
    return value is not None


def _value(flag: submitflags.Flag, text: str) -> object:
    """A flag's value as the CLI reads it, or None where it would refuse it (and say why)."""
    try:
        if flag.kind == "float":
            return float(text)
        if flag.kind == "int":
            number = int(text)
            return number if flag.minimum is None or number >= flag.minimum else None
    except ValueError:
        return None
    if flag.kind == "output":
        return text.lower() if text.lower() in submitflags.OUTPUTS else None
    return text


def outgoing(
    args: Sequence[str], values: Mapping[str, object]
) -> tuple[dict[str, Any], Path | None]:
    """The request for a submission (the body of ``POST /v1/jobs``, less its folder) and the
    folder that goes with the job: ``--working-dir``, or a job file's ``working_dir``."""
    body: dict[str, Any] = {
        "flags": submitflags.given(dict(values)),
        "dry_run": bool(values["dry-run"]),
        "explain": bool(values["explain"]),
        "data_check": not values["no-data-check"],
    }
    if len(args) == 1 and args[0].endswith((".yaml", ".yml")):
        path = Path(args[0])
        if not path.is_file():
            raise InvalidRequestError(f"{args[0]}: no such job file")
        text = _text(path)
        body["file"] = {"path": args[0], "text": text}
        return body, _file_folder(path, text)
    if not args:
        raise InvalidRequestError("expected JOB.yaml, or -- and a command (see --help)")
    body["command"] = list(args)
    working_dir = values.get("working-dir")
    return body, Path(str(working_dir)).resolve() if working_dir is not None else None


def _text(path: Path) -> str:
    from meshctl.problems import InvalidFileError, Problem

    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) else "not UTF-8 text"
        raise InvalidFileError([Problem(str(path), None, "", f"cannot read: {reason}")]) from None


def _file_folder(path: Path, text: str) -> Path | None:
    """The folder a job file's ``working_dir`` names (relative to the file's), read with
    PyYAML; None when the file does not say it plainly (the server says what is wrong)."""
    import yaml

    try:
        document = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return None
    spec = document.get("spec") if isinstance(document, dict) else None
    working_dir = spec.get("working_dir", ".") if isinstance(spec, dict) else None
    return (path.resolve().parent / working_dir).resolve() if isinstance(working_dir, str) else None


def send(home: Path, body: dict[str, Any], folder: Path | None, *, local: bool) -> Answered | None:
    """The answer to the request from the API server when one is configured, else (``local``)
    from the home's local API; None when neither takes it (no server, no controller)."""
    from meshctl.app.remote import LocalApi, api_socket, remote

    server = remote(home)
    if server is not None:
        return server.post(JOBS, packed(body, folder, home))
    api = LocalApi(api_socket(home))
    if not local or not api.socket.exists():
        return None
    return api.post(JOBS, packed(body, folder, home))


def packed(body: dict[str, Any], folder: Path | None, home: Path) -> dict[str, Any]:
    """The body with the job's folder in it (``remote.pack``), less meshctl's home where it
    lies inside (``--home ./state``: its uploads and packages are never a job's files); a job
    document's own ``working_dir`` goes: the folder is the one sent."""
    if folder is None:
        return body
    from meshctl.app.remote import pack
    from meshctl.host.packing import IGNORED

    if not folder.is_dir():
        raise InvalidRequestError(f"working_dir: {folder} is not a directory")
    if "job" in body:
        spec = {k: v for k, v in body["job"].get("spec", {}).items() if k != "working_dir"}
        body = {**body, "job": {**body["job"], "spec": spec}}
    return {**body, "working_dir": pack(folder, IGNORED, [home])}


def failed(err: MeshctlError, output: str) -> int:
    """Print an error as the CLI does (``cli/errors.py``); its exit status."""
    from meshctl.cli import render
    from meshctl.problems import InvalidFileError

    render.remember_output(output)
    code = err.exit_code if isinstance(err, Failure) else EXIT_INVALID
    render.failure(code, err.problems if isinstance(err, InvalidFileError) else [str(err)])
    return code
