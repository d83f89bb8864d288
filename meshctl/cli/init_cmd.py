"""``meshctl init DIR``: scaffold a working mesh: mesh.yaml, providers/, policies/, jobs/."""

from __future__ import annotations

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
    files |= {f"providers/{n}": providers / n for n in ("aws.yaml", "gcp.yaml")}
    files["policies/README.md"] = policies / "README.md"
    files |= {f"policies/{f.name}": f for f in policies.iterdir() if f.name.endswith(".yaml")}
    tests = policies / "tests"
    files |= {f"policies/tests/{f.name}": f for f in tests.iterdir() if f.name.endswith(".yaml")}
    return dict(sorted(files.items()))


def init(
    directory: Annotated[Path, typer.Argument(help="Where to create the mesh.")] = Path("."),
    force: Annotated[bool, typer.Option(help="Overwrite files that already exist.")] = False,
) -> None:
    """Scaffold a working mesh: mesh.yaml, catalogs, policies, example jobs.

    Writes mesh.yaml (the embedded local pool, onprem, plus the AWS and GCP
    burst pools aws-burst and gcp-burst), the provider catalogs in providers/,
    the example policies and their tests in policies/, example jobs in jobs/
    and the programs they run in programs/. A file that already exists is
    never overwritten without --force: nothing is written, exit 2.

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
            target.write_bytes(source.read_bytes())
    except OSError as err:
        raise InvalidRequestError(f"{directory}: cannot write: {err.strerror or err}") from None
    render.say(f"Created a mesh in [bold]{directory}[/]: " + ", ".join(files))
    render.say(f"Next: [bold]meshctl validate {directory}[/] and [bold]meshctl providers prices[/]")
