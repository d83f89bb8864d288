"""The checked-files cache: a file read once by the same code is not parsed again; any change
to the file or the code misses; a file with problems is never kept; a folder others could
write is never read; a damaged entry is read afresh."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT

from meshctl.files import cache as filecache
from meshctl.files import load_path, load_text
from meshctl.problems import InvalidFileError

pytestmark = pytest.mark.unit


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MESHCTL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "files"


def counting(calls: list[str]) -> Callable[[str, str], list[str]]:
    def read(text: str, name: str) -> list[str]:
        calls.append(name)
        return [name, text.upper()]

    return read


def test_the_same_text_at_the_same_path_is_read_once(cache: Path) -> None:
    calls: list[str] = []
    first = filecache.cached("a.yaml", "x: 1\n", counting(calls))
    again = filecache.cached("a.yaml", "x: 1\n", counting(calls))
    assert first == again == ["a.yaml", "X: 1\n"]
    assert calls == ["a.yaml"]
    assert len(list(cache.glob("*.pickle"))) == 1
    assert cache.stat().st_mode & 0o777 == 0o700


# Each row: what differs from the first read; every one is a miss.
MISSES = [
    pytest.param(("b.yaml", "x: 1\n", None), id="another-path"),
    pytest.param(("a.yaml", "x: 2\n", None), id="another-text"),
    pytest.param(("a.yaml", "x: 1\n", b"other code"), id="other-reading-code"),
]


@pytest.mark.parametrize("change", MISSES)
def test_a_change_of_path_text_or_code_is_read_afresh(
    cache: Path, monkeypatch: pytest.MonkeyPatch, change: tuple[str, str, bytes | None]
) -> None:
    calls: list[str] = []
    filecache.cached("a.yaml", "x: 1\n", counting(calls))
    name, text, code = change
    if code is not None:
        monkeypatch.setattr(filecache, "_fingerprint", code)
    assert filecache.cached(name, text, counting(calls)) == [name, text.upper()]
    assert calls == ["a.yaml", name]


def test_a_file_with_problems_is_never_kept_and_reports_them_every_time(
    cache: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "mesh.yaml"
    bad.write_text("apiVersion: meshctl/v1\nkind: Mesh\nspec: {pools: 3}\n")
    for _ in range(2):
        with pytest.raises(InvalidFileError) as caught:
            load_path(bad)
        assert str(bad) in str(caught.value.problems[0])
    assert not cache.exists() or not list(cache.glob("*.pickle"))


def test_a_cached_mesh_is_the_mesh_read_afresh(cache: Path) -> None:
    path = EXAMPLES / "mesh.yaml"
    fresh = load_text(path.read_text(), str(path))
    assert load_path(path) == fresh  # read, kept
    assert len(list(cache.glob("*.pickle"))) == 1
    assert load_path(path) == fresh  # from the cache


def test_a_damaged_entry_is_read_afresh_and_replaced(cache: Path) -> None:
    calls: list[str] = []
    filecache.cached("a.yaml", "x: 1\n", counting(calls))
    (entry,) = cache.glob("*.pickle")
    entry.write_bytes(b"not a pickle")
    assert filecache.cached("a.yaml", "x: 1\n", counting(calls)) == ["a.yaml", "X: 1\n"]
    assert filecache.cached("a.yaml", "x: 1\n", counting(calls)) == ["a.yaml", "X: 1\n"]
    assert calls == ["a.yaml", "a.yaml"]


def test_a_folder_others_can_write_is_neither_read_nor_written(cache: Path) -> None:
    calls: list[str] = []
    filecache.cached("a.yaml", "x: 1\n", counting(calls))
    os.chmod(cache, 0o777)
    filecache.cached("a.yaml", "x: 1\n", counting(calls))
    filecache.cached("b.yaml", "x: 1\n", counting(calls))
    assert calls == ["a.yaml", "a.yaml", "b.yaml"]
    assert len(list(cache.glob("*.pickle"))) == 1


def test_an_empty_cache_dir_turns_the_cache_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MESHCTL_CACHE_DIR", "")
    calls: list[str] = []
    for _ in range(2):
        filecache.cached("a.yaml", "x: 1\n", counting(calls))
    assert calls == ["a.yaml", "a.yaml"]
    assert filecache.folder() is None


def test_the_default_folder_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MESHCTL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert filecache.folder() == tmp_path / "meshctl" / "files"


def test_the_oldest_read_entries_go_past_the_limit(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(filecache, "KEEP", 3)
    calls: list[str] = []
    for age, name in enumerate(("a", "b", "c")):
        filecache.cached(name, "x", counting(calls))
        entry = cache / f"{filecache.key(name, 'x')}.pickle"
        os.utime(entry, ns=(age * 10**9, age * 10**9))  # distinct times, a the oldest
    filecache.cached("a", "x", counting(calls))  # read again: now the newest
    filecache.cached("d", "x", counting(calls))  # a fourth: the oldest read (b) goes
    calls.clear()
    for name in ("a", "c", "d"):
        filecache.cached(name, "x", counting(calls))
    assert calls == []
    filecache.cached("b", "x", counting(calls))
    assert calls == ["b"]


def test_the_fingerprint_covers_every_document_model() -> None:
    code = filecache.fingerprint().decode()
    for model in sorted((ROOT / "meshctl" / "model").glob("*.py")):
        assert f"{model.name}:" in code
