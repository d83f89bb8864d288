"""docs/CLI.md, generated from the command line's own help: ``python -m meshctl.cli.reference >
docs/CLI.md``.

Every command and group in the order ``meshctl --help`` lists them: its usage line, its short
line, its detail (the paragraphs of its help after the first), its exit codes and examples,
and a table of its options. A test compares the file with ``markdown()``, so the reference
cannot drift from what ``COMMAND --help`` says. The help texts follow one layout, which
``tests/unit/test_cli_help.py`` holds them to: a short first line, a blank line, the detail,
then the paragraphs ``Exit codes:`` (lines ``  CODE  meaning``) and ``Examples:`` (lines
``  meshctl ...``).

Like ``meshctl --help``, this imports the command modules and typer, nothing of weight.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import typer.main

from meshctl.cli.app import app

EXIT_CODES = "Exit codes:"
EXAMPLES = "Examples:"
_EXTRAS = re.compile(r"^(?P<help>.*?)(?:\s\s\[(?P<extras>[^\[\]]*)\])?$", re.DOTALL)

INTRO = """# Command reference

Every meshctl command, as its `--help` says it. This page is generated from the command line
itself (`python -m meshctl.cli.reference > docs/CLI.md`); a test fails when they differ.
Conventions shared by every command (`--output`, exit codes, errors on stderr): the
[GUIDE.md](GUIDE.md) and [JSON.md](JSON.md).
"""


@dataclass(frozen=True)
class Command:
    """One command or group of the command line, by its words after ``meshctl``."""

    path: tuple[str, ...]
    command: Any  # a typer (click) command or group

    @property
    def name(self) -> str:
        return " ".join(("meshctl", *self.path))

    @property
    def is_group(self) -> bool:
        return hasattr(self.command, "commands")


def commands() -> Iterator[Command]:
    """The root, then every command and group, depth first, in the order they are listed."""
    yield from _walk(typer.main.get_command(app), ())


def _walk(command: Any, path: tuple[str, ...]) -> Iterator[Command]:
    yield Command(path, command)
    for name, sub in getattr(command, "commands", {}).items():
        yield from _walk(sub, (*path, name))


def paragraphs(command: Any) -> list[str]:
    """The command's help, cleaned of its indentation, in paragraphs."""
    return inspect.cleandoc(command.help or "").split("\n\n")


def short_line(command: Any) -> str:
    """What a listing shows for the command: its short help, else its first paragraph."""
    return " ".join((command.short_help or paragraphs(command)[0]).split())


def section(command: Any, title: str) -> list[str]:
    """The lines of the paragraph that ``title`` opens, dedented (none: no such paragraph)."""
    for paragraph in paragraphs(command):
        head, _, body = paragraph.partition("\n")
        if head == title:
            return inspect.cleandoc(body).splitlines()
    return []


def markdown() -> str:
    """docs/CLI.md."""
    parts = [INTRO]
    for entry in commands():
        parts.append("\n".join(_entry(entry)))
    return "\n".join(parts)


def _entry(entry: Command) -> list[str]:
    cmd = entry.command
    heading = "##" if len(entry.path) < 2 else "###"
    lines = [f"{heading} `{entry.name}`", "", "```", f"Usage: {_usage(entry)}", "```", ""]
    lines += [short_line(cmd), ""]
    for paragraph in paragraphs(cmd)[1:]:
        head = paragraph.partition("\n")[0]
        if head == EXIT_CODES:
            lines += ["Exit codes:", "", *_exit_codes(section(cmd, EXIT_CODES)), ""]
        elif head == EXAMPLES:
            lines += ["Examples:", "", "```bash", *section(cmd, EXAMPLES), "```", ""]
        else:
            lines += [paragraph, ""]
    if entry.is_group:
        lines += _subcommands(entry)
    lines += _options(cmd)
    return lines


def _usage(entry: Command) -> str:
    if entry.is_group:
        return f"{entry.name} [OPTIONS] COMMAND [ARGS]..."
    words = [entry.name, "[OPTIONS]"]
    for param in entry.command.params:
        if param.param_type_name != "argument":
            continue
        word = str(param.name).upper() + ("..." if param.nargs == -1 else "")
        words.append(word if param.required else f"[{word}]")
    return " ".join(words)


def _exit_codes(lines: list[str]) -> list[str]:
    """``  CODE  meaning`` lines (a meaning may go on over more indented lines) as a list."""
    items: list[str] = []
    for line in lines:
        code, _, meaning = line.strip().partition(" ")
        if code.isdigit() and not line.startswith(" "):
            items.append(f"- `{code}`: {meaning.strip()}")
        else:
            items[-1] += " " + line.strip()
    return items


def _subcommands(entry: Command) -> list[str]:
    lines = ["| command | what it does |", "|---|---|"]
    for name, sub in entry.command.commands.items():
        lines.append(f"| `{' '.join((entry.name, name))}` | {_cell(short_line(sub))} |")
    return [*lines, ""]


def _options(command: Any) -> list[str]:
    ctx = command.make_context(command.name or "meshctl", [], resilient_parsing=True)
    rows = [_option_row(param, ctx) for param in command.params]
    shown = [row for row in rows if row is not None]
    if not shown:
        return []
    lines = ["| option | type | default | help |", "|---|---|---|---|"]
    lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in shown]
    return [*lines, ""]


def _option_row(param: Any, ctx: Any) -> tuple[str, str, str, str] | None:
    """(flags, type, default, help) of an option or argument; None for one help hides."""
    record = param.get_help_record(ctx)
    if record is None or "--help" in param.opts:
        return None
    name, _, kind = str(record[0]).partition(" <")
    kind = _typed(param, kind.removesuffix(">"))
    if param.metavar:
        name, kind = name.removesuffix(" " + param.metavar), param.metavar
    found = _EXTRAS.match(str(record[1]))
    text, extras = (found["help"], found["extras"] or "") if found else (str(record[1]), "")
    default = ""
    for extra in filter(None, extras.split("; ")):
        if extra.startswith("default: "):
            default = extra.removeprefix("default: ")
        elif extra == "required":
            default = "required"
        elif extra.startswith("env var: "):
            text += f" (env: {extra.removeprefix('env var: ')})"
        else:  # a range, e.g. x>=1
            kind = f"{kind} {extra}"
    flags = ", ".join(f"`{flag.strip()}`" for flag in name.split(", "))
    return flags, f"`{kind}`" if kind else "flag", default, text.strip()


def _typed(param: Any, shown: str) -> str:
    """The type of a parameter's value as the table names it: what its help shows (``int
    range``, ``table|json|yaml``), else its type's name (an argument's help shows none);
    ``list[...]`` for one that takes several; ``datetime``, not its formats; "" for a flag."""
    if getattr(param, "is_flag", False):
        return ""
    name = str(param.type.name)
    if param.multiple or param.nargs == -1:
        return f"list[{'Path' if name == 'path' else name}]"
    if name == "datetime":
        return name
    return shown or name


def _cell(text: str) -> str:
    """Text for a Markdown table cell: one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


if __name__ == "__main__":
    print(markdown(), end="")
