"""The home's run folder: the controller's pid and heartbeat, tokens, ``up.json``, process
logs. Its own module, so that a command that only looks in it (``submit`` nudging the
controller) imports neither the pools nor the clouds."""

from __future__ import annotations

from pathlib import Path

from meshctl.state.private import private_dir, private_home


def run_dir(home: Path) -> Path:
    return home / "run"


def make_run_dir(home: Path) -> Path:
    """The run folder, created private: 0700, like its home (``meshctl.state.private``); an
    older, looser one is tightened."""
    private_home(home)
    return private_dir(run_dir(home))
