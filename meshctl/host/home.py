"""Where meshctl keeps its state when no ``--home`` is given. Its own module, importing the
standard library only, so that the entry point (``cli/argv.py``) finds a home before anything
heavy is imported, and the state package (``meshctl.state``) reads it the same way."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def default_home(environ: Mapping[str, str] = os.environ) -> Path:
    """``$MESHCTL_HOME`` if set and non-empty, else ``~/.meshctl`` (``~`` expanded)."""
    return Path(environ.get("MESHCTL_HOME") or "~/.meshctl").expanduser()
