"""``meshctl init DIR``: scaffold a working mesh: mesh.yaml, providers/, policies/, jobs/."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable


def _scaffold() -> dict[str, Traversable]:
    """Relative path in the new directory -> the shipped file it is copied from."""
    from meshctl.files.shipped import data_dir

    examples, providers, policies = (data_dir(n) for n in ("examples", "providers", "policies"))
    files: dict[str, Traversable] = {"mesh.yaml": examples / "mesh.yaml"}
    files |= {
        f"jobs/{f.name}": f for f in (examples / "jobs").iterdir() if f.name.endswith(".yaml")
    }
    programs = examples / "programs"  # what the example jobs run (their working_dir)
    files |= {f"programs/{f.name}": f for f in programs.iterdir() if f.name.endswith(".py")}
    for dataset in (examples / "data").iterdir():  # what the example jobs read (their data)
        files |= {f"data/{dataset.name}/{f.name}": f for f in dataset.iterdir() if f.is_file()}
    files |= {f"providers/{n}": providers / n for n in ("aws.yaml", "gcp.yaml")}
    files["policies/README.md"] = policies / "README.md"
    files |= {f"policies/{f.name}": f for f in policies.iterdir() if f.name.endswith(".yaml")}
    tests = policies / "tests"
    files |= {f"policies/tests/{f.name}": f for f in tests.iterdir() if f.name.endswith(".yaml")}
    return dict(sorted(files.items()))


# A shipped job's data location relative to its jobs/ folder ("../data/tickets"): the node
# caches read absolute locations only, so the scaffold gets the folder's absolute path.
_RELATIVE_DATA = re.compile(r"^(\s*location:\s*)\.\./(data/\S+)\s*$", re.MULTILINE)


def _localised(rel: str, text: bytes, directory: Path) -> bytes:
    """A job file with each of its ``../data/...`` locations made absolute in ``directory``
    (JSON-quoted: a valid YAML string whatever the path holds); any other file as it is."""
    if not rel.startswith("jobs/"):
        return text

    def absolute(m: re.Match[str]) -> str:
        return m[1] + json.dumps(str(directory.resolve() / m[2]))

    return _RELATIVE_DATA.sub(absolute, text.decode("utf-8")).encode("utf-8")


def init(
    directory: Annotated[Path, typer.Argument(help="Where to create the mesh.")] = Path("."),
    force: Annotated[bool, typer.Option(help="Overwrite files that already exist.")] = False,
) -> None:
    """Scaffold a working mesh: mesh.yaml, catalogs, policies, example jobs.

    Writes mesh.yaml (the embedded local pool, onprem, plus the AWS and GCP
    burst pools aws-burst and gcp-burst), the provider catalogs in providers/,
    the example policies and their tests in policies/, example jobs in jobs/,
    the programs they run in programs/ and the data they read in data/ (a
    job's data location is written as that folder's absolute path). A file
    that already exists is never overwritten without --force: nothing is
    written, exit 2.

    Examples:
      meshctl init demo
      meshctl init . --force
    """
    from meshctl.cli import render
    from meshctl.errors import InvalidRequestError

    files = _scaffold()
    existing = [rel for rel in files if (directory / rel).exists()]
    if existing and not force:
        raise InvalidRequestError(
            f"{directory}: {', '.join(existing)} already exist; nothing was written "
            "(use --force to overwrite)"
        )
    if directory.exists() and not directory.is_dir():
        raise InvalidRequestError(f"{directory}: expected a directory, got a file")
    try:
        for rel, source in files.items():
            target = directory / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(_localised(rel, source.read_bytes(), directory))
    except OSError as err:
        raise InvalidRequestError(f"{directory}: cannot write: {err.strerror or err}") from None
    render.say(f"Created a mesh in [bold]{directory}[/]: " + ", ".join(files))
    render.say(f"Next: [bold]meshctl validate {directory}[/] and [bold]meshctl providers prices[/]")
