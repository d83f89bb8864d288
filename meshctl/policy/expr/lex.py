"""CEL's tokens: one regular expression, total over any text.

Lenient on purpose: an unterminated string or a malformed number is still one token, so that
``tokenize`` never fails and the size and reference checks can run over any input. The parser
(parse.py) holds each literal token to CEL's exact lexical rules (``STRING``, ``NUM_*``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final, NamedTuple

_TOKEN_RE: Final = re.compile(
    r"""
      (?P<space>[\t\n\f\r ]+)
    | (?P<comment>//[^\n]*)
    | (?P<str>
          (?:[rR][bB]?|[bB][rR])
          (?:\"\"\"(?:(?!\"\"\").)*(?:\"\"\"|\Z) | '''(?:(?!''').)*(?:'''|\Z)
            | "[^"\r\n]*"? | '[^'\r\n]*'? )
        | [bB]?
          (?:\"\"\"(?:\\.|(?!\"\"\")[^\\])*(?:\"\"\"|\Z) | '''(?:\\.|(?!''')[^\\])*(?:'''|\Z)
            | "(?:\\.|[^\\"\r\n])*"? | '(?:\\.|[^\\'\r\n])*'? ) )
    | (?P<num>0[xX][0-9a-fA-F]+[uU]? | (?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[uU]?)
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<op>==|!=|<=|>=|&&|\|\||.)
    """,
    re.VERBOSE | re.DOTALL,
)


class Token(NamedTuple):
    kind: str  # "str", "num", "ident" or "op"
    text: str
    pos: int


def tokenize(source: str) -> Iterator[Token]:
    """The tokens of ``source`` without spaces and comments; total over any text."""
    pos = 0
    while pos < len(source):
        match = _TOKEN_RE.match(source, pos)
        if match is None or match.lastgroup is None:  # unreachable: `.` matches any char
            yield Token("op", source[pos], pos)
            pos += 1
            continue
        if match.lastgroup not in ("space", "comment"):
            yield Token(match.lastgroup, match.group(), pos)
        pos = match.end()
