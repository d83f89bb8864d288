"""A job's working directory over HTTP: packed by the CLI, unpacked by the server, safely."""

from __future__ import annotations

import base64
import io
import stat
import tarfile
from pathlib import Path

import pytest

from meshctl.app.remote import pack
from meshctl.host.packing import IGNORED
from meshctl.server.errors import ApiError
from meshctl.server.uploads import UPLOADS, discard, unpack

pytestmark = pytest.mark.unit


def test_a_folder_round_trips_less_what_a_submission_leaves_out(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "train.py").write_text("print('hi')\n")
    (source / "run.sh").write_text("#!/bin/sh\n")
    (source / ".git").mkdir()
    (source / ".git" / "HEAD").write_text("ref")
    (source / "pkg" / "x.pyc").write_bytes(b"\0")
    home = tmp_path / "home"
    home.mkdir()
    unpacked = unpack(pack(source, IGNORED), home, 2**20)
    assert unpacked.parent == home / UPLOADS
    files = sorted(str(p.relative_to(unpacked)) for p in unpacked.rglob("*") if p.is_file())
    assert files == ["pkg/train.py", "run.sh"]
    assert (unpacked / "pkg" / "train.py").read_text() == "print('hi')\n"
    assert stat.S_IMODE(unpacked.stat().st_mode) == 0o700
    discard(unpacked)
    assert not unpacked.exists()


def test_meshctl_s_home_inside_the_folder_never_travels_with_the_job(tmp_path: Path) -> None:
    # --home ./state: the home's uploads would otherwise go again with every submission
    source = tmp_path / "src"
    (source / "state" / "uploads" / "a1").mkdir(parents=True)
    (source / "state" / "uploads" / "a1" / "train.py").write_text("old\n")
    (source / "stateful.py").write_text("kept\n")  # a sibling whose name starts alike
    (source / "train.py").write_text("new\n")
    home = tmp_path / "home"
    home.mkdir()
    unpacked = unpack(pack(source, IGNORED, [source / "state"]), home, 2**20)
    files = sorted(str(p.relative_to(unpacked)) for p in unpacked.rglob("*") if p.is_file())
    assert files == ["stateful.py", "train.py"]


def _tar(*members: tuple[tarfile.TarInfo, bytes]) -> str:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data))
    return base64.b64encode(buffer.getvalue()).decode()


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _link(name: str, target: str) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info, b""


def _huge(name: str, size: int) -> str:
    """An archive whose member claims ``size`` bytes (mostly zeros: it compresses to little)."""
    return _tar(_file(name, bytes(size)))


REFUSED = [
    # id, body's working_dir, status, message
    pytest.param("not base64!", 422, "expected base64", id="not-base64"),
    pytest.param(base64.b64encode(b"plain text").decode(), 422, "gzipped tar", id="not-a-tar"),
    pytest.param(_tar(_file("../escape.py")), 422, "cannot unpack", id="dot-dot"),
    pytest.param(_tar(_link("out", "/etc/passwd")), 422, "cannot unpack", id="link-out"),
    pytest.param(_huge("big.bin", 9 * 2**10), 413, "unpacks to", id="bomb"),
]


@pytest.mark.parametrize(("encoded", "status", "message"), REFUSED)
def test_what_the_server_refuses_to_unpack(
    tmp_path: Path, encoded: str, status: int, message: str
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with pytest.raises(ApiError, match=message) as refused:
        unpack(encoded, home, 2**10)  # a cap of 1 KiB: 8 KiB unpacked at most
    assert refused.value.status == status
    assert not (tmp_path / "escape.py").exists()
    left = list((home / UPLOADS).iterdir()) if (home / UPLOADS).exists() else []
    assert left == []


def test_an_absolute_path_lands_inside_the_upload(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    unpacked = unpack(_tar(_file(str(tmp_path / "evil"))), home, 2**10)
    assert not (tmp_path / "evil").exists()
    assert [p.name for p in unpacked.rglob("evil")] == ["evil"]
