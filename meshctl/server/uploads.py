"""A job's working directory sent with its submission: a gzipped tar, base64 in the body.

The request body is capped before it is parsed (``MAX_UPLOAD_MIB`` by default, ``meshctl
server --max-upload``); the archive is unpacked with tarfile's ``data`` filter (no absolute
paths, no ``..``, no links out, no devices) and refused if its members add up to more than
``EXPANSION`` times the cap, checked before anything is written.
"""

from __future__ import annotations

import base64
import binascii
import secrets
import shutil
from pathlib import Path

from meshctl.server.errors import invalid, too_large
from meshctl.state.private import private_dir

MAX_UPLOAD_MIB = 128  # the body; the package limit (100 MiB unpacked) applies after
EXPANSION = 8  # what a compressed tree may unpack to, as a multiple of the cap
UPLOADS = "uploads"


def unpack(encoded: str, home: Path, cap_bytes: int) -> Path:
    """The archive unpacked in a fresh private folder under ``home/uploads``; the caller
    removes it (``discard``). A malformed archive is a 422, a large one a 413."""
    from meshctl.controller.packages import BadArchive, TooLarge, unpack_archive

    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise invalid("working_dir: expected base64 of a gzipped tar") from None
    private_dir(home / UPLOADS)
    target = home / UPLOADS / secrets.token_hex(8)
    try:
        unpack_archive(data, target, cap_bytes * EXPANSION)
    except TooLarge as err:
        raise too_large(f"working_dir: {err}") from None
    except BadArchive as err:
        raise invalid(f"working_dir: {err}") from None
    return target


def discard(folder: Path | None) -> None:
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
