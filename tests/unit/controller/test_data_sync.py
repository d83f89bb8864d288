"""The controller tells the nodes' agents what to fetch and keep (controller/data.py): central
storage read once per pool (a node waits for its pool's copy in flight, then reads it from
that peer), asks retried when they show no effect, the nodes held for a queued job prefetched,
pins sent when they change. Requests are recorded, not sent."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import replace
from typing import Any

import pytest

from meshctl.agent.watch import AgentReport, AgentStatus
from meshctl.controller.data import PIN_EVERY_S, RETRY_S, DataSync, caches_of
from meshctl.controller.deciding.step import Step
from meshctl.controller.deciding.world import CacheSeen, JobView, World
from meshctl.lifecycle.datacache import location_name
from meshctl.scheduler.plan import Plan
from tests import builders
from tests.unit.controller.test_decide import NOW, attempt, job

pytestmark = pytest.mark.unit

DATA = [{"name": "corpus", "location": "s3://corpus/v1", "size_gib": 1}]
LOC = "s3://corpus/v1"


class Inline(Executor):
    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        done: Future[Any] = Future()
        done.set_result(fn(*args, **kwargs))
        return done


def agent(node: str) -> str:
    return f"http://{node}:8900"


def cache(node: str, complete: tuple[str, ...] = (), fetching: tuple[str, ...] = ()) -> CacheSeen:
    return CacheSeen(f"/cache/{node}", agent(node), frozenset(complete), frozenset(fetching))


def running(name: str, node: str) -> JobView:
    return job(name, data=DATA, attempt=attempt(name, nodes=(node,)))


class Agents:
    def __init__(self) -> None:
        self.sync = DataSync(lambda pool: "tok", self.send, Inline())
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def send(self, url: str, token: str, body: dict[str, Any]) -> None:
        assert token == "tok"
        self.sent.append((url, body))

    def cycle(self, world: World, step: Step | None = None) -> list[tuple[str, list[str]]]:
        """The prefetches asked this cycle: (agent, the peers named)."""
        self.sent.clear()
        self.sync.sync(world, step or Step())
        return [(u.split("/v1/")[0], b["peers"]) for u, b in self.sent if "prefetch" in u]


def world(now: float, views: tuple[JobView, ...], **caches: CacheSeen) -> World:
    return builders.world(*views, now_s=now, caches={f"onprem/{k}": v for k, v in caches.items()})


def test_central_storage_is_read_once_per_pool_the_other_node_waits_then_reads_its_peer() -> None:
    agents, views = Agents(), (running("a", "n1"), running("b", "n2"))
    # nobody holds it: the first node needing it reads the source; the second waits
    assert agents.cycle(world(NOW, views, n1=cache("n1"), n2=cache("n2"))) == [(agent("n1"), [])]
    # n1's agent says it is fetching: n2 still waits, n1 is not asked again
    w = world(NOW + 5, views, n1=cache("n1", fetching=(LOC,)), n2=cache("n2"))
    assert agents.cycle(w) == []
    # n1 holds it whole: n2 reads it from n1
    w = world(NOW + 40, views, n1=cache("n1", complete=(LOC,)), n2=cache("n2"))
    assert agents.cycle(w) == [(agent("n2"), [agent("n1")])]
    # nothing more to ask once both hold it
    w = world(NOW + 45, views, n1=cache("n1", (LOC,)), n2=cache("n2", (LOC,)))
    assert agents.cycle(w) == []


ASK_TABLE = {
    # name: (n1's cache after the first ask, seconds later, what is asked then)
    "an-ask-not-yet-seen-is-not-repeated": (cache("n1"), 5, []),
    "an-ask-with-no-effect-is-repeated-and-the-pool-waits-no-longer": (
        cache("n1"),
        RETRY_S + 1,
        [(agent("n1"), []), (agent("n2"), [])],
    ),
    "a-fetch-that-failed-no-longer-holds-the-pool": (
        replace(cache("n1"), failed=frozenset({LOC})),
        5,
        [(agent("n2"), [])],
    ),
}


@pytest.mark.parametrize(("n1_after", "later_s", "asked"), ASK_TABLE.values(), ids=ASK_TABLE.keys())
def test_asks_are_repeated_only_when_they_show_no_effect(
    n1_after: CacheSeen, later_s: float, asked: list[tuple[str, list[str]]]
) -> None:
    agents, views = Agents(), (running("a", "n1"), running("b", "n2"))
    assert agents.cycle(world(NOW, views, n1=cache("n1"), n2=cache("n2"))) == [(agent("n1"), [])]
    assert agents.cycle(world(NOW + later_s, views, n1=n1_after, n2=cache("n2"))) == asked


def test_a_node_without_a_cache_is_not_asked_and_does_not_hold_its_pool() -> None:
    agents, views = Agents(), (running("a", "n1"), running("b", "n2"))
    assert agents.cycle(world(NOW, views, n2=cache("n2"))) == [(agent("n2"), [])]


def test_the_nodes_held_for_a_queued_job_fetch_its_data_before_it_starts() -> None:
    agents = Agents()
    queued = job("q", data=DATA)
    plan = Plan(NOW, reserved={"q": ("onprem/n2",)})
    w = world(NOW, (queued,), n1=cache("n1", (LOC,)), n2=cache("n2"))
    assert agents.cycle(w, Step(plan=plan)) == [(agent("n2"), [agent("n1")])]
    pins = {u: b["locations"] for u, b in agents.sent if "pins" in u}
    assert pins[agent("n2") + "/v1/pins"] == [LOC]  # kept until it starts


def test_pins_go_when_they_change_and_again_now_and_then() -> None:
    agents = Agents()

    def pins(w: World) -> dict[str, list[str]]:
        agents.cycle(w)
        return {u.split("/v1/")[0]: b["locations"] for u, b in agents.sent if "pins" in u}

    held = (running("a", "n1"),)
    both = {"n1": cache("n1", (LOC,)), "n2": cache("n2")}
    assert pins(world(NOW, held, **both)) == {agent("n1"): [LOC], agent("n2"): []}
    assert pins(world(NOW + 1, held, **both)) == {}  # unchanged
    assert pins(world(NOW + 2, (), **both)) == {agent("n1"): []}  # its job ended
    assert pins(world(NOW + 3 + PIN_EVERY_S, (), **both)) == {agent("n1"): [], agent("n2"): []}


def test_caches_of_reads_what_is_whole_on_its_way_and_failed() -> None:
    entries = [
        {"location": "s3://a", "complete": True},
        {"location": "s3://b", "complete": False},
    ]
    status = AgentStatus(
        "http://n1:8900/v1/probe",
        "healthy",
        cache={"root": "/c", "entries": entries, "failed": {"s3://c": "gone"}},
    )
    seen = caches_of(
        AgentReport(agents={"onprem/n1": status, "onprem/n2": AgentStatus("x", "healthy")})
    )
    assert seen == {
        "onprem/n1": CacheSeen(
            "/c",
            "http://n1:8900",
            frozenset({"s3://a"}),
            frozenset({"s3://b"}),
            frozenset({"s3://c"}),
        )
    }


def test_a_job_on_two_nodes_is_told_each_nodes_copy_and_its_source() -> None:
    from meshctl.controller.deciding.decide import decide
    from tests.unit.controller.test_decide import RULES, pool

    caches = {"onprem/n1": cache("n1")}  # n2 keeps no cache
    views = (job("g", gpus=4, nodes=2, data=DATA),)
    step = decide(builders.world(*views, pools=(pool(),), now_s=NOW, caches=caches), RULES)
    [dispatch] = step.dispatches
    env = dispatch.submission.runtime_env["env_vars"]
    nodes = env["MESHCTL_NODES"].split(",")
    path = "/cache/n1/current/" + location_name(LOC)
    assert env["MESHCTL_DATA_CORPUS_SOURCE"] == LOC
    assert env["MESHCTL_DATA_CORPUS_NODES"].split(",") == [path if n == "n1" else "" for n in nodes]
    assert ("MESHCTL_DATA_CORPUS" in env) == (nodes[0] == "n1")  # the driver's node's copy


DATASET_TABLE = {
    # name: (environment, node, the copy is whole, what dataset() answers)
    "the-first-nodes-copy-once-whole": ({"MESHCTL_DATA_CORPUS": "{copy}"}, 0, True, "{copy}"),
    "the-source-when-the-copy-never-comes": ({"MESHCTL_DATA_CORPUS": "{copy}"}, 0, False, LOC),
    "another-node-has-no-copy-of-the-first-ones": (
        {"MESHCTL_DATA_CORPUS": "{copy}"},
        1,
        True,
        LOC,
    ),
    "each-node-its-own-copy": ({"MESHCTL_DATA_CORPUS_NODES": "/none,{copy}"}, 1, True, "{copy}"),
    "a-node-without-a-cache-reads-the-source": (
        {"MESHCTL_DATA_CORPUS_NODES": "{copy},"},
        1,
        True,
        LOC,
    ),
}


@pytest.mark.parametrize(
    ("env", "node", "whole", "answer"), DATASET_TABLE.values(), ids=DATASET_TABLE.keys()
)
def test_a_job_reads_its_nodes_copy_or_the_source(
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    node: int,
    whole: bool,
    answer: str,
) -> None:
    from meshctl.workload import dataset

    copy = str(tmp_path / "copy")
    if whole:
        (tmp_path / "copy").mkdir()
    monkeypatch.setenv("MESHCTL_DATA_CORPUS_SOURCE", LOC)
    for k, v in env.items():
        monkeypatch.setenv(k, v.format(copy=copy))
    assert dataset("corpus", wait_s=0.05, every_s=0.01, node=node) == answer.format(copy=copy)
    with pytest.raises(KeyError, match="no dataset 'other'"):
        dataset("other")


def test_a_job_stops_waiting_once_its_nodes_fetch_failed(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from meshctl.data.cache import CacheError, NodeCache
    from meshctl.workload import dataset

    cache = NodeCache(tmp_path / "cache", capacity_bytes=1 << 20)
    missing = str(tmp_path / "not-there")
    monkeypatch.setenv("MESHCTL_DATA_CORPUS_SOURCE", missing)
    monkeypatch.setenv("MESHCTL_DATA_CORPUS", str(cache.path_for(missing)))
    with pytest.raises(CacheError):
        cache.ensure(missing)
    started = time.monotonic()
    assert dataset("corpus", wait_s=60) == missing  # at once, not after a minute
    assert time.monotonic() - started < 5
    (tmp_path / "not-there").mkdir()
    (tmp_path / "not-there" / "a.bin").write_bytes(b"x")
    cache.ensure(missing)  # there now: the marker goes
    assert dataset("corpus", wait_s=0) == str(cache.path_for(missing))
