"""``meshctl nodes show``: a node from the store and its data cache as its agent last reported
it (``run/agents.json``, as the controller writes it). The reports come from real caches on
local disk, one of them filled from the other's agent on loopback; no mesh runs."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter
from typer.testing import CliRunner

from meshctl.agent import AGENTS_FILE
from meshctl.agent.probe import Limits
from meshctl.agent.server import PATH, Agent, serve
from meshctl.agent.sources import KernelLog
from meshctl.agent.watch import AgentStatus
from meshctl.app.shapes import NodeShow
from meshctl.cli.app import app
from meshctl.data.cache import NodeCache
from meshctl.data.sources import Source
from meshctl.state import AttemptDetail, AttemptRecord, NodeRecord, open_store

pytestmark = pytest.mark.unit

TOKEN = "peer-token"
MIB, GIB = 1024**2, 1024**3
NOW = time.time()
RESOURCES = {"gpus": 4, "cpus": 1.0, "memory_gib": 2.0, "accelerator": "A100", "alive": True}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Four nodes: gpu-0 whose cache read a dataset from its source, gpu-1 whose cache read it
    from gpu-0's agent and is fetching another, gpu-2 whose agent keeps no cache, gpu-3 with
    no agent report; a job running on gpu-0."""
    home = tmp_path / "home"
    monkeypatch.setenv("MESHCTL_HOME", str(home))
    src = tmp_path / "corpus"
    src.mkdir()
    (src / "a.bin").write_bytes(b"a" * 3 * MIB)
    (src / "b.bin").write_bytes(b"b" * MIB)
    first = NodeCache(tmp_path / "cache-0", GIB, TOKEN)
    second = NodeCache(tmp_path / "cache-1", GIB, TOKEN)
    server = serve(
        Agent("gpu-0", Limits(), None, KernelLog(None), cache=first), "127.0.0.1", 0, TOKEN
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    peer = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        first.ensure(str(src))
        first.pin([str(src)])
        second.ensure(str(src), peers=[peer])
    finally:
        server.shutdown()
        server.server_close()
    fetching = {"key": "v9-0123", "location": "s3://corpus/v9", "version": "9" * 20,
                "size_bytes": 4 * MIB, "complete": False, "fetched_bytes": MIB, "pinned": True,
                "last_used_s": 0.0, "fetched_from": ""}  # fmt: skip
    report = second.inventory()
    report["entries"].append(fetching)
    report["used_bytes"] += 4 * MIB
    agents = {
        "onprem/gpu-0": AgentStatus(peer + PATH, "healthy", (), NOW, None, first.inventory()),
        "onprem/gpu-1": AgentStatus(
            "http://127.0.0.1:9/v1/probe", "healthy", (), NOW, None, report
        ),
        "onprem/gpu-2": AgentStatus(
            "http://127.0.0.1:8/v1/probe", "degraded", ("no GPU probe",), NOW
        ),
    }
    (home / "run").mkdir(parents=True)
    (home / "run" / AGENTS_FILE).write_text(json.dumps({k: a.to_json() for k, a in agents.items()}))
    with open_store(home) as store:
        for i in range(4):
            store.create(
                NodeRecord(f"onprem/gpu-{i}", "onprem", "ready", {"rack": "r1"}, RESOURCES, NOW)
            )
        held = {"node": "gpu-0", "gpu_indices": [0, 1], "gpu_share": 1.0, "cpus": 0.25,
                "memory_gib": 0.5, "nic_gbps": 0.0}  # fmt: skip
        store.create(
            AttemptRecord("reader-000001-1", "reader-000001", 1, "onprem", "meshctl-reader-1",
                          "running", NOW, None, "", AttemptDetail.of({"allocations": [held]}))
        )  # fmt: skip
    return home


def show(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["nodes", "show", *args])
    return result.exit_code, result.stdout, result.stderr


def shown(node: str) -> dict[str, Any]:
    code, out, err = show(node, "-o", "json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    TypeAdapter(NodeShow).validate_python(data)  # its documented shape, strictly
    return data


def test_a_node_and_its_cache_as_data(home: Path, tmp_path: Path) -> None:
    data = shown("gpu-0")
    assert (data["node"], data["gpus"], data["gpus_used"], data["jobs"]) == (
        "onprem/gpu-0", 4, 2.0, ["reader-000001"]
    )  # fmt: skip
    cache = data["cache"]
    assert cache["root"] == str(tmp_path / "cache-0")
    assert (cache["capacity_bytes"], cache["used_bytes"], cache["used_pct"]) == (GIB, 4 * MIB, 0.39)
    assert (cache["source_bytes"], cache["peer_bytes"], cache["misses"]) == (4 * MIB, 0, 1)
    [entry] = cache["entries"]
    version = Source(str(tmp_path / "corpus")).listing().version
    assert entry | {"key": "", "last_used_at": ""} == {
        "key": "",
        "location": str(tmp_path / "corpus"),
        "version": version,
        "size_bytes": 4 * MIB,
        "fetched_bytes": 4 * MIB,
        "complete": True,
        "pinned": True,
        "fetched_from": "source",
        "peer": None,
        "last_used_at": "",
    }
    assert entry["last_used_at"].endswith("Z")


def test_an_entry_read_from_a_peer_names_that_node(home: Path) -> None:
    cache = shown("onprem/gpu-1")["cache"]
    held, fetching = cache["entries"]
    assert (held["peer"], held["fetched_from"].startswith("http://127.0.0.1:")) == (
        "onprem/gpu-0", True
    )  # fmt: skip
    assert (cache["source_bytes"], cache["peer_bytes"]) == (0, 4 * MIB)
    assert fetching | {"key": ""} == {
        "key": "",
        "location": "s3://corpus/v9",
        "version": "9" * 20,
        "size_bytes": 4 * MIB,
        "fetched_bytes": MIB,
        "complete": False,
        "pinned": True,
        "fetched_from": None,
        "peer": None,
        "last_used_at": None,
    }


def test_the_table_says_the_same_in_words(home: Path, tmp_path: Path) -> None:
    code, out, _ = show("gpu-1")
    assert code == 0
    lines = [line.strip() for line in out.splitlines()]
    assert lines[0] == "onprem/gpu-1: ready"
    assert "GPUs used: 0 / 4 (A100)" in lines
    assert "capacity 1 GiB, used 0.008 GiB (0.8%), 2 entries" in lines
    assert "read from sources 0 B, from peers 4 MiB; hits 0, misses 1, refetched 0" in lines
    [held] = [line for line in lines if str(tmp_path / "corpus") in line]
    for cell in ("4 MiB", "complete", "peer onprem/gpu-0", " ago", "no"):
        assert cell in held, (cell, held)
    [fetching] = [line for line in lines if "s3://corpus/v9" in line]
    for cell in ("99999999 ", "fetching 1 MiB of 4 MiB (25%)", "yes"):
        assert cell in fetching, (cell, fetching)


@pytest.mark.parametrize(
    ("node", "said"),
    [
        ("gpu-2", "cache: none (its agent keeps none)"),
        ("gpu-3", "cache: none (no report from its agent)"),
    ],
)
def test_a_node_without_a_cache_says_so(home: Path, node: str, said: str) -> None:
    code, out, _ = show(node)
    assert code == 0
    assert said in out
    assert shown(node)["cache"] is None


def test_an_unknown_node_is_a_one_line_error(home: Path) -> None:
    code, out, err = show("gpu-9")
    assert (code, out) == (2, "")
    assert err == (
        "error: node: expected one of onprem/gpu-0, onprem/gpu-1, onprem/gpu-2, onprem/gpu-3, "
        "got 'gpu-9'\n"
    )
