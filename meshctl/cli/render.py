"""The one module that prints. Commands build plain rows; this turns them into output.

``table`` is for people (rich); ``json`` and ``yaml`` are for scripts and go to stdout as they
are, without colour or wrapping. Problems and errors go to stderr, one line each.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar, Token
from enum import StrEnum
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from meshctl.problems import Problem


class Output(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


class Column(NamedTuple):  # not a dataclass: the submit client imports this module
    key: str
    header: str
    justify: str = "left"


def _stdout_console() -> Any:
    from rich.console import Console

    # Piped output is not cut to 80 columns: a type name like p5en.48xlarge must stay whole.
    return Console(soft_wrap=False, width=None if sys.stdout.isatty() else 200)


def emit(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[Column],
    output: Output,
    *,
    title: str = "",
    caption: str = "",
) -> None:
    """Rows as a table, or the same rows as JSON / YAML."""
    if output is not Output.table:
        emit_data(list(rows), output)
        return
    from rich.table import Table

    table = Table(title=title or None, caption=caption or None)
    for col in columns:
        table.add_column(col.header, justify=col.justify)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*(cell(row.get(col.key)) for col in columns))
    _stdout_console().print(table)


def emit_data(data: Any, output: Output) -> None:
    """Structured data for scripts (json/yaml); a table output falls back to indented JSON."""
    if output is Output.yaml:
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    else:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def clock(at_s: float) -> str:
    """A moment for people: the local time of day, ``14:04:50`` (tables, event lines; scripts
    get ``meshctl.jsondata.timestamp``)."""
    import time

    return time.strftime("%H:%M:%S", time.localtime(at_s))


def ago(seconds: float) -> str:
    """A duration for people, one format for a whole column: whole units, the largest two
    (``42s``, ``17m05s``, ``3h05m``, ``6d04h``); negative (a clock skew) is ``0s``."""
    whole = max(0, int(seconds))
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def clock_of(at: str) -> str:
    """``clock`` of a moment as ``jsondata.timestamp`` wrote it (a row built for ``-o json``)."""
    import datetime as dt

    return clock(dt.datetime.fromisoformat(at).timestamp())


def esc(text: object) -> str:
    """User text (expressions, names) inside rich markup: ``[p]`` must stay ``[p]``."""
    from rich.markup import escape

    return escape(str(text))


def cell(value: Any) -> str:
    """A value as a table shows it: ``-`` for none, prices to 4 decimals, lists joined."""
    if value is None:
        return "-"
    if isinstance(value, float):  # up to 4 decimals, the precision of published prices
        return f"{value:,.4f}".rstrip("0").rstrip(".") if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, list | tuple):
        return esc(", ".join(str(v) for v in value))
    return esc(value)


UNCERTAIN = "~"  # beside a price or figure the catalog marks uncertain


def uncertain_caption(what: str = "a price") -> str:
    """The caption of a table that marks ``what`` uncertain."""
    return f"{UNCERTAIN} marks {what} the catalog says may be wrong (see its notes)"


def marked(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> list[dict[str, Any]]:
    """For a table: the figures under ``keys`` of the rows marked ``price_uncertain``, with
    the mark."""
    return [
        {**r, **{k: f"{UNCERTAIN}{cell(r[k])}" for k in keys if r[k] is not None}}
        if r["price_uncertain"]
        else dict(r)
        for r in rows
    ]


def say(message: str) -> None:
    """A line for people on stdout (rich markup allowed)."""
    _stdout_console().print(message, highlight=False)


def plain(line: str) -> None:
    """A line exactly as given (no markup, no wrapping): summaries that tools parse."""
    sys.stdout.write(line + "\n")


_FLAG = re.compile(r"^(--[a-z0-9][a-z0-9-]*(?:/--[a-z0-9][a-z0-9-]*)*): (.+)$", re.DOTALL)


class _Run:
    """One command line being run: the ``-o`` it asked for, and the problems kept for its
    error document under ``-o json|yaml``."""

    __slots__ = ("output", "pending")

    def __init__(self, output: str | None) -> None:
        self.output = output
        self.pending: list[str | Problem] = []


# Set by the root group for each command line it runs and reset when it ends (a context
# variable, not a global: each thread sees its own, and a later command line in the same
# process, or a direct call after one, starts from no ``-o``).
_RUN: ContextVar[_Run] = ContextVar("meshctl_run", default=_Run(None))  # noqa: B039


def begin_run() -> Token[_Run]:
    """A command line starts: nothing asked yet, nothing kept. Give the token to ``end_run``."""
    return _RUN.set(_Run(None))


def end_run(token: Token[_Run]) -> None:
    """A command line ended: its ``-o`` and anything it kept go with it."""
    _RUN.reset(token)


def remember_output(output: str | None) -> None:
    """What ``-o`` the command line asked for, read by the root group before parsing."""
    _RUN.set(_Run(output))


def structured_errors() -> bool:
    """Whether errors and warnings go to stderr as JSON (the command line said -o json|yaml)."""
    return _RUN.get().output in (Output.json.value, Output.yaml.value)


def problems(lines: Iterable[str | Problem]) -> None:
    """One problem per line on stderr, plain text so editors and CI can parse file:line.
    Under ``-o json|yaml`` they are kept for the command's one error document (``flush``)."""
    if structured_errors():
        _RUN.get().pending.extend(lines)
        return
    for line in lines:
        sys.stderr.write(f"error: {line}\n")


def warnings(lines: Iterable[str]) -> None:
    """Something the user should know that did not stop the command (exit 0): ``warning:``
    lines on stderr, or one JSON line each, ``{"warning": {"message": ...}}``."""
    for line in lines:
        if structured_errors():
            sys.stderr.write(json.dumps({"warning": {"message": line}}) + "\n")
        else:
            sys.stderr.write(f"warning: {line}\n")


def failure(exit_code: int, found: Iterable[str | Problem]) -> None:
    """A failing command's problems (and any kept before): ``error:`` lines, or under
    ``-o json|yaml`` one JSON document on one line of stderr (``shapes.ErrorDocument``)."""
    run = _RUN.get()
    every, run.pending = [*run.pending, *found], []
    if not structured_errors():
        for line in every:
            sys.stderr.write(f"error: {line}\n")
        return
    located = [_located(p) for p in every]
    message = str(every[0]) if every else f"failed with exit code {exit_code}"
    document = {"error": {"exit_code": exit_code, "message": message, "problems": located}}
    sys.stderr.write(json.dumps(document) + "\n")


def flush(exit_code: int) -> None:
    """At the end of a command: problems kept under ``-o json|yaml`` become its error
    document (a failing exit always gets one), or warnings if it exits 0."""
    run = _RUN.get()
    if exit_code:
        if structured_errors():
            failure(exit_code, [])
    elif run.pending:
        kept, run.pending = run.pending, []
        warnings(str(p) for p in kept)


def _located(problem: str | Problem) -> dict[str, Any]:
    from meshctl.problems import Problem  # a dataclass: not on the way of a submission

    if isinstance(problem, Problem):
        return {
            "file": problem.path,
            "line": problem.line,
            "field": problem.field or None,
            "message": problem.message,
        }
    flag = _FLAG.match(problem)
    if flag is not None:
        return {"file": None, "line": None, "field": flag.group(1), "message": flag.group(2)}
    return {"file": None, "line": None, "field": None, "message": problem}


def submitted(document: Mapping[str, Any], warned: Iterable[str], output: str) -> None:
    """What a submission answered (``shapes.Submitted``), printed the same wherever it was
    admitted (in this process, by the home's local API, by the API server): its warnings;
    then with ``-o json|yaml`` the document, else the plan (a dry run, ``--explain``) and the
    job's id, plain lines (no markup: the submit client prints them before rich is imported)."""
    warnings(warned)
    if output != Output.table.value:
        emit_data(document, Output(output))
        return
    decision = document.get("decision")
    if decision:
        named = document.get("priority_class")
        plain(
            f"{document['name']} (priority {document['priority']}"
            f"{', class ' + named if named else ''}): on the idle mesh it would be "
            f"{decision['summary']}"
        )
        for note in decision.get("notes", []):
            plain(f"  {note}")
    if document.get("id"):
        plain(str(document["id"]))


def raw(text: str) -> None:
    """Text exactly as it is, no newline added (a log as it grows)."""
    sys.stdout.write(text)
    sys.stdout.flush()


def note(line: str) -> None:
    """A line for people on stderr, apart from the output (what a command waits for)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


@contextmanager
def progress(message: str) -> Iterator[Callable[[str], None]]:
    """A spinner on stderr while something slow runs; the callback updates its message."""
    console = _stderr_console()
    if not console.is_terminal and structured_errors():  # stderr holds JSON lines only
        yield lambda step: None
        return
    if not console.is_terminal:  # logs and pipes get plain lines, not animation
        sys.stderr.write(message + "\n")

        last = [""]

        def line(step: str) -> None:
            if step != last[0]:  # a poller repeats itself; a log needs each change once
                sys.stderr.write(f"  {step}\n")
                last[0] = step

        yield line
        return
    with console.status(message) as status:
        yield lambda step: status.update(f"{message}: {step}")


@contextmanager
def progress_bar(message: str, total: float) -> Iterator[Callable[[float], None]]:
    """A progress bar on stderr for a long computation; the callback reports how far it is
    (same unit as ``total``). Not a terminal: nothing (logs get the result, not a bar)."""
    console = _stderr_console()
    if not console.is_terminal:
        yield lambda done: None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(message, total=total)
        yield lambda done: bar.update(task, completed=min(done, total))


@contextmanager
def progress_status(
    message: str, total: float, every_s: float = 5.0, clock: Callable[[], float] | None = None
) -> Iterator[Callable[[float, str], None]]:
    """A long computation's progress on stderr; the callback takes how far it is (the unit of
    ``total``) and a status ("day 0.3 of 0.5, 54 of 110 jobs ended"). In a terminal: a bar
    with the status. Elsewhere (a log, a pipe, CI): a plain line ``message: status`` at most
    every ``every_s`` seconds of wall time (``clock``, default ``time.monotonic``), and the
    last status when it ends, so a log shows the run alive and how far it got. With -o
    json|yaml (stderr holds JSON lines only): nothing."""
    console = _stderr_console()
    if console.is_terminal:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as bar:
            task = bar.add_task(message, total=total)
            yield lambda done, status: bar.update(
                task, completed=min(done, total), description=f"{message}: {status}"
            )
        return
    if structured_errors():
        yield lambda done, status: None
        return
    yield from _status_lines(message, every_s, clock)


def _status_lines(
    message: str, every_s: float, clock: Callable[[], float] | None
) -> Iterator[Callable[[float, str], None]]:
    import time

    now = clock or time.monotonic
    said_at, said, latest = now(), "", ""

    def line(done: float, status: str) -> None:
        nonlocal said_at, said, latest
        latest = status
        if now() - said_at >= every_s:
            _stderr_line(f"{message}: {status}")
            said_at, said = now(), status

    yield line
    if latest and latest != said:  # how far it got, once at the end
        _stderr_line(f"{message}: {latest}")


def _stderr_line(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def show(renderable: Any) -> None:
    """A rich renderable (a table, a group of them) on stdout."""
    _stdout_console().print(renderable)


@contextmanager
def live(renderable: Any) -> Iterator[Callable[[Any], None]]:
    """A screen that redraws in place; the callback replaces what it shows."""
    from rich.live import Live

    with Live(renderable, console=_stdout_console(), refresh_per_second=4, screen=False) as view:
        yield view.update


def fitted(build: Callable[[int], Any], most: int, size: tuple[int, int] | None = None) -> Any:
    """``build(n)`` for the largest ``n`` up to ``most`` (rows of its own to leave out) whose
    lines fit a screen of ``size`` (columns, lines; default: stdout's terminal) with one line
    to spare, which ``live`` keeps for the cursor (more and it ends the screen in "...");
    ``build(0)`` when none does."""
    console = _stdout_console()
    width, height = size or (console.width, console.height)
    options = console.options.update(width=width)
    for n in range(most, 0, -1):
        shown = build(n)
        if len(console.render_lines(shown, options, pad=False)) < height:
            return shown
    return build(0)


def relayed(said: Mapping[str, Any]) -> None:
    """What a command the API server ran on its host printed, and its exit code, as if run
    here."""
    sys.stdout.write(said.get("stdout") or "")
    sys.stderr.write(said.get("stderr") or "")
    code = int(said.get("exit_code") or 0)
    if code:
        raise SystemExit(code)
