"""``meshctl submit``'s flags, once: their names, types and defaults.

A submission carries the flags its user gave (``SubmitRequest.flags``), and the application
layer builds the job from them (``submitting.from_command``) with these defaults, so that a
job given as a command is checked where every other job is. The submit client reads a command
line with this table before anything heavy is imported (``meshctl.cli.submitclient``); the
typer command declares the same flags with their help, and a unit test holds the two equal,
flag by flag (``tests/unit/test_submit_request.py``). The standard library only.
"""

from __future__ import annotations

from typing import NamedTuple


class Flag(NamedTuple):
    """One flag: ``name`` as typed, the ``kind`` of its value (float, int, str, path, bool:
    a switch, output: table, json or yaml), what it is when not given, and for a number the
    least value it takes."""

    name: str
    kind: str
    default: object
    minimum: int | None = None

    @property
    def key(self) -> str:
        """The flag's name in a request's ``flags`` (``gpus`` for ``--gpus``)."""
        return self.name.removeprefix("--")


JOB = (
    Flag("--gpus", "float", None),
    Flag("--cpus", "float", 0.25),
    Flag("--memory", "str", "512MiB"),
    Flag("--nodes", "int", 1, minimum=1),
    Flag("--kind", "str", "batch"),
    Flag("--priority", "str", None),
    Flag("--criticality", "str", "standard"),
    Flag("--team", "str", "default"),
    Flag("--name", "str", None),
    Flag("--working-dir", "path", None),
)
"""The flags that describe a job given as a command (a job file describes its own)."""

HOW = (
    Flag("--dry-run", "bool", False),
    Flag("--explain", "bool", False),
    Flag("--no-data-check", "bool", False),
    Flag("--output", "output", "table"),
)
"""The flags that say how to submit it, and how to print the answer."""

ALIASES = {"-o": "--output"}
OUTPUTS = ("table", "json", "yaml")
BY_NAME = {flag.name: flag for flag in (*JOB, *HOW)}
BY_KEY = {flag.key: flag for flag in JOB}

# Where a job built from flags can be wrong, and the flag that set it.
FIELD_FLAGS = {
    "metadata.name": "--name",
    "spec.kind": "--kind",
    "spec.team": "--team",
    "spec.criticality": "--criticality",
    "spec.priority_class": "--priority",
    "spec.resources.gpus": "--gpus",
    "spec.resources.cpus": "--cpus",
    "spec.resources.memory_gib": "--memory",
    "spec.resources.nodes": "--nodes",
    "spec.resources": "--gpus/--nodes",
    "spec.entrypoint": "COMMAND",
}


def given(values: dict[str, object]) -> dict[str, object]:
    """Of the job flags' ``values`` (by key), those that are not their default: what a
    request carries, and what a job file may not be given with."""
    return {f.key: values[f.key] for f in JOB if f.key in values and values[f.key] != f.default}
