"""A job's exit, written into its own driver log: the record that outlives its cluster's job table.

Ray keeps a job's outcome in its head's memory. A head that restarts (a crash, maintenance, a
chaos run's fault) forgets every job it ran, finished ones too, so a job that ended a moment
before looks, to the controller, like a job its pool lost: it would run again. The driver
log is different: meshctl copies it home as it grows (``controller/logs.py``), and a cluster
on this machine keeps its driver logs a day after it stops (``driverlogs.py``).

So every entrypoint meshctl submits is wrapped in a few words of POSIX shell (Ray runs an
entrypoint with ``/bin/sh -c``) that, when the command ends, print one line with its exit
status as the log's last line, and exit with that status. Ray sees the same exit status, the
same output, and stops the same processes: a job stopped by a signal prints nothing, as
before. The controller reads the line only for an attempt its pool no longer knows
(``exit_status``); Ray's own messages are given back without it (``without_exit_line``), so a
failure still ends with the job's own last words.
"""

from __future__ import annotations

import re

EXIT_LINE = "[meshctl: the job exited {}]"
_EXIT = re.compile(rb"\[meshctl: the job exited (\d+)\]\n?\Z")
_EXIT_TEXT = re.compile(r"\[meshctl: the job exited \d+\]\n?")
VAR = "meshctl_exit"  # the shell variable that holds the command's status


def wrapped(entrypoint: str) -> str:
    """The entrypoint, then its exit line. The command stands on lines of its own inside the
    braces, so a trailing comment, ``&`` or here-document of it stays what it was."""
    line = EXIT_LINE.format(f"${VAR}")
    return f'{{ {entrypoint}\n}}; {VAR}=$?; echo "{line}"; exit ${VAR}'


def exit_status(tail: bytes) -> int | None:
    """The status the log's last line records, or None when it records none (the job still
    runs, was stopped, or its last bytes were not copied)."""
    found = _EXIT.search(tail)
    return int(found.group(1)) if found is not None else None


def without_exit_line(message: str) -> str:
    """Ray's message about a job (which quotes its log's last lines) without meshctl's line."""
    return _EXIT_TEXT.sub("", message)
