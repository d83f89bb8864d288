"""A node's dataset cache for real on local disk: datasets in a source folder (a shared
folder, as a location), and peers that are real agents on loopback serving their caches."""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshctl.agent.probe import Limits
from meshctl.agent.server import Agent, serve
from meshctl.agent.sources import KernelLog
from meshctl.data.cache import CacheError, NodeCache
from tests.conftest import wait_until

pytestmark = pytest.mark.unit

TOKEN = "peer-token"
MIB = 1024**2


def dataset(folder: Path, files: dict[str, int]) -> str:
    """A dataset of files of these sizes (distinct bytes each); its location."""
    for i, (name, size) in enumerate(sorted(files.items())):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes([i % 251]) * size)
    return str(folder)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def cache_at(path: Path, capacity: int = 100 * MIB) -> NodeCache:
    return NodeCache(path, capacity, TOKEN, clock=Clock())


def test_a_dataset_is_fetched_once_then_served_from_the_cache(tmp_path: Path) -> None:
    src = dataset(tmp_path / "src", {"a.bin": MIB, "shards/b.bin": 2 * MIB})
    cache = cache_at(tmp_path / "cache")
    first = cache.ensure(src)
    assert (first.complete, first.fetched_from, first.size_bytes) == (True, "source", 3 * MIB)
    again = cache.ensure(src)
    assert again.key == first.key
    assert (cache.counters.source_bytes, cache.counters.hits, cache.counters.misses) == (
        3 * MIB,
        1,
        1,
    )
    local = cache.path_for(src)
    assert (local / "shards" / "b.bin").read_bytes() == (Path(src) / "shards/b.bin").read_bytes()


def test_a_changed_source_is_a_new_version_and_the_link_moves(tmp_path: Path) -> None:
    src = dataset(tmp_path / "src", {"a.bin": MIB})
    cache = cache_at(tmp_path / "cache")
    old = cache.ensure(src)
    (Path(src) / "a.bin").write_bytes(b"x" * (MIB + 1))
    new = cache.ensure(src)
    assert new.key != old.key
    assert (cache.path_for(src) / "a.bin").stat().st_size == MIB + 1


def test_one_file_is_a_location_too(tmp_path: Path) -> None:
    dataset(tmp_path / "src", {"only.parquet": MIB})
    src = str(tmp_path / "src" / "only.parquet")
    cache = cache_at(tmp_path / "cache")
    cache.ensure(src)
    assert cache.path_for(src).read_bytes() == Path(src).read_bytes()


@pytest.mark.parametrize(
    "damage",
    ["truncated", "corrupt"],
    ids=["a truncated file is found by its size", "a corrupt file is found by its SHA-256"],
)
def test_a_damaged_cached_file_is_fetched_again(tmp_path: Path, damage: str) -> None:
    src = dataset(tmp_path / "src", {"a.bin": MIB})
    cache = cache_at(tmp_path / "cache")
    entry = cache.ensure(src)
    held = tmp_path / "cache" / "entries" / entry.key / "a.bin"
    if damage == "truncated":
        held.write_bytes(held.read_bytes()[: MIB // 2])
    else:
        held.write_bytes(b"\xff" + held.read_bytes()[1:])
    cache.ensure(src, check=damage == "corrupt")
    assert cache.counters.refetched == 1
    assert cache.counters.source_bytes == 2 * MIB
    assert held.read_bytes() == (Path(src) / "a.bin").read_bytes()


def test_eviction_is_least_recently_used_and_never_takes_what_a_job_reads(
    tmp_path: Path,
) -> None:
    a = dataset(tmp_path / "a", {"x": 4 * MIB})
    b = dataset(tmp_path / "b", {"x": 4 * MIB})
    c = dataset(tmp_path / "c", {"x": 4 * MIB})
    cache = cache_at(tmp_path / "cache", capacity=10 * MIB)
    cache.ensure(a)
    cache.ensure(b)
    cache.pin([a])  # a job on the node reads a
    cache.ensure(c)  # room for c: b goes though a is older
    assert {e.location for e in cache.entries()} == {a, c}
    assert cache.path_for(a).is_symlink()
    assert not cache.path_for(b).exists()
    cache.pin([a, c])
    with pytest.raises(CacheError, match="does not fit in this node's cache"):
        cache.ensure(b)
    assert {e.location for e in cache.entries()} == {a, c}  # nothing was evicted for it
    assert b in cache.failed


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda p: str(p / "missing"), "not found"),
        (lambda p: dataset(p / "empty", {}), "holds no files"),
    ],
    ids=["a missing location", "an empty folder"],
)  # fmt: skip
def test_an_unreadable_location_is_an_error_with_its_reason(
    tmp_path: Path, make: object, said: str
) -> None:
    (tmp_path / "empty").mkdir()
    location = make(tmp_path)  # type: ignore[operator]
    cache = cache_at(tmp_path / "cache")
    with pytest.raises(CacheError, match=said):
        cache.ensure(location)
    assert said in cache.inventory()["failed"][location]
    assert os.listdir(tmp_path / "cache" / "partial") == []


def test_a_cache_restarted_keeps_its_complete_entries_and_drops_partial_ones(
    tmp_path: Path,
) -> None:
    src = dataset(tmp_path / "src", {"a.bin": MIB})
    cache = cache_at(tmp_path / "cache")
    entry = cache.ensure(src)
    (tmp_path / "cache" / "partial" / "half").mkdir()
    again = cache_at(tmp_path / "cache")
    assert [e.key for e in again.entries()] == [entry.key]
    assert os.listdir(tmp_path / "cache" / "partial") == []
    again.ensure(src)
    assert again.counters.hits == 1
    assert again.counters.source_bytes == 0


# --- peers: real agents on loopback --------------------------------------------------------


def _agent(cache: NodeCache, name: str) -> Agent:
    return Agent(name, Limits(), None, KernelLog(None), cache=cache)


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[tuple[NodeCache, str]]:
    """A node's agent with a cache, serving on loopback: (its cache, its base URL)."""
    cache = cache_at(tmp_path / "peer-cache")
    server = serve(_agent(cache, "n1"), "127.0.0.1", 0, TOKEN)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield cache, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_second_node_reads_from_its_peer_not_the_source(
    tmp_path: Path, peer: tuple[NodeCache, str]
) -> None:
    src = dataset(tmp_path / "src", {"a.bin": 3 * MIB, "b/c.bin": MIB})
    held, url = peer
    held.ensure(src)
    mine = cache_at(tmp_path / "cache")
    entry = mine.ensure(src, peers=[url])
    assert entry.fetched_from == url
    assert (mine.counters.source_bytes, mine.counters.peer_bytes) == (0, 4 * MIB)
    assert (mine.path_for(src) / "b" / "c.bin").read_bytes() == (Path(src) / "b/c.bin").read_bytes()


def test_a_peer_that_is_gone_or_lacks_it_falls_back_to_the_next_then_the_source(
    tmp_path: Path, peer: tuple[NodeCache, str]
) -> None:
    src = dataset(tmp_path / "src", {"a.bin": MIB})
    _, url = peer  # holds nothing
    mine = cache_at(tmp_path / "cache")
    entry = mine.ensure(src, peers=["http://127.0.0.1:9", url])  # port 9: nobody there
    assert entry.fetched_from == "source"
    assert mine.counters.source_bytes == MIB
    assert len(mine.counters.errors) == 2


def test_a_peer_serving_other_bytes_is_caught_by_the_checksum(
    tmp_path: Path, peer: tuple[NodeCache, str]
) -> None:
    src = dataset(tmp_path / "src", {"a.bin": MIB})
    held, url = peer
    entry = held.ensure(src)
    bad = tmp_path / "peer-cache" / "entries" / entry.key / "a.bin"
    bad.write_bytes(b"\x07" * MIB)  # same size, other bytes
    mine = cache_at(tmp_path / "cache")
    assert mine.ensure(src, peers=[url]).fetched_from == "source"
    assert any("checksum differs" in e for e in mine.counters.errors)


def _post(url: str, body: object, token: str = TOKEN) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_the_agent_prefetches_in_the_background_and_reports_its_cache(
    tmp_path: Path, peer: tuple[NodeCache, str]
) -> None:
    src = dataset(tmp_path / "src", {"a.bin": 2 * MIB})
    cache, url = peer
    status, body = _post(url + "/v1/prefetch", {"datasets": [{"location": src}], "peers": []})
    assert (status, body) == (202, {"prefetching": [src]})
    wait_until("the prefetch never completed", lambda: cache.entries(), 30)
    status, body = _post(url + "/v1/pins", {"locations": [src]})
    assert status == 200
    request = urllib.request.Request(
        url + "/v1/probe", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        report = json.loads(answer.read())["cache"]
    [entry] = report["entries"]
    assert (entry["location"], entry["complete"], entry["pinned"]) == (src, True, True)
    assert report["used_bytes"] == 2 * MIB
    assert report["source_bytes"] == 2 * MIB


@pytest.mark.parametrize(
    ("path", "body", "token", "status"),
    [
        ("/v1/prefetch", {"datasets": [{"location": "/x"}]}, "wrong", 401),
        ("/v1/prefetch", {"datasets": "s3://x"}, TOKEN, 400),
        ("/v1/prefetch", {"datasets": [{"where": "/x"}]}, TOKEN, 400),
        ("/v1/pins", {"locations": "s3://x"}, TOKEN, 400),
        ("/v1/run", {"cmd": "id"}, TOKEN, 405),
    ],
    ids=["another token", "datasets not a list", "a dataset without a location",
         "pins not a list", "any other path"],
)  # fmt: skip
def test_the_agent_refuses_a_bad_cache_request_with_why(
    peer: tuple[NodeCache, str], path: str, body: object, token: str, status: int
) -> None:
    _, url = peer
    got, answer = _post(url + path, body, token)
    assert got == status
    assert isinstance(answer["error"], str)
    assert "\n" not in answer["error"]


def test_a_peer_gets_no_file_outside_an_entry(tmp_path: Path, peer: tuple[NodeCache, str]) -> None:
    src = dataset(tmp_path / "src", {"a.bin": MIB})
    cache, url = peer
    entry = cache.ensure(src)
    for path in (f"/v1/data/{entry.key}/files/../{entry.key}.json", "/v1/data/nothing"):
        request = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {TOKEN}"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=10)
        assert err.value.code == 404


def test_a_cache_is_private_whatever_the_umask(tmp_path: Path) -> None:
    """Folders 0700, files 0600 (a dataset may be one only its jobs may read); its current/
    links are symlinks, whose own mode means nothing."""
    source = dataset(tmp_path / "src", {"a.bin": 10, "sub/b.bin": 20})
    from meshctl.cli.agent_cmd import _cache

    old = os.umask(0o002)
    try:
        cache = _cache(tmp_path / "run" / "cache" / "node", 0.1, "")  # as `agent run` makes it
        cache.ensure(source)
        with pytest.raises(CacheError):
            cache.ensure(str(tmp_path / "missing"))  # its failed/ marker
    finally:
        os.umask(old)
    modes = {
        str(p.relative_to(tmp_path / "run")): oct(p.stat().st_mode & 0o777)
        for p in (tmp_path / "run").rglob("*")
        if not p.is_symlink()
    }
    assert modes
    assert {m for p, m in modes.items() if (tmp_path / "run" / p).is_dir()} == {"0o700"}
    assert {m for p, m in modes.items() if (tmp_path / "run" / p).is_file()} == {"0o600"}
