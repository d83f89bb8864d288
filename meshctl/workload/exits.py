"""A job's exit, written into its own driver log: the record that outlives its cluster's job table.

Ray keeps a job's outcome in its head's memory. A head that restarts (a crash, maintenance, a
chaos run's fault) forgets every job it ran, finished ones too, so a job that ended a moment
before looks, to the controller, like a job its pool lost: it would run again. The driver
log is different: meshctl copies it home as it grows (``controller/logs.py``), and a cluster
on this machine keeps its driver logs a day after it stops (``driverlogs.py``).

So every entrypoint the controller submits (``controller/dispatch.py``) is wrapped in a few
words of POSIX shell (Ray runs an entrypoint with ``/bin/sh -c``) that, when the command ends,
print one line with its exit status as the log's last line, and exit with that status. A
gang's placement wrapper (``meshctl.workload.placement``) prints the line itself the moment
the job's command ends, before it gives its placement group back and Ray's driver shuts down:
seconds, on a busy machine, in which a head that died would leave the job's work done and its exit
unrecorded. Ray sees the same exit status, the same output, and stops the same processes; a
job stopped by a signal prints nothing, as before. The controller reads the line only for an
attempt its pool no longer knows (``exit_status``: the last one in the log's tail); Ray's own
messages are given back without it (``without_exit_line``), so a failure still ends with the
job's own last words.
"""

from __future__ import annotations

import re
import shlex

EXIT_LINE = "[meshctl: the job exited {}]"
_EXIT = re.compile(rb"\[meshctl: the job exited (\d+)\]\n")
SEARCHED_BYTES = 4096  # the log's end, where the line is looked for (a shutdown may print after)
_EXIT_TEXT = re.compile(r"\[meshctl: the job exited \d+\]\n?")
VAR = "meshctl_exit"  # the shell variable that holds the command's status
_RUNNING = "Running entrypoint for job "  # Ray's line in each driver log


def wrapped(entrypoint: str) -> str:
    """The entrypoint, then its exit line: the command whole, quoted, in a shell of its own
    (a trailing comment, ``&``, ``exit`` or here-document of it stays what it was), on one
    line (Ray's log says what it runs in one line)."""
    line = EXIT_LINE.format(f"${VAR}")
    return f'sh -c {shlex.quote(entrypoint)}; {VAR}=$?; echo "{line}"; exit ${VAR}'


def exit_status(tail: bytes) -> int | None:
    """The status the last exit line in the log's tail records, or None when there is none
    (the job still runs, was stopped, or its last bytes were not copied)."""
    found = list(_EXIT.finditer(tail))
    return int(found[-1].group(1)) if found else None


def without_exit_line(message: str) -> str:
    """Ray's message about a job (which quotes its log's last lines) without meshctl's line,
    nor Ray's own "Running entrypoint for job ..." (which Ray writes to the log after the
    job's first output when the job is quick): a failure ends with the job's last words."""
    if "[meshctl: the job exited" not in message and _RUNNING not in message:
        return message
    lines = _EXIT_TEXT.sub("", message).split("\n")
    return "\n".join(line for line in lines if not line.startswith(_RUNNING))
