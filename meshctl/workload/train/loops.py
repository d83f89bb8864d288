"""What a train job's loop is, read from its source without running it (no Ray, no torch):
whether its function returns a value, which ``train.export`` needs (the model to export).

Read with ``ast``: the function ``module:function`` at the top level of ``module``'s file in
the job's working directory. A ``return`` with a value other than ``None`` anywhere in its
body counts (not in a function or class defined inside it). A loop that cannot be read this
way (its module not a file there, the function made at run time) is not judged here; the
run says so if it returns no model.
"""

from __future__ import annotations

import ast
from pathlib import Path


def returns_value(working_dir: Path, reference: str) -> bool | None:
    """Whether the loop's function returns a value; None when it cannot be told."""
    module, _, function = reference.partition(":")
    base = working_dir / Path(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            break
    else:
        return None
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function:
            return _returns(node)
    return None


def _returns(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    todo: list[ast.AST] = list(function.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue  # its own returns
        value = node.value if isinstance(node, ast.Return) else None
        if value is not None and not (isinstance(value, ast.Constant) and value.value is None):
            return True
        todo.extend(ast.iter_child_nodes(node))
    return False
