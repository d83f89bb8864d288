"""The context object the root callback builds from the global options (no module state)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from meshctl.catalog import Found
    from meshctl.model import Catalog, Mesh


@dataclass(frozen=True, slots=True)
class AppContext:
    home: Path
    mesh_path: Path | None
    providers_dir: Path | None

    def mesh_file(self) -> Path:
        """``--mesh``, else ``./mesh.yaml``, else the embedded default shipped with meshctl."""
        from meshctl.resources import data_dir

        if self.mesh_path is not None:
            return self.mesh_path
        here = Path("mesh.yaml")
        return here if here.is_file() else Path(str(data_dir("examples") / "mesh.yaml"))

    def catalog_dir(self) -> Path | None:
        """``--providers``, else a ``providers/`` folder beside the mesh file, else shipped."""
        if self.providers_dir is not None:
            return self.providers_dir
        beside = self.mesh_file().parent / "providers"
        return beside if beside.is_dir() else None

    def policy_dir(self) -> Path:
        """``./policies``, else ``policies/`` beside the mesh file, else the shipped ones."""
        from meshctl.resources import data_dir

        for candidate in (Path("policies"), self.mesh_file().parent / "policies"):
            if candidate.is_dir():
                return candidate
        return Path(str(data_dir("policies")))

    def catalogs(self) -> list[Found]:
        from meshctl.catalog import load_catalogs

        return load_catalogs(directory=self.catalog_dir())

    def catalog_map(self) -> dict[str, Catalog]:
        return {found.provider: found.catalog for found in self.catalogs()}

    def mesh(self) -> Mesh:
        """The mesh, checked against the catalogs; invalid files raise InvalidFileError."""
        from meshctl.catalog.check import mesh_node_types
        from meshctl.files import load_path
        from meshctl.model import Mesh
        from meshctl.problems import InvalidFileError, Problem

        path = self.mesh_file()
        docs = load_path(path)
        if len(docs) != 1 or not isinstance(docs[0].document, Mesh):
            kinds = ", ".join(d.document.kind for d in docs)
            raise InvalidFileError(
                [
                    Problem(
                        str(path), docs[0].line, "kind", f"expected one Mesh document, got {kinds}"
                    )
                ]
            )
        problems = mesh_node_types(docs[0], self.catalog_map())
        if problems:
            raise InvalidFileError(problems)
        return docs[0].document


def app_context(ctx: typer.Context) -> AppContext:
    obj = ctx.find_root().obj
    if not isinstance(obj, AppContext):  # a command invoked without the root callback
        raise RuntimeError("meshctl commands run under the root app")
    return obj
