"""The ``meshctl`` command's entry point.

``meshctl submit`` goes first to the submit client (``submitclient.py``), which sends the job
to an API (the API server, or the home's local API while a controller runs) and prints the
answer: the command then costs this process an interpreter's start, the standard library and
a round trip, not the imports of the CLI. Anything else, or a submission the client leaves to
the CLI, runs here (``app.main``). Until then only the standard library is imported.
"""

from __future__ import annotations

import sys

from meshctl.cli import argv


def main() -> None:
    args = sys.argv[1:]
    if argv.command_name(args) == "submit":
        from meshctl.cli import submitclient

        status = submitclient.run(args)
        if status is not None:
            from meshctl.cli.leave import leave

            leave(status)  # without the interpreter's teardown, as the CLI's submit leaves
    from meshctl.cli.app import main as run_here

    run_here()
