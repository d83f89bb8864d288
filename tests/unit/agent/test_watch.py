"""The controller's pull of the agents: verdicts passed on, silence counted from the last
fresh probe, suspect then dead, and back in service when the agent answers again; a node
without a GPU probe is unknown, not degraded, up to ``nodes list``."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from meshctl.agent.probe import Limits
from meshctl.agent.server import Agent
from meshctl.agent.sources import KernelLog
from meshctl.agent.watch import AgentWatch, agent_url
from meshctl.model.mesh import NodeAgents
from meshctl.pools.observed import ObservedNode, PoolObservation
from tests.builders import observed_node, observed_pool

pytestmark = pytest.mark.unit

SETTINGS = NodeAgents(suspect_after_s=10, dead_after_s=30)


def node(name: str, alive: bool = True, **labels: str) -> ObservedNode:
    labels = {"meshctl.io/agent-port": "9109", **labels}
    return observed_node(name, alive=alive, cpus=8.0, memory_gib=64.0, accelerator="H100",
                         labels=labels, address="10.0.0.7")  # fmt: skip


class Agents:
    """What each agent answers (by URL); a hung one blocks until released."""

    def __init__(self) -> None:
        self.answers: dict[str, dict[str, Any]] = {}
        self.hung: set[str] = set()
        self.release = threading.Event()
        self.asked: list[str] = []

    def fetch(self, url: str, token: str, timeout_s: float) -> dict[str, Any]:
        self.asked.append(url)
        assert token == "tok"
        if url in self.hung:
            self.release.wait(5)
            raise TimeoutError("timed out")
        return self.answers[url]


def watch(agents: Agents, token: str | None = "tok") -> AgentWatch:
    return AgentWatch(lambda _: SETTINGS, lambda _: token, wait_s=0.05, fetch=agents.fetch)


URL = "http://10.0.0.7:9109/v1/probe"


def seen(*nodes: ObservedNode) -> dict[str, PoolObservation]:
    return {"lab": observed_pool("lab", *nodes)}


@pytest.mark.parametrize(
    ("labels", "port", "url"),
    [
        ({"meshctl.io/agent-port": "9200"}, None, "http://10.0.0.7:9200/v1/probe"),
        ({"meshctl.io/agent-port": "9200", "meshctl.io/agent-host": "127.0.0.1"}, None,
         "http://127.0.0.1:9200/v1/probe"),
        ({}, 9109, URL),
        ({}, None, None),
    ],
    ids=["its label", "its label and host", "the pool's port", "no agent"],
)  # fmt: skip
def test_where_a_node_s_agent_answers(labels: dict[str, str], port: int | None, url: str) -> None:
    bare = ObservedNode("n1", "id", True, 4, 8.0, 64.0, None, labels, address="10.0.0.7")
    assert agent_url(bare, NodeAgents(port=port)) == url


def test_an_unhealthy_verdict_is_passed_on_and_a_healthy_one_clears_it() -> None:
    agents = Agents()
    agents.answers[URL] = {"verdict": "unhealthy", "reasons": ["XID 79 on GPU 0000:3b:00"]}
    w = watch(agents)
    report = w.pull(seen(node("n1")), 100.0)
    assert report.unhealthy == {"lab/n1": "agent: XID 79 on GPU 0000:3b:00"}
    assert report.agents["lab/n1"].url == URL
    agents.answers[URL] = {"verdict": "degraded", "reasons": ["GPU 0: throttled (hw-thermal)"]}
    report = w.pull(seen(node("n1")), 101.0)
    assert (report.unhealthy, report.suspect) == ({}, {})
    assert report.agents["lab/n1"].verdict == "degraded"


def test_a_node_without_a_gpu_probe_is_unknown_in_nodes_list_not_degraded(tmp_path: Any) -> None:
    """The defect as reported: every emulated node (no NVML, no nvidia-smi) said degraded
    ("no GPU probe") on every ``nodes list``, noise that hid the real verdicts."""
    from meshctl.cli.nodes_cmd import _agent_cell

    (tmp_path / "kmsg").write_text("[ 0.0] Linux version 6.1.0\n")
    emulated = Agent("n1", Limits(expected_gpus=4), None, KernelLog(str(tmp_path / "kmsg")))
    agents = Agents()
    agents.answers[URL] = emulated.answer()
    report = watch(agents).pull(seen(node("n1")), 100.0)
    assert (report.unhealthy, report.suspect, report.dead) == ({}, {}, set())
    status = report.agents["lab/n1"]
    assert (status.verdict, status.error) == ("unknown", None)
    assert _agent_cell(status.to_json()) == (
        "unknown (no GPU probe: no NVIDIA driver library and no nvidia-smi on this node)"
    )


def test_a_silent_agent_makes_its_node_suspect_then_dead_then_back_when_it_answers() -> None:
    agents = Agents()
    agents.answers[URL] = {"verdict": "healthy", "age_s": 0.5}
    w = watch(agents)
    assert w.pull(seen(node("n1")), 100.0).unhealthy == {}
    agents.hung.add(URL)  # SIGSTOP: the connection opens, no answer comes
    assert w.pull(seen(node("n1")), 105.0).suspect == {}
    report = w.pull(seen(node("n1")), 110.0)
    assert report.suspect == {"lab/n1": "agent: silent for over 10 s"}
    assert w.pull(seen(node("n1")), 129.0).unhealthy == {}
    report = w.pull(seen(node("n1")), 130.0)
    assert report.unhealthy == {"lab/n1": "agent: silent for over 30 s"}
    assert report.suspect == {}
    assert report.dead == {"lab/n1"}  # dead by its silence, not by its own word
    assert agents.asked.count(URL) == 2  # the hung request was never asked again meanwhile
    agents.hung.clear()
    agents.release.set()  # SIGCONT: the hung request fails, the next one is answered
    w.pull(seen(node("n1")), 131.0)
    report = w.pull(seen(node("n1")), 132.0)
    assert (report.unhealthy, report.suspect, report.dead) == ({}, {}, set())
    assert report.agents["lab/n1"].verdict == "healthy"


def test_an_agent_whose_probe_is_stale_counts_as_silent() -> None:
    agents = Agents()
    agents.answers[URL] = {"verdict": "healthy", "age_s": 45.0}  # its probe thread is stuck
    report = watch(agents).pull(seen(node("n1")), 100.0)
    assert report.unhealthy == {"lab/n1": "agent: silent for over 30 s"}


def test_dead_ray_nodes_and_pools_without_a_token_are_not_pulled() -> None:
    agents = Agents()
    assert watch(agents).pull(seen(node("n1", alive=False)), 100.0).agents == {}
    assert watch(agents, token=None).pull(seen(node("n1")), 100.0).agents == {}
    assert agents.asked == []


def test_agent_settings_refuse_a_dead_timeout_not_longer_than_suspect() -> None:
    with pytest.raises(ValueError, match="dead_after_s must be longer than suspect_after_s"):
        NodeAgents(suspect_after_s=30, dead_after_s=30)
