"""Leaving the process once a short command is done, without the interpreter's teardown.

At exit CPython clears every module it imported and collects what is left: about 28 ms of
``meshctl submit``'s 300 (``benchmarks/cli_startup.py``), spent freeing memory the operating
system takes back at once anyway. ``leave`` does what the exit must do (joins threads by not
taking this path while others run; runs the ``atexit`` handlers, as the interpreter would,
``logging``'s flush among them; flushes stdout and stderr) and then ends the process with
``os._exit``. What it skips are the finalizers of objects still alive at exit: a command that
leaves this way closes what it opens (the submission commands: their store and files are
closed by ``with`` blocks).

Where anything of that is not as expected (other threads alive, a CPython without
``atexit._run_exitfuncs``, stdout that cannot be flushed), the exit is the ordinary one.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn

# The commands that leave this way: those a person or a script runs many times a minute.
AT_ONCE = frozenset({"submit", "train"})


def status(code: object) -> int:
    """The exit status of ``SystemExit(code)``, its message printed to stderr as the
    interpreter prints one."""
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


def leave(code: object) -> NoReturn:
    """Exit with ``code`` (``SystemExit``'s: None, an int, or a message for stderr and 1)."""
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    if run_exitfuncs is None or threading.active_count() > 1:
        raise SystemExit(code)
    done = status(code)
    run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe: the ordinary exit says so, as ever
        raise SystemExit(done) from None
    os._exit(done)
