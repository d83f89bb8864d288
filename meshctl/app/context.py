"""What every use of meshctl starts from: the home, the mesh file, the providers, the store
(``AppContext``), built once from the global options (the CLI's root callback) or the server's
settings; no module state. Warnings (policies that are not those the controller enforces) go to
``warn``: the CLI prints them on stderr, the API server logs them; ``busy`` wraps a slow step
(the CLI shows a spinner)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from meshctl.app.remote import LocalApi, Remote
    from meshctl.catalog import Found
    from meshctl.controller.deciding.decide import Rules
    from meshctl.controller.reload import RuleFiles
    from meshctl.model import Accelerators, Catalog, Job, Mesh, MeshState
    from meshctl.policy import PolicySet
    from meshctl.problems import InvalidFileError
    from meshctl.state import Store

RUN_DIR = "run"  # controller.rundir.run_dir: the controller's pid, heartbeat and up.json
UP_FILE = "up.json"  # what `meshctl up` brought up: the mesh, policies and catalogs in force


@dataclass(frozen=True, slots=True)
class AppContext:
    home: Path
    mesh_path: Path | None
    providers_dir: Path | None
    store_url: str | None = None  # --store (MESHCTL_STORE): else the home's state.db
    warn: Callable[[Sequence[str]], None] = field(default=lambda lines: None, compare=False)
    # what a slow step (pools checked, preflights) shows while it runs: the CLI's spinner
    busy: Callable[[str], AbstractContextManager[object]] = field(
        default=lambda message: nullcontext(), compare=False
    )

    def up(self) -> dict[str, str]:
        """What ``meshctl up`` recorded (mesh, policies, providers), or nothing."""
        import json

        try:
            raw = json.loads((self.home / RUN_DIR / UP_FILE).read_text())
        except (OSError, ValueError):
            return {}
        return {k: str(v) for k, v in raw.items() if v}

    def mesh_file(self) -> Path:
        """``--mesh``, else the mesh that is up, else ``./mesh.yaml``, else the embedded
        default shipped with meshctl."""
        from meshctl.files.shipped import data_dir

        if self.mesh_path is not None:
            return self.mesh_path
        if "mesh" in self.up():
            return Path(self.up()["mesh"])
        here = Path("mesh.yaml")
        return here if here.is_file() else Path(str(data_dir("examples") / "mesh.yaml"))

    def catalog_dir(self) -> Path | None:
        """``--providers``, else a ``providers/`` folder beside the mesh file, else shipped."""
        if self.providers_dir is not None:
            if not self.providers_dir.is_dir():
                from meshctl.errors import InvalidRequestError

                raise InvalidRequestError(
                    f"--providers: expected a directory of catalogs, got {self.providers_dir}"
                )
            return self.providers_dir
        if "providers" in self.up():
            return Path(self.up()["providers"])
        beside = self.mesh_file().parent / "providers"
        return beside if beside.is_dir() else None

    def policy_dir(self) -> Path:
        """The policies of the mesh that is up, else ``./policies``, else ``policies/`` beside
        the mesh file, else the shipped ones."""
        from meshctl.files.shipped import data_dir

        if "policies" in self.up():
            return Path(self.up()["policies"])
        for candidate in (Path("policies"), self.mesh_file().parent / "policies"):
            if candidate.is_dir():
                return candidate
        return Path(str(data_dir("policies")))

    def catalogs(self) -> list[Found]:
        from meshctl.catalog import load_catalogs

        return load_catalogs(directory=self.catalog_dir())

    def catalog_map(self) -> dict[str, Catalog]:
        return {found.provider: found.catalog for found in self.catalogs()}

    def accelerators(self) -> Accelerators:
        """The accelerator registry: ``accelerators.yaml`` beside the catalogs, else shipped."""
        from meshctl.catalog import load_accelerators

        return load_accelerators(self.catalog_dir())

    def mesh(self) -> Mesh:
        """The mesh, checked against the catalogs; invalid files raise InvalidFileError."""
        return self.mesh_and_catalogs()[0]

    def mesh_and_catalogs(
        self, catalogs: dict[str, Catalog] | None = None
    ) -> tuple[Mesh, dict[str, Catalog]]:
        """The mesh and the catalogs it was checked against (``catalogs``: those the caller
        read already; default: read them after the mesh), each read once: a command that
        needs both reads them here. Invalid files raise InvalidFileError, unless a controller
        runs with the set it took last: then they are warnings, and that set is read."""
        from meshctl.problems import InvalidFileError

        try:
            return self._mesh_and_catalogs(catalogs)
        except InvalidFileError as err:
            kept = self._kept(err, self.mesh_path is None and catalogs is None)
            if kept is None:
                raise
            providers = kept / "providers"
            copy = replace(
                self,
                mesh_path=kept / "mesh.yaml",
                providers_dir=providers if providers.is_dir() else None,
            )
            return copy._mesh_and_catalogs(None)

    def _kept(self, err: InvalidFileError, files_not_named: bool) -> Path | None:
        """Where the running controller keeps a copy of the set it runs, when the files a
        command read are those it runs with (``files_not_named``), they are invalid, and it
        runs: each problem is said as a warning, and the command goes on with that copy.
        None otherwise (the command fails with the problems, as with no controller)."""
        from meshctl.controller.reload import kept_dir

        running = self.enforced() if files_not_named else None
        kept = kept_dir(self.home)
        if running is None or not (kept / "mesh.yaml").is_file():
            return None
        self.warn([str(p) for p in err.problems])
        self.warn(
            [
                "the running controller refused this change and runs the set it took last "
                f"(policies {running.get('policy_hash')}); planning with that set"
            ]
        )
        return kept

    def _mesh_and_catalogs(
        self, catalogs: dict[str, Catalog] | None = None
    ) -> tuple[Mesh, dict[str, Catalog]]:
        from meshctl.catalog.check import mesh_accelerators, mesh_node_types
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
        catalogs = self.catalog_map() if catalogs is None else catalogs
        problems = mesh_node_types(docs[0], catalogs)
        problems += mesh_accelerators(docs[0], self.accelerators(), catalogs)
        if problems:
            raise InvalidFileError(problems)
        return docs[0].document, catalogs

    def policy_set(self, folder: Path | None = None, mesh: Mesh | None = None) -> PolicySet:
        """The policies in ``folder`` (default: ``policy_dir``), compiled and checked against
        the mesh (``mesh``: the one the caller read already; default: read it): a pool or
        provider it does not have is an error (InvalidFileError), not a rule that silently
        never matches. ``up``, ``submit`` and the controller come here."""
        from meshctl.files.policies import read_mesh, read_policy_files, written_for
        from meshctl.policy.compiled import compile_policies
        from meshctl.policy.names import MeshNames, policy_problems
        from meshctl.problems import InvalidFileError

        if folder is None:  # the controller's folder: its last good set if these are refused
            try:
                return self.policy_set(self.policy_dir(), mesh)
            except InvalidFileError as err:
                kept = self._kept(err, True)
                if kept is None:
                    raise
                return self.policy_set(kept / "policies", mesh)
        sources = read_policy_files([folder], tests=False).policies
        policies = compile_policies(sources)
        example_mesh = written_for(folder)  # the shipped examples: checked against theirs
        if example_mesh and (mesh is None or not _same_file(example_mesh, self.mesh_file())):
            mesh = read_mesh(example_mesh)  # unless it is the mesh in use, read already
        elif mesh is None:
            mesh = self.mesh()
        problems = policy_problems(sources, MeshNames.of(mesh))
        if problems:
            raise InvalidFileError(problems)
        return policies

    def rules(
        self, policies: Path | None = None, held: tuple[Mesh, dict[str, Catalog]] | None = None
    ) -> Rules:
        """``planning`` as the controller's ``Rules``."""
        from meshctl.controller.deciding.decide import Rules

        return Rules(*self.planning(policies, held))

    def planning(
        self, policies: Path | None = None, held: tuple[Mesh, dict[str, Catalog]] | None = None
    ) -> tuple[Mesh, dict[str, Catalog], PolicySet]:
        """The mesh, catalogs and policies a command plans with (submit, train): the named
        policies, else those the controller enforces; a warning on stderr when they differ
        from what it runs. ``held``: the mesh and catalogs the caller read already
        (``mesh_and_catalogs``). Three values, not ``Rules``: a submission imports no more of
        the controller than it needs."""
        mesh, catalogs = held or self.mesh_and_catalogs()
        policy_set = self.policy_set(policies, mesh)
        self.warn_if_not_enforced(policy_set, policies is not None)
        return mesh, catalogs, policy_set

    def rule_files(self, policies: Path | None = None) -> RuleFiles:
        """The files a controller started or reloaded now would run with (absolute)."""
        from meshctl.controller.reload import RuleFiles

        catalogs = self.catalog_dir()
        return RuleFiles(
            str(self.mesh_file().resolve()),
            str((policies or self.policy_dir()).resolve()),
            str(catalogs.resolve()) if catalogs else None,
        )

    def enforced(self) -> dict[str, object] | None:
        """What the running controller enforces, from its heartbeat (``policy_hash``,
        ``policies``, ``policy_commit``, ``policy_error``); None when none runs."""
        if not self.ever_up():
            return None
        from meshctl.controller import daemon

        pid = daemon.running(self.home)
        beat = daemon.live_beat(daemon.heartbeat(self.home) if pid is not None else None, pid)
        return beat if beat.get("policy_hash") is not None else None

    def ever_up(self) -> bool:
        """Whether a controller may run for this home: its files live in ``run/``
        (``controller.rundir.run_dir``). Without it none ever ran, and a command asks no more
        (``submit`` does not import the daemon's module, and the pools and clouds it imports)."""
        return (self.home / RUN_DIR).is_dir()

    def nudge(self) -> bool:
        """Ask the running controller to cycle now (``daemon.nudge``); False: none runs."""
        if not self.ever_up():
            return False
        from meshctl.controller import daemon

        return daemon.nudge(self.home)

    def warn_if_not_enforced(self, policies: PolicySet, named: bool) -> None:
        """Say so (a warning, never an error) when a command plans with other policies than
        the running controller enforces: named ones, or files edited and not reloaded."""
        running = self.enforced()
        theirs = running.get("policy_hash") if running else None
        if running is None or theirs == policies.content_hash:
            return
        where = running.get("policies")
        ours = f"(hash {policies.content_hash})"
        if named:
            folders = {str(Path(p).resolve().parent) for p in policies.paths} or {"DIR"}
            folder = folders.pop() if len(folders) == 1 else "DIR"
            line = (
                f"planning with the policies named {ours}, not those the controller enforces "
                f"(hash {theirs}, {where}); to enforce them: meshctl reload --policies {folder}"
            )
        else:
            refused = running.get("policy_error")
            line = (
                f"the policies in {where} {ours} are not those the controller enforces "
                f"(hash {theirs}): edited, not reloaded; run meshctl reload"
                + (f" (the controller refused them: {refused})" if refused else "")
            )
        self.warn([line])

    def has_store(self) -> bool:
        """Whether there is a store to read: one named (``--store``), or the home's state.db
        (none before anything ran here; reading would make an empty one)."""
        return self.store_url is not None or (self.home / "state.db").is_file()

    def store(self, *, local: bool = False) -> Store:
        """The state store in the home. Talking to an API server (``remote``), a command
        the server does not serve is refused, not run on a local store the user did not mean;
        ``local``: the controller's own, whatever the caller's environment says."""
        from meshctl.state import open_store_at

        if not local and self.remote() is not None:
            from meshctl.errors import InvalidRequestError

            raise InvalidRequestError(
                "this command is not served by the API server yet; it works on a local mesh "
                "(unset MESHCTL_SERVER and MESHCTL_TOKEN, or meshctl logout)"
            )
        return open_store_at(self.store_url, self.home)

    def shares_store(self) -> bool:
        """Whether the store was named (``--store``, ``MESHCTL_STORE``): others may use it
        from other hosts, so a job's files are kept in it too (``controller/packages.py``)."""
        return self.store_url is not None

    def remote(self) -> Remote | None:
        """The API server commands talk to (``meshctl.app.remote``), or None: local."""
        from meshctl.app.remote import remote

        return remote(self.home)

    def local_api(self) -> LocalApi | None:
        """The home's local API (served beside its controller while one runs) for a command
        that reads what that controller runs with; None when this command names files or a
        store of its own (``--mesh``, ``--providers``, ``--store``): it reads those itself."""
        from meshctl.app.remote import LocalApi, api_socket

        if self.mesh_path or self.providers_dir or self.store_url:
            return None
        return LocalApi(api_socket(self.home))


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:
        return False


def utc(moment: dt.datetime) -> dt.datetime:
    """A time without a zone is UTC (as the help says), never the machine's local time."""
    return moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment.astimezone(dt.UTC)


@dataclass(frozen=True, slots=True)
class Moment:
    """What explaining a job needs: the job, the mesh at a moment, the policies, the time."""

    job: Job
    mesh: Mesh
    state: MeshState | None
    policies: PolicySet
    now: dt.datetime


def read_moment(
    context: AppContext,
    job_file: Path,
    mesh_file: Path | None,
    policies: list[Path] | None,
    now: dt.datetime | None,
) -> Moment:
    """``--mesh`` (a Mesh or MeshState; the global mesh where it names none), policies, time."""
    from meshctl.files import load_one
    from meshctl.files.policies import read_mesh_or_state, read_policy_files
    from meshctl.model import Job
    from meshctl.policy.compiled import compile_policies

    job = load_one(job_file, Job)
    if policies or mesh_file:  # named, or another mesh's moment: those files, as they are
        policy_set = compile_policies(
            read_policy_files(policies or [context.policy_dir()]).policies
        )
    else:  # the controller's: its last good set while it refuses a change to them
        policy_set = context.policy_set()
    context.warn_if_not_enforced(policy_set, bool(policies))
    mesh, state = read_mesh_or_state(mesh_file) if mesh_file else (None, None)
    moment = utc(now or dt.datetime.now(dt.UTC))
    return Moment(job, mesh or context.mesh(), state, policy_set, moment)


def rules_from(home: Path, files: RuleFiles) -> Rules:
    """The rules in ``files``, loaded and checked as ``validate`` and ``policy validate`` check
    them (``InvalidFileError`` otherwise): what ``controller run`` starts with, what it takes on
    a reload, and what ``meshctl reload`` checks before asking it."""
    from meshctl.controller.deciding.decide import Rules

    providers = Path(files.providers) if files.providers else None
    context = AppContext(home, Path(files.mesh), providers)
    mesh, catalogs = context.mesh_and_catalogs()
    policies = context.policy_set(Path(files.policies), mesh)
    return Rules(mesh, catalogs, policies, accelerators=context.accelerators())
