"""CEL expressions as data: a parser into an AST, types, the runtime's functions, a checker.

The ``cel`` package compiles and runs expressions but offers no AST and no type checker, so
this package has its own, written to accept exactly what ``cel.compile`` accepts and to type
what the installed ``cel`` really does at run time (which differs from the CEL specification
in places: it compares int with double, negates a bool, adds a map's keys to a list):

    tree = parse(source)                     # nodes.py; ParseError with a column otherwise
    checked = check(tree, env)               # check.py over types.py and functions.py
    unguarded(source, tree, checked.lookups) # guards.py: map lookups no presence test guards

Pure: standard library only (and ``cel`` in the tests that verify the function table).
"""

from __future__ import annotations

from meshctl.policy.expr.check import Checked, TypeProblem, check, env_of
from meshctl.policy.expr.nodes import Node
from meshctl.policy.expr.parse import ParseError, parse

__all__ = ["Checked", "Node", "ParseError", "TypeProblem", "check", "env_of", "parse"]
