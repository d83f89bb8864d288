"""Submodules of other packages that meshctl never uses, kept out of its start-up.

The ``cel`` package imports its own command line, ``cel.cli`` (prompt_toolkit, pygments, rich,
typer), from its ``__init__``, whoever imports it; meshctl only compiles and evaluates
expressions. With typer and pydantic already imported, ``import cel`` took 150 ms, a fifth of
what ``meshctl submit`` took then (``benchmarks/cli_startup.py``); 7 ms without its command
line. ``defer`` puts a stand-in in ``sys.modules`` first; the import system takes it as the
module, and the real one is imported when something reads one of its attributes, so a program
that does use it still works.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import threading
import types
from typing import Any

UNUSED = ("cel.cli",)  # what the meshctl command defers (cli/app.py)
_LOADING = threading.RLock()  # two threads' first uses import it once


class _Deferred(types.ModuleType):
    """A module imported on first use: every attribute read goes to the real one."""

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):  # a tool probing modules (__file__, __path__): not a use
            raise AttributeError(attr)
        return getattr(load(self.__name__), attr)


def defer(*names: str) -> None:
    """Import each submodule of ``names`` (``package.module``) only when it is used. Nothing
    changes for one already imported."""
    for name in names:
        sys.modules.setdefault(name, _Deferred(name))


def load(name: str) -> types.ModuleType:
    """The real module ``name``, imported now if only its stand-in was there."""
    with _LOADING:
        found = sys.modules.get(name)
        if found is not None and not isinstance(found, _Deferred):
            return found
        return _import(name, found)


def _import(name: str, found: types.ModuleType | None) -> types.ModuleType:
    package, _, child = name.rpartition(".")
    parent = importlib.import_module(package)
    spec = importlib.machinery.PathFinder.find_spec(name, parent.__path__)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"no module named {name!r}", name=name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        if found is None:
            del sys.modules[name]
        else:
            sys.modules[name] = found  # the stand-in again: a later use tries again
        raise
    setattr(parent, child, module)
    return module
