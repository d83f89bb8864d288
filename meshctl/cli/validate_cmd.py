"""``meshctl validate FILE...``: check any meshctl files by their kind; write nothing."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from meshctl.cli.context import app_context
from meshctl.cli.options import OutputOption
from meshctl.cli.render import Column, Output

if TYPE_CHECKING:
    from meshctl.files import Loaded
    from meshctl.problems import Problem

_SUFFIXES = (".yaml", ".yml")


def _expand(paths: list[Path]) -> list[Path]:
    """Files as given; directories become the YAML files under them (hidden ones skipped)."""
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            out.extend(
                sorted(
                    p
                    for p in path.rglob("*")
                    if p.suffix in _SUFFIXES
                    and p.is_file()
                    and not any(part.startswith(".") for part in p.relative_to(path).parts)
                )
            )
        else:
            out.append(path)
    return out


def _cross_file_problems(ctx: typer.Context, loaded: list[Loaded]) -> list[Problem]:
    """Checks across the files given together: policies compiled as one set (CEL, references,
    types, conflicts); meshes against the catalogs (those given with them first); and with a
    mesh among the files, the pools that policies, policy tests and mesh moments name, and the
    accelerator models of jobs and test cases."""
    from meshctl.catalog.check import catalog_accelerators, mesh_accelerators, mesh_node_types
    from meshctl.model import Accelerators, Catalog, Policy
    from meshctl.policy import Source, compile_policies
    from meshctl.problems import InvalidFileError

    problems: list[Problem] = []
    catalogs = app_context(ctx).catalog_map() | {
        d.document.spec.provider: d.document for d in loaded if isinstance(d.document, Catalog)
    }
    sources = [
        Source(d.path, d.document, d.lines, d.text)
        for d in loaded
        if isinstance(d.document, Policy)
    ]
    try:
        compile_policies(sources)
    except InvalidFileError as err:
        problems.extend(err.problems)
    given = [d.document for d in loaded if isinstance(d.document, Accelerators)]
    registry = given[0] if given else app_context(ctx).accelerators()
    for doc in loaded:
        problems.extend(mesh_node_types(doc, catalogs))
        problems.extend(mesh_accelerators(doc, registry, catalogs))
        problems.extend(catalog_accelerators(doc, registry))
    return problems + _named_problems(ctx, loaded, sources, catalogs, registry)


def _named_problems(
    ctx: typer.Context,
    loaded: list[Loaded],
    sources: list[Any],
    catalogs: dict[str, Any],
    registry: Any,
) -> list[Problem]:
    """Pools named against the meshes given (none given: not checked), accelerator models of
    jobs and policy-test cases against the catalogs and a mesh's nodes, and the sizes jobs give
    their datasets against the mesh's largest node cache (no source is read)."""
    from meshctl.catalog.check import case_accelerators, job_accelerators, job_models
    from meshctl.data.check import size_problems
    from meshctl.model import Mesh, MeshState, PolicyTest
    from meshctl.policy.names import (
        MeshNames,
        moment_problems,
        policy_problems,
        policy_test_problems,
    )

    meshes = [d.document for d in loaded if isinstance(d.document, Mesh)]
    mesh = meshes[0] if len(meshes) == 1 else _mesh_in_use(ctx) if not meshes else None
    problems = [p for d in loaded for p in job_accelerators(d, catalogs, mesh, registry)]
    if mesh is not None:
        problems += [p for d in loaded for p in size_problems(d, mesh)]
    known = job_models(catalogs, mesh)
    for d in loaded:
        if isinstance(d.document, PolicyTest):
            problems += case_accelerators(d.path, d.document, d.line_of, known)
    if not meshes:
        return problems
    names = MeshNames.of(*meshes)
    problems += policy_problems(sources, names)
    for d in loaded:
        if isinstance(d.document, MeshState):
            problems += moment_problems(d.path, d.document.spec, d.line_of, ("spec",), names)
        elif isinstance(d.document, PolicyTest):
            problems += policy_test_problems(d.path, d.document, d.line_of, names)
    return problems


def _mesh_in_use(ctx: typer.Context) -> Any:
    """The mesh jobs are checked against when none is given; None if it cannot be read (that
    is its own problem, reported where it is used)."""
    from meshctl.problems import InvalidFileError

    try:
        return app_context(ctx).mesh()
    except InvalidFileError:
        return None


def validate(
    ctx: typer.Context,
    paths: Annotated[list[Path], typer.Argument(help="Files, or directories of YAML files.")],
    output: OutputOption = Output.table,
) -> None:
    """Check meshctl files of any kind: Mesh, Job, Policy, MeshState...

    Each file is checked by its kind (Mesh, Job, Policy, PolicyTest, MeshState,
    Catalog): policies are compiled and type-checked; a mesh's node types and
    accelerator models are checked against the catalogs; a job's accelerator
    models against the catalogs and the mesh (H100-SXM: did you mean H100?) and
    its datasets' size_gib against the mesh's largest node cache. With a mesh
    among the files, the pools that policies, tests and mesh states name are
    checked against it. One line per problem: file:line: field: expected ...

    Exit codes:
      0  every file is valid
      2  a problem in any file

    Examples:
      meshctl validate .
      meshctl validate mesh.yaml jobs/ policies/
    """
    from meshctl.cli import render
    from meshctl.files import load_path
    from meshctl.problems import InvalidFileError, Problem

    files = _expand(paths)
    if not files:
        raise InvalidFileError([Problem(str(p), None, "", "no YAML files here") for p in paths])
    problems: list[Problem] = []
    loaded: list[Loaded] = []
    for file in files:
        try:
            loaded.extend(load_path(file))
        except InvalidFileError as err:
            problems.extend(err.problems)
    problems += _cross_file_problems(ctx, loaded)
    if problems:
        raise InvalidFileError(problems)
    rows = [
        {"file": d.path, "line": d.line, "kind": d.document.kind, "name": d.document.metadata.name}
        for d in loaded
    ]
    render.emit(
        rows,
        [
            Column("file", "File"),
            Column("line", "Line", "right"),
            Column("kind", "Kind"),
            Column("name", "Name"),
        ],
        output,
        title=f"{len(rows)} valid document(s)",
    )
