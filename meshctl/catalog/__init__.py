"""Finding and loading the provider catalogs (``providers/aws.yaml``, ``providers/gcp.yaml``)
and the accelerator registry (``providers/accelerators.yaml``).

Where a catalog comes from, first found wins:
1. a directory the user names (``--providers DIR``, or ``providers/`` beside a mesh file);
2. the catalogs shipped with meshctl (see ``meshctl.files.shipped``).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Final, Literal

from meshctl.files import load_one
from meshctl.files.shipped import data_dir
from meshctl.model import Accelerators, Catalog
from meshctl.problems import InvalidFileError, Problem

Provider = Literal["aws", "gcp"]
PROVIDERS: Final[tuple[Provider, ...]] = ("aws", "gcp")
ACCELERATORS_FILE: Final = "accelerators.yaml"


@dataclass(frozen=True, slots=True)
class Found:
    provider: Provider
    location: str
    catalog: Catalog


def _candidates(name: str, directory: Path | None) -> list[Traversable | Path]:
    """Where the file ``name`` may be, first found wins: ``directory``, then shipped."""
    places: list[Traversable | Path] = [directory] if directory else []
    return [p.joinpath(name) for p in [*places, data_dir("providers")]]


def catalog_path(provider: Provider, directory: Path | None = None) -> Traversable | Path:
    """The first catalog file for ``provider``; an error naming where it looked otherwise."""
    candidates = _candidates(f"{provider}.yaml", directory)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    looked = ", ".join(str(c) for c in candidates)
    raise InvalidFileError([Problem(f"{provider}.yaml", None, "", f"no catalog found in {looked}")])


def load_catalog(provider: Provider, directory: Path | None = None) -> Found:
    source = catalog_path(provider, directory)
    with resources.as_file(source) as path:
        catalog = load_one(path, Catalog)
    if catalog.spec.provider != provider:
        raise InvalidFileError(
            [
                Problem(
                    str(source),
                    None,
                    "spec.provider",
                    f"expected {provider!r} in {provider}.yaml, got {catalog.spec.provider!r}",
                )
            ]
        )
    return Found(provider, str(source), catalog)


def load_catalogs(
    providers: tuple[Provider, ...] = PROVIDERS, directory: Path | None = None
) -> list[Found]:
    """Every requested catalog; all problems of all of them at once."""
    found: list[Found] = []
    problems: list[Problem] = []
    for provider in providers:
        try:
            found.append(load_catalog(provider, directory))
        except InvalidFileError as err:
            problems.extend(err.problems)
    if problems:
        raise InvalidFileError(problems)
    return found


def accelerators_path(directory: Path | None = None) -> Traversable | Path:
    """The accelerator registry: ``accelerators.yaml`` in ``directory`` when it has one, else
    the one shipped with meshctl."""
    candidates = _candidates(ACCELERATORS_FILE, directory)
    return next((c for c in candidates if c.is_file()), candidates[-1])


def load_accelerators(directory: Path | None = None) -> Accelerators:
    """The accelerator registry (``accelerators_path``); an invalid one raises
    InvalidFileError naming its file, line and field."""
    with resources.as_file(accelerators_path(directory)) as path:
        return load_one(path, Accelerators)
