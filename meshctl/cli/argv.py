"""What a command line names before any of the CLI is imported: the command, and the home.

The entry point (``entry.py``) reads these to decide whether the submit client sends the
command as a request (``submitclient.py``), so this module imports the standard library only;
``app.py`` uses the same functions, so that the two never read a command line differently.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from meshctl.host.home import default_home

# The root options that take a value (a test holds this to the root command's own).
ROOT_VALUE_OPTIONS = frozenset({"--home", "--mesh", "-m", "--providers", "--store"})


def command_name(args: Sequence[str]) -> str | None:
    """The command or group ``args`` name after the root's options; None when an option
    other than those comes first (``--help``), or when there is none."""
    words = iter(args)
    for word in words:
        if word in ROOT_VALUE_OPTIONS:
            next(words, None)
        elif word.split("=", 1)[0] in ROOT_VALUE_OPTIONS or word[:2] in ROOT_VALUE_OPTIONS:
            continue  # --home=DIR, -mFILE
        elif word.startswith("-"):
            return None
        else:
            return word
    return None


def home(args: Sequence[str], environ: Mapping[str, str] = os.environ) -> Path:
    """The home ``args`` run in: the root's ``--home`` (the last one given before the
    command, as the option parser takes it), else ``default_home``."""
    found: str | None = None
    words = iter(args)
    for word in words:
        if word == "--home":
            found = next(words, found)
        elif word.startswith("--home="):
            found = word.split("=", 1)[1]
        elif word in ROOT_VALUE_OPTIONS:
            next(words, None)
        elif not word.startswith("-"):
            break  # the command: what follows is its own
    return Path(found) if found else default_home(environ)
