"""The ``meshctl`` command's entry point.

A command the home's command server serves (``SERVED``: ``submit``) goes to it when
one runs (``relay.py``): the command then costs this process an interpreter's start and a
round trip, not the imports of the CLI. Anything else, or when no server takes it, runs here
(``app.main``). Until then only the standard library is imported.
"""

from __future__ import annotations

import sys

from meshctl.cli import argv

SERVED = frozenset({"submit"})  # what a command server runs (``cli/cmdserver.py``)


def main() -> None:
    args = sys.argv[1:]
    if argv.command_name(args) in SERVED:
        from meshctl.cli import relay

        status = relay.forward(argv.home(args), args)
        if status is not None:
            raise SystemExit(status)
    from meshctl.cli.app import main as run_here

    run_here()
