"""The agent for real on loopback: its HTTP answers (the token required, GET only but for the
data cache and the XIDs' clear) and its probes through the fake nvidia-smi and fake kernel log
in scripts/fake-gpu (a mock of the GPU driver only: no GPU here), whose state the test changes
between probes, on a clock the test moves."""

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
from meshctl.agent.server import CLEAR_PATH, PATH, Agent, serve
from meshctl.agent.sources import KernelLog, SmiSource, disks, nics

pytestmark = pytest.mark.unit

FAKE = Path(__file__).resolve().parents[3] / "scripts" / "fake-gpu"
TOKEN = "s3cret-token"
WINDOW_S = 600.0
XID_79 = "[ 99.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def fake_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MESHCTL_FAKE_GPU_DIR", str(tmp_path))
    monkeypatch.setenv("MESHCTL_AGENT_NODE", "n1")
    (tmp_path / "n1.kmsg").write_text("[ 0.0] Linux version 6.1.0\n")
    return tmp_path


@pytest.fixture
def agent(fake_gpus: Path, tmp_path: Path, clock: Clock) -> Agent:
    return Agent(
        "n1",
        Limits(expected_gpus=4, min_free_gib=0.0, xid_window_s=WINDOW_S),
        SmiSource(str(FAKE / "nvidia-smi")),
        KernelLog(str(fake_gpus / "n1.kmsg")),
        disk_paths=[str(tmp_path)],
        clock=clock,
    )


@pytest.fixture
def url(agent: Agent) -> Iterator[str]:
    server = serve(agent, "127.0.0.1", 0, TOKEN)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def call(url: str, token: str | None = TOKEN, method: str = "GET") -> tuple[int, dict[str, object]]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    request = urllib.request.Request(
        url, headers=headers, method=method, data=b"rm -rf /" if method != "GET" else None
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.mark.parametrize(
    ("token", "method", "path", "status"),
    [
        (None, "GET", PATH, 401),
        ("wrong", "GET", PATH, 401),
        (TOKEN + "x", "GET", PATH, 401),
        (None, "POST", PATH, 401),
        (None, "POST", CLEAR_PATH, 401),
        (TOKEN, "POST", PATH, 405),
        (TOKEN, "PUT", "/v1/run", 405),
        (TOKEN, "GET", "/v1/exec?cmd=id", 404),
        (TOKEN, "GET", PATH, 200),
    ],
    ids=["no token", "another token", "a longer token", "no token, POST",
         "no token, the XIDs' clear", "POST", "PUT", "another path", "the token"],
)  # fmt: skip
def test_the_agent_answers_only_a_get_with_the_token(
    url: str, token: str | None, method: str, path: str, status: int
) -> None:
    got, body = call(url + path, token, method)
    assert got == status, body
    if status == 200:
        assert body["verdict"] == "healthy"
        assert body["source"] == "nvidia-smi"
        assert [g["uuid"] for g in body["gpus"]] == [f"GPU-fake-n1-{i}" for i in range(4)]  # type: ignore[attr-defined]


def test_a_gpu_fault_shows_at_the_next_probe_and_an_xid_at_once(
    agent: Agent, fake_gpus: Path
) -> None:
    assert agent.probe().to_json(agent.limits)["verdict"] == "healthy"
    (fake_gpus / "n1.json").write_text(json.dumps({"lost": [2], "nvlink_down": {"0": [1]}}))
    reasons = agent.probe().to_json(agent.limits)["reasons"]
    assert reasons == [
        "sees 3 of the 4 GPUs the node declares",
        "GPU 00000000:3B:00.0 is lost",
        "GPU 0: NVLink link 1 down (1 of its 18 links)",
    ]
    (fake_gpus / "n1.json").write_text("{}")
    agent.probe()
    with (fake_gpus / "n1.kmsg").open("a") as log:
        log.write(XID_79)
    agent.follow_kernel_log()  # between probes: the kernel log alone
    answer = agent.answer()
    assert answer["verdict"] == "unhealthy"
    assert answer["reasons"] == ["XID 79 on GPU 0000:3b:00"]


def log_xid(fake_gpus: Path) -> None:
    with (fake_gpus / "n1.kmsg").open("a") as log:
        log.write(XID_79)


@pytest.mark.parametrize(
    ("before", "after", "verdict", "reasons"),
    [
        (False, False, "healthy", []),
        (True, False, "healthy", []),
        (False, True, "unhealthy", ["XID 79 on GPU 0000:3b:00"]),
        (True, True, "unhealthy", ["XID 79 on GPU 0000:3b:00"]),
    ],
    ids=["none", "logged before the agent started", "logged after", "before and again after"],
)  # fmt: skip
def test_an_xid_counts_only_when_logged_after_the_agent_started(
    agent: Agent, fake_gpus: Path, before: bool, after: bool, verdict: str, reasons: list[str]
) -> None:
    """The defect as reported: an XID of a GPU repaired since (in the kernel log since boot)
    kept the node unhealthy until the machine rebooted."""
    if before:
        log_xid(fake_gpus)
    agent.probe()  # the agent starts: its first read of the kernel log
    if after:
        log_xid(fake_gpus)
    answer = agent.probe().to_json(agent.limits)
    assert (answer["verdict"], answer["reasons"]) == (verdict, reasons)


def test_the_operators_clear_ends_an_xid_and_a_later_one_counts_again(
    agent: Agent, fake_gpus: Path, url: str, clock: Clock
) -> None:
    agent.probe()
    log_xid(fake_gpus)
    clock.now_s += 5
    assert agent.probe().to_json(agent.limits)["verdict"] == "unhealthy"
    status, body = call(url + CLEAR_PATH, method="POST")
    assert (status, body) == (200, {"cleared": 1, "at_s": 1005.0})
    assert call(url + PATH)[1]["verdict"] == "healthy"  # served at once
    assert agent.probe().to_json(agent.limits)["verdict"] == "healthy"  # its line is old now
    log_xid(fake_gpus)  # the GPU fails again
    assert agent.probe().to_json(agent.limits)["reasons"] == ["XID 79 on GPU 0000:3b:00"]


def test_an_xid_ages_out_of_the_window_or_ends_with_its_line(
    agent: Agent, fake_gpus: Path, clock: Clock
) -> None:
    agent.probe()
    log_xid(fake_gpus)
    assert agent.probe().to_json(agent.limits)["verdict"] == "unhealthy"
    clock.now_s += WINDOW_S - 1
    assert agent.probe().to_json(agent.limits)["verdict"] == "unhealthy"
    clock.now_s += 1
    assert agent.probe().to_json(agent.limits)["verdict"] == "healthy"
    log_xid(fake_gpus)
    assert agent.probe().to_json(agent.limits)["verdict"] == "unhealthy"
    (fake_gpus / "n1.kmsg").write_text("[ 0.0] Linux version 6.1.0\n")  # a reboot
    assert agent.probe().to_json(agent.limits)["verdict"] == "healthy"


def test_an_unreadable_kernel_log_keeps_the_xids_of_its_last_read(
    agent: Agent, fake_gpus: Path
) -> None:
    agent.probe()
    log_xid(fake_gpus)
    agent.probe()
    kernel_log = fake_gpus / "n1.kmsg"
    kernel_log.unlink()
    kernel_log.mkdir()  # cannot be read as a file
    answer = agent.probe().to_json(agent.limits)
    assert answer["verdict"] == "unhealthy"
    assert answer["reasons"][0] == "XID 79 on GPU 0000:3b:00"
    assert answer["reasons"][1].startswith("kernel log ")


def test_a_driver_that_does_not_answer_makes_the_node_unhealthy(
    agent: Agent, fake_gpus: Path
) -> None:
    (fake_gpus / "n1.json").write_text(json.dumps({"driver_down": True}))
    answer = agent.probe().to_json(agent.limits)
    assert answer["verdict"] == "unhealthy"
    assert answer["reasons"][0].startswith(  # type: ignore[index]
        "GPU driver not answering: NVIDIA-SMI has failed because it couldn't communicate"
    )


def test_a_missing_tool_or_folder_is_reported_not_raised(tmp_path: Path) -> None:
    agent = Agent("n1", Limits(expected_gpus=1), SmiSource(str(tmp_path / "no-smi")),
                  KernelLog(str(tmp_path / "no-log")))  # fmt: skip
    answer = agent.probe().to_json(agent.limits)
    assert answer["verdict"] == "unhealthy"
    assert answer["reasons"][0].startswith("GPU driver not answering: no-smi:")  # type: ignore[index]
    assert any("kernel log" in r for r in answer["reasons"])  # type: ignore[union-attr]
    assert disks([str(tmp_path / "gone")])[0].free_gib is None
    assert nics(["no-such-nic0"])[0].state == "missing"


def test_the_agent_refuses_to_serve_without_a_token(agent: Agent) -> None:
    with pytest.raises(ValueError, match="needs a token"):
        serve(agent, "127.0.0.1", 0, "")


def test_the_fake_driver_is_found_first_on_the_path(fake_gpus: Path) -> None:
    from meshctl.agent.sources import gpu_source

    path = os.environ["PATH"]
    os.environ["PATH"] = f"{FAKE}{os.pathsep}{path}"
    try:
        source = gpu_source(nvml=False)
    finally:
        os.environ["PATH"] = path
    assert isinstance(source, SmiSource)
    assert source.command == str(FAKE / "nvidia-smi")


REFUSING_DMESG = """#!/bin/sh
echo "dmesg: read kernel buffer failed: Operation not permitted" >&2
exit 1
"""


@pytest.mark.parametrize(
    ("emulated", "verdict", "reasons"),
    [
        (True, "healthy", []),
        (False, "degraded", [
            "kernel log: dmesg refused this user (dmesg: read kernel buffer failed: Operation "
            "not permitted), so XIDs are not watched; run the agent as root, or name a log it "
            "can read with --kernel-log",
            "no GPU probe: no NVIDIA driver library and no nvidia-smi on this node",
        ]),
    ],
    ids=["emulated: nothing to probe, the log not read", "declared real: the refusal named"],
)  # fmt: skip
def test_a_node_without_a_driver_where_dmesg_refuses_the_user(
    emulated: bool,
    verdict: str,
    reasons: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a user saw on the embedded mesh: every node ``degraded``, because dmesg refuses a
    user who is not root (kernel.dmesg_restrict) and the agent read the kernel log for XIDs of
    GPUs that are emulated. The dmesg here is a stand-in that answers as the real one does to
    such a user (this machine runs the tests as root); nothing else on the PATH."""
    (tmp_path / "dmesg").write_text(REFUSING_DMESG)
    (tmp_path / "dmesg").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    from meshctl.cli.agent_cmd import _agent

    agent = _agent("n1", 4, [str(tmp_path)], None, None, 0.0, no_nvml=True, emulated=emulated)
    answer = agent.answer()
    assert (answer["verdict"], answer["reasons"]) == (verdict, reasons)
