"""Finding and reading policy files, their tests and mesh moments (the I/O around meshctl.policy).

A directory given as a path contributes its ``*.yaml`` / ``*.yml`` files (in name order) as
policies and its ``tests/`` folder as policy tests; a file given by name counts by its kind.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from meshctl.files import Loaded, load_path
from meshctl.model import Mesh, MeshState, Policy, PolicyTest
from meshctl.policy.compiled import Source
from meshctl.problems import InvalidFileError, Problem

_SUFFIXES = (".yaml", ".yml")


@dataclass
class PolicyFiles:
    policies: list[Source] = field(default_factory=list)
    # (path, test, line_of): line_of(*loc) is the line of that key in the test's file
    tests: list[tuple[str, PolicyTest, Callable[..., int]]] = field(default_factory=list)
    test_dirs: dict[str, Path] = field(default_factory=dict)  # test path -> its file's folder


def _yaml_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix in _SUFFIXES and p.is_file())


def _add(
    found: PolicyFiles,
    loaded: Loaded,
    want: type[Policy] | type[PolicyTest] | None,
    problems: list[Problem],
) -> None:
    doc = loaded.document
    if isinstance(doc, Policy) and want in (None, Policy):
        found.policies.append(Source(loaded.path, doc, loaded.lines, loaded.text))
    elif isinstance(doc, PolicyTest) and want in (None, PolicyTest):
        found.tests.append((loaded.path, doc, loaded.line_of))
        found.test_dirs[loaded.path] = Path(loaded.path).parent
    else:
        expected = want.__name__ if want else "Policy or PolicyTest"
        problems.append(
            Problem(loaded.path, loaded.line, "kind", f"expected {expected}, got {doc.kind}")
        )


def read_policy_files(paths: Sequence[Path], tests: bool = True) -> PolicyFiles:
    """Every policy and policy test under ``paths``; all problems of all files at once.
    ``tests=False``: the policies alone (what a command enforces; a folder's ``tests/`` are
    for ``meshctl policy test`` and ``meshctl validate``)."""
    found, problems = PolicyFiles(), list[Problem]()
    for path in paths:
        entries: list[tuple[Path, type[Policy] | type[PolicyTest] | None]] = [(path, None)]
        if path.is_dir():
            cases = path / "tests"
            entries = [(f, Policy) for f in _yaml_files(path)]
            if tests and cases.is_dir():
                entries += [(f, PolicyTest) for f in _yaml_files(cases)]
        for file, want in entries:
            try:
                for loaded in load_path(file):
                    _add(found, loaded, want, problems)
            except InvalidFileError as err:
                problems.extend(err.problems)
    if not found.policies and not problems:
        places = ", ".join(str(p) for p in paths)
        problems.append(Problem(places, None, "", "no policy files here (expected *.yaml)"))
    if problems:
        raise InvalidFileError(problems)
    return found


def read_mesh_or_state(path: Path) -> tuple[Mesh | None, MeshState | None]:
    """A Mesh (all pools idle) or a MeshState (whose ``mesh`` names its Mesh, if it does)."""
    (loaded, *rest) = load_path(path)
    doc = loaded.document
    if rest or not isinstance(doc, Mesh | MeshState):
        raise InvalidFileError(
            [
                Problem(
                    str(path),
                    loaded.line,
                    "kind",
                    f"expected one Mesh or MeshState document, got {doc.kind}",
                )
            ]
        )
    if isinstance(doc, Mesh):
        return doc, None
    if doc.spec.mesh is None:
        return None, doc
    return read_mesh(path.parent / doc.spec.mesh), doc


def written_for(folder: Path) -> Path | None:
    """The mesh the shipped example policies are written for (the embedded default mesh),
    when ``folder`` is where they ship; None for any other folder. The examples are the
    fallback for a mesh that has no policies of its own, so they are checked against the mesh
    they name, not against whichever mesh falls back on them."""
    from meshctl.files.shipped import data_dir

    shipped = Path(str(data_dir("policies")))
    try:
        same = folder.resolve() == shipped.resolve()
    except OSError:
        return None
    return Path(str(data_dir("examples"))) / "mesh.yaml" if same else None


def mesh_file_for(folder: Path, beside: bool = True) -> Path | None:
    """The mesh file the policies in ``folder`` are written for: ``mesh.yaml`` beside the
    folder (as ``meshctl init`` lays them out; where ``beside``), else for the shipped
    examples the embedded default mesh; None for neither (then the mesh in use applies)."""
    if beside and (folder.parent / "mesh.yaml").is_file():
        return folder.parent / "mesh.yaml"
    return written_for(folder)


class MeshReader:
    """Meshes for one command, each read once: by file (``read(path)``, the same file under
    any spelling), and the mesh in use (``in_use``, asked at most once). A file that cannot be
    read raises at its first read, as ``read_mesh`` does."""

    def __init__(self, in_use: Callable[[], Mesh]) -> None:
        self._in_use = in_use
        self._read: dict[Path | None, Mesh] = {}

    def read(self, path: Path | None) -> Mesh:
        """The mesh in ``path``; for None, the mesh in use."""
        key = path.resolve() if path is not None else None
        found = self._read.get(key)
        if found is None:
            found = self._read[key] = read_mesh(path) if path is not None else self._in_use()
        return found

    def for_folder(self, folder: Path, beside: bool = True) -> Mesh:
        """The mesh the policies in ``folder`` are checked against (``mesh_file_for``), else
        the mesh in use."""
        return self.read(mesh_file_for(folder, beside))


def read_mesh(path: Path) -> Mesh:
    (loaded, *rest) = load_path(path)
    if rest or not isinstance(loaded.document, Mesh):
        raise InvalidFileError(
            [Problem(str(path), loaded.line, "kind", "expected one Mesh document")]
        )
    return loaded.document
