"""A running controller takes a new rule set: asked (``meshctl reload``) or noticed (files changed).

The controller runs with the files ``meshctl up`` recorded (``RuleFiles``: the mesh, the
policy folder, the catalogs). At the start of a cycle ``Reloader.poll`` looks for a request
file (``$MESHCTL_HOME/run/reload.json``, written by ``meshctl reload``) and, at most every
``WATCH_S``, at the files' sizes and modification times: a stat of each, nothing read unless
one changed. Either way the files are loaded through ``load`` (the CLI's own loader, so a
reload checks exactly what ``validate`` and ``policy validate`` check); a valid set is taken
for this cycle on, an invalid one is refused with its first problem and the old set keeps
running. A set is compared by content: touching a file changes nothing.

Each part of a set has a hash of its own (the mesh, the policies, the catalogs): a reload says
each part it took, old hash and new, and one that finds nothing new says what runs and when
each part was last taken (a change noticed a moment before ``meshctl reload`` ran is taken
already: "no change" alone would read as if it had been ignored).

Why a request file and not only a signal: it carries what to load (``--policies DIR``) and an
id the heartbeat echoes back, so ``reload`` knows that its own request was taken or refused;
it waits for a controller between cycles or restarting; SIGUSR1 (the nudge ``submit`` uses)
only wakes the controller to read it now.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from meshctl.controller.deciding.decide import Rules
from meshctl.controller.rundir import run_dir
from meshctl.model.mesh import LocalPool
from meshctl.problems import InvalidFileError
from meshctl.state.private import private_dir, write_private

log = logging.getLogger("meshctl.controller")
WATCH_S = 1.0  # how often the files' stats are compared
REQUEST_FILE = "reload.json"
KEPT_DIR = "rules"  # in the run folder: a copy of the files of the set the controller runs
PARTS = ("mesh", "policies", "catalogs")
Stamp = tuple[tuple[str, int, int], ...]  # (path, mtime ns, size) of every file read


@dataclass(frozen=True, slots=True)
class RuleFiles:
    """The files a controller runs with (absolute paths; providers None: beside the mesh or
    shipped)."""

    mesh: str
    policies: str
    providers: str | None = None

    @classmethod
    def of(cls, raw: dict[str, Any]) -> RuleFiles:
        return cls(str(raw["mesh"]), str(raw["policies"]), raw.get("providers") or None)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one reload did: ``reloaded`` (taken), ``refused`` (invalid; the old set runs on),
    or ``unchanged`` (valid, and the same content)."""

    outcome: Literal["reloaded", "refused", "unchanged"]
    old_hash: str  # of the policies, before and after (None: refused)
    new_hash: str | None
    message: str
    notes: tuple[str, ...] = ()  # what a reload cannot do by itself (a new local pool)
    request: str | None = None  # the id of the request it answers, if one asked
    changes: tuple[tuple[str, str, str], ...] = ()  # (part, old hash, new hash) taken
    hashes: dict[str, str] = field(default_factory=dict)  # each part's hash, running now


@dataclass
class Reloader:
    files: RuleFiles
    home: Path
    load: Callable[[RuleFiles], Rules]  # raises InvalidFileError on an invalid set
    taken: Callable[[RuleFiles], None] = lambda files: None  # record what now runs (up.json)
    # Why a valid set must not be taken now (the controller's own objections about the mesh,
    # "field: expected ..., got ..."), or None
    veto: Callable[[Rules, Rules], str | None] = lambda old, new: None
    commit: str | None = None  # the policy folder's git commit, for what runs now
    error: str | None = None  # the first problem of the last change refused, until one is taken
    last: Outcome | None = None
    taken_s: dict[str, float] = field(default_factory=dict)  # part -> when last changed
    _stamp: Stamp = ()
    _refused: Stamp | None = None  # a refused change is not tried again until it changes
    _looked_s: float = field(default=float("-inf"))

    def __post_init__(self) -> None:
        self._stamp = stamp(self.files)
        self.commit = git_commit(Path(self.files.policies))
        keep(self.home, self.files, self._stamp)

    def poll(self, now: float, rules: Rules) -> tuple[Rules, Outcome] | None:
        """A reload asked for or noticed: the rules to run with from now on, and what
        happened; None when nothing was asked and nothing changed."""
        request = take_request(self.home)
        if request is not None:
            ask_id, files = request
            return self._try(now, rules, files, ask_id)
        if now - self._looked_s < WATCH_S:
            return None
        self._looked_s = now
        seen = stamp(self.files)
        if seen == self._stamp or seen == self._refused:
            return None
        return self._try(now, rules, self.files, None, seen)

    def status(self) -> dict[str, Any]:
        """For the heartbeat: what runs, and how the last reload went."""
        return {
            "mesh": self.files.mesh,
            "policies": self.files.policies,
            "providers": self.files.providers,
            "policy_commit": self.commit,
            "policy_error": self.error,
            "reload": asdict(self.last) if self.last is not None else None,
        }

    def _try(
        self,
        now: float,
        rules: Rules,
        files: RuleFiles,
        ask: str | None,
        seen: Stamp | None = None,
    ) -> tuple[Rules, Outcome]:
        seen = seen if seen is not None else stamp(files)
        old = _hash(rules)
        try:
            new = self.load(files)
        except (InvalidFileError, OSError, ValueError) as err:
            first = _first_problem(err)
            self.error, self._refused = first, seen
            self.last = Outcome("refused", old, None, first, request=ask)
            return rules, self.last
        objection = self.veto(rules, new)
        if objection is not None:  # about the mesh file: say it as a problem in it
            objection = f"{files.mesh}: {objection}"
            self.error, self._refused = objection, seen
            self.last = Outcome("refused", old, None, objection, request=ask)
            return rules, self.last
        before, after = rule_hashes(rules), rule_hashes(new)
        changes = tuple((p, before[p], after[p]) for p in PARTS if before[p] != after[p])
        moved = files != self.files
        self.error, self._refused, self._stamp, self.files = None, None, seen, files
        if not changes and not moved:
            message = "no change: runs " + self._running(before, now)
            self.last = Outcome("unchanged", old, old, message, request=ask, hashes=before)
            return rules, self.last
        self.commit = git_commit(Path(files.policies))
        keep(self.home, files, seen)
        if moved:
            self.taken(files)
        self.taken_s.update((part, now) for part, _, _ in changes)
        said = [f"{part} {a} -> {b}" for part, a, b in changes]
        kept = [f"{p} {after[p]}" for p in PARTS if before[p] == after[p]]
        message = "; ".join(said or ["the same content"]) + (
            f" (unchanged: {', '.join(kept)})" if kept else ""
        )
        self.last = Outcome(
            "reloaded", old, _hash(new), message, _new_local(rules, new), ask, changes, after
        )
        return new, self.last

    def _running(self, hashes: dict[str, str], now: float) -> str:
        """``mesh 1a2b (taken 40 s ago), policies 0c3d, catalogs 9e8f``: each part's hash and
        how long ago this controller last took a change to it."""
        parts = []
        for part in PARTS:
            at = self.taken_s.get(part)
            since = f" (taken {now - at:.0f} s ago)" if at is not None else ""
            parts.append(f"{part} {hashes[part]}{since}")
        return ", ".join(parts)


def in_use_removed(old: Rules, new: Rules, busy: set[str]) -> str | None:
    """A mesh that drops a pool still running jobs (or cloud instances) is refused: its jobs
    would look lost and run twice. Drain the pool, then remove it."""
    gone = {p.name for p in old.mesh.spec.pools} - {p.name for p in new.mesh.spec.pools}
    held = ", ".join(sorted(gone & busy))
    if not held:
        return None
    why = "while jobs or instances run there (drain first)"
    return f"spec.pools: expected {held} {why}, got a mesh without"


def stamp(files: RuleFiles) -> Stamp:
    """Every file a load reads, with its modification time and size: a cheap change check."""
    paths = [Path(files.mesh)]
    for folder in (Path(files.policies), Path(files.policies) / "tests"):
        paths += _yaml_in(folder)
    if files.providers:
        paths += _yaml_in(Path(files.providers))
    found = []
    for path in paths:
        try:
            seen = path.stat()
        except OSError:
            found.append((str(path), -1, -1))  # gone: a change too
            continue
        found.append((str(path), seen.st_mtime_ns, seen.st_size))
    return tuple(found)


def kept_dir(home: Path) -> Path:
    return run_dir(home) / KEPT_DIR


def keep(home: Path, files: RuleFiles, loaded: Stamp) -> None:
    """A copy of ``files`` as the controller took them (``loaded``: their stamp when read),
    for commands to plan with while the files on disk hold a change it refused: the mesh
    file, the policy folder's files, the catalogs. None is kept when a file changed since it
    was read (the next look reads it again). Replaced whole, by a rename."""
    if stamp(files) != loaded:
        return
    target = kept_dir(home)
    partial = target.with_name(f"{KEPT_DIR}.{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        copies = {partial / "mesh.yaml": Path(files.mesh)}
        copies |= {partial / "policies" / p.name: p for p in _yaml_in(Path(files.policies))}
        if files.providers:
            copies |= {partial / "providers" / p.name: p for p in _yaml_in(Path(files.providers))}
        for folder in {partial, partial / "policies", *(c.parent for c in copies)}:
            private_dir(folder)
        for copy, source in copies.items():
            write_private(copy, source.read_bytes())
        old = target.with_name(f"{KEPT_DIR}.old.{os.getpid()}")
        if target.exists():
            target.rename(old)
        partial.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    except OSError as err:  # planning falls back to the files on disk, as without a copy
        log.warning("could not keep a copy of the rules taken: %s", err)
        shutil.rmtree(partial, ignore_errors=True)


def request_file(home: Path) -> Path:
    return run_dir(home) / REQUEST_FILE


def ask(home: Path, ask_id: str, files: RuleFiles) -> None:
    """Ask the controller to reload (``meshctl reload``); it answers in its heartbeat."""
    write_private(request_file(home), json.dumps({"id": ask_id, **asdict(files)}))


def take_request(home: Path) -> tuple[str, RuleFiles] | None:
    path = request_file(home)
    try:
        raw = json.loads(path.read_text())
        path.unlink()
    except (OSError, ValueError):  # none, or half written: the next cycle reads it
        return None
    try:
        return str(raw["id"]), RuleFiles.of(raw)
    except (KeyError, TypeError):
        log.warning("ignoring a malformed reload request: %s", raw)
        return None


def git_commit(folder: Path) -> str | None:
    """The commit checked out where ``folder`` is, if it is in a git repository."""
    try:
        done = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):  # no git here, or a hung file system
        return None
    if done.returncode != 0:  # not a repository (or no commit yet)
        return None
    return done.stdout.strip() or None


def _yaml_in(folder: Path) -> Iterable[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml"))
    except OSError:
        return []


def _hash(rules: Rules) -> str:
    return rules.policies.content_hash if rules.policies is not None else ""


def rule_hashes(rules: Rules) -> dict[str, str]:
    """Each part of a rule set by content: the mesh, the policies, the catalogs."""
    catalogs = json.dumps(
        {provider: c.model_dump(mode="json") for provider, c in rules.catalogs.items()},
        sort_keys=True,
    )
    return {
        "mesh": _digest(rules.mesh.model_dump_json()),
        "policies": _hash(rules) or "none",
        "catalogs": _digest(catalogs),
    }


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _new_local(old: Rules, new: Rules) -> tuple[str, ...]:
    """Local pools a reload cannot start: ``meshctl up`` does."""
    had = {p.name for p in old.mesh.spec.pools}
    return tuple(
        f"pool {p.name} is new: meshctl up starts it"
        for p in new.mesh.spec.pools
        if isinstance(p, LocalPool) and p.name not in had
    )


def _first_problem(err: Exception) -> str:
    if isinstance(err, InvalidFileError) and err.problems:
        extra = len(err.problems) - 1
        return str(err.problems[0]) + (f" (and {extra} more)" if extra else "")
    return str(err).splitlines()[0] if str(err) else type(err).__name__
