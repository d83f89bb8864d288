"""CEL's literal tokens held to the language's exact rules, and their values.

The lexer (lex.py) is lenient so it never fails; these checks are what make an unterminated
string, an unknown escape, ``0X1F``, ``1.5u`` or an int past 64 bits a syntax error, as they
are for ``cel.compile``.
"""

from __future__ import annotations

import re
from typing import Final

from meshctl.policy.expr.nodes import LiteralKind

INT_MAX: Final = 2**63 - 1
UINT_MAX: Final = 2**64 - 1

_INT: Final = re.compile(r"[0-9]+|0x[0-9a-fA-F]+")
_UINT: Final = re.compile(r"(?:[0-9]+|0x[0-9a-fA-F]+)[uU]")
_FLOAT: Final = re.compile(
    r"[0-9]+\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+|\.[0-9]+(?:[eE][+-]?[0-9]+)?"
)
_ESC: Final = (
    r"""\\(?:[abfnrtv"'\\?`]|[0-3][0-7]{2}|[xX][0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8})"""
)
_QUOTED: Final = {
    '"""': re.compile(rf'"""((?:{_ESC}|[^\\])*?)"""', re.DOTALL),
    "'''": re.compile(rf"'''((?:{_ESC}|[^\\])*?)'''", re.DOTALL),
    '"': re.compile(rf'"((?:{_ESC}|[^\\"\n\r])*)"'),
    "'": re.compile(rf"'((?:{_ESC}|[^\\'\n\r])*)'"),
}
_RAW: Final = {
    '"""': re.compile(r'"""(.*?)"""', re.DOTALL),
    "'''": re.compile(r"'''(.*?)'''", re.DOTALL),
    '"': re.compile(r'"([^"\n\r]*)"'),
    "'": re.compile(r"'([^'\n\r]*)'"),
}
_SIMPLE: Final = {
    "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
    '"': '"', "'": "'", "\\": "\\", "?": "?", "`": "`",
}  # fmt: skip
_ESCAPE_RE: Final = re.compile(_ESC)


def number(text: str, negative: bool) -> tuple[LiteralKind, object]:
    """The kind and value of a number token (``negative``: a single ``-`` sign before it).

    Raises ValueError for a token CEL's lexer would split (and so reject) or a value out of
    range: ints are 64-bit signed, uints 64-bit unsigned, doubles finite."""
    if _UINT.fullmatch(text) and not negative:
        digits = text[:-1]  # decimal with leading zeros too (`01u`), as CEL reads it
        value = int(digits, 16) if digits.startswith("0x") else int(digits)
        if value > UINT_MAX:
            raise ValueError("invalid uint literal")
        return "uint", value
    if _INT.fullmatch(text):
        value = int(text, 16) if text.startswith("0x") else int(text)
        if value > INT_MAX + (1 if negative else 0):
            raise ValueError("invalid int literal")
        return "int", -value if negative else value
    if _FLOAT.fullmatch(text):
        real = float(text)
        if real == float("inf"):
            raise ValueError("invalid double literal")
        return "double", -real if negative else real
    raise ValueError(f"invalid number {text!r}")


def is_signed_number(text: str) -> bool:
    """Whether a ``-`` directly before this number token is its sign (ints and doubles have
    one; uints do not)."""
    return bool(_INT.fullmatch(text) or _FLOAT.fullmatch(text))


def string(text: str) -> tuple[LiteralKind, object]:
    """The kind (string or bytes) and value of a string token; ValueError if CEL rejects it."""
    is_bytes = text[:1] in "bB"
    rest = text[1:] if is_bytes else text
    raw = rest[:1] in "rR"
    rest = rest[1:] if raw else rest
    quote = next((q for q in ('"""', "'''", '"', "'") if rest.startswith(q)), None)
    match = None if quote is None else (_RAW if raw else _QUOTED)[quote].fullmatch(rest)
    if match is None:
        raise ValueError("invalid string literal")
    body = match.group(1)
    if is_bytes:
        return "bytes", body.encode() if raw else _unescape_bytes(body)
    return "string", body if raw else _unescape(body)


def _code_point(escape: str) -> int | str:
    kind = escape[1]
    if kind in _SIMPLE:
        return _SIMPLE[kind]
    if kind in "xX":
        return int(escape[2:], 16)
    if kind in "uU":
        return int(escape[2:], 16)
    return int(escape[1:], 8)


def _unescape(body: str) -> str:
    def one(match: re.Match[str]) -> str:
        point = _code_point(match.group())
        if isinstance(point, str):
            return point
        if 0xD800 <= point <= 0xDFFF or point > 0x10FFFF:
            raise ValueError("invalid string literal")
        return chr(point)

    return _ESCAPE_RE.sub(one, body)


def _unescape_bytes(body: str) -> bytes:
    out = bytearray()
    pos = 0
    for match in _ESCAPE_RE.finditer(body):
        out += body[pos : match.start()].encode()
        escape = match.group()
        if escape[1] in "uU":
            raise ValueError("invalid bytes literal")
        point = _code_point(escape)
        out += point.encode() if isinstance(point, str) else bytes([point])
        pos = match.end()
    return bytes(out + body[pos:].encode())
