"""Help a person can scan: every listing line is one short line; every command's help has its
detail, exit codes and examples under ``COMMAND --help``, written as it renders on 80 columns
(the app's rich help keeps a paragraph's line breaks); every example parses against the
command it is under; docs/CLI.md is what the command line says."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest
from typer._click.exceptions import UsageError

from meshctl.cli.reference import (
    EXAMPLES,
    EXIT_CODES,
    Command,
    commands,
    markdown,
    paragraphs,
    section,
    short_line,
)
from tests.conftest import ROOT

pytestmark = pytest.mark.unit

LISTING_MAX = 70  # a command's line in a listing, beside its name, on 80 columns
LINE_MAX = 76  # a line of a help text: shown as written on 80 columns
RICH_TAG = re.compile(r"\[[a-z#/@]")  # what rich takes for markup and swallows: [env: ...]
SHELL_ENDS = frozenset({">", "<", "|", "&&", "||", ";"})

EVERY = list(commands())
SUBCOMMANDS = [c for c in EVERY if c.path]
LEAVES = [c for c in EVERY if not c.is_group]


def ids(entries: list[Command]) -> list[str]:
    return [c.name for c in entries]


@pytest.mark.parametrize("entry", SUBCOMMANDS, ids=ids(SUBCOMMANDS))
def test_a_listing_line_is_one_short_line(entry: Command) -> None:
    first = paragraphs(entry.command)[0]
    assert "\n" not in first, f"{entry.name}: the first paragraph wraps: {first!r}"
    assert len(short_line(entry.command)) <= LISTING_MAX, short_line(entry.command)


@pytest.mark.parametrize("entry", EVERY, ids=ids(EVERY))
def test_help_lines_render_as_written(entry: Command) -> None:
    long = [line for line in (entry.command.help or "").splitlines() if len(line) > LINE_MAX]
    assert long == [], f"{entry.name}: lines over {LINE_MAX} characters"
    params = entry.command.params
    texts = [entry.command.help or "", *(getattr(p, "help", None) or "" for p in params)]
    swallowed = [text for text in texts if RICH_TAG.search(text)]
    assert swallowed == [], f"{entry.name}: rich would take these for markup"


@pytest.mark.parametrize("entry", LEAVES, ids=ids(LEAVES))
def test_a_command_has_examples_of_itself_that_parse(entry: Command) -> None:
    examples = section(entry.command, EXAMPLES)
    assert examples, f"{entry.name}: no {EXAMPLES} paragraph"
    for example in examples:
        words = shlex.split(example, comments=True)
        cut = next((i for i, w in enumerate(words) if w in SHELL_ENDS), len(words))
        words = words[:cut]
        assert words[0] == "meshctl", example
        at = _find(words, list(entry.path))
        assert at is not None, f"{example!r} is not an example of {entry.name}"
        # the command's own parsing: option names, their values' types, its arguments
        entry.command.make_context(entry.path[-1], words[at:])


def _find(words: list[str], path: list[str]) -> int | None:
    """The index just after the first run of ``path`` in ``words``."""
    for start in range(1, len(words) - len(path) + 1):
        if words[start : start + len(path)] == path:
            return start + len(path)
    return None


@pytest.mark.parametrize("entry", LEAVES, ids=ids(LEAVES))
def test_exit_codes_are_listed_one_a_line(entry: Command) -> None:
    for line in section(entry.command, EXIT_CODES):
        code = line.split()[0]
        assert line.startswith(" ") or code in {"0", "1", "2", "124"}, line


def test_an_example_with_an_unknown_option_fails_the_check() -> None:
    wait = next(c for c in LEAVES if c.path == ("jobs", "wait")).command
    with pytest.raises(UsageError, match="--timeut"):
        wait.make_context("wait", ["3f2a9c", "--timeut", "1"])


def test_docs_cli_md_is_what_the_command_line_says() -> None:
    written = (ROOT / "docs" / "CLI.md").read_text()
    assert written == markdown(), "run: python -m meshctl.cli.reference > docs/CLI.md"


def test_the_reference_imports_nothing_of_weight() -> None:
    heavy = ("ray", "boto3", "google.cloud", "torch", "fastapi")
    script = (
        "import sys\n"
        "from meshctl.cli.reference import markdown\n"
        "markdown()\n"
        f"print([m for m in {heavy!r} if m in sys.modules])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == "[]"
