"""``python -m meshctl``: the same CLI (the controller daemon is started this way)."""

from meshctl.cli.entry import main

main()
