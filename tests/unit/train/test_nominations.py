"""Replacement nodes asked for by a run and nominated by the controller, beside the run's
checkpoints; and the Ray Train controller callback that asks (built, not run: no cluster)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from meshctl.pools.checkpoints import read_progress
from meshctl.workload.train import nominations, progress
from meshctl.workload.train.nominations import Ask

pytestmark = pytest.mark.unit


def request(n: int = 1, attempt: int = 1) -> Ask:
    return Ask(attempt, n, 100.0, ("id1",), ("id1", "id2"), 2)


def test_requests_are_read_back_per_attempt_in_order(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}"
    assert nominations.requests(uri, None, 1) == []  # nothing written yet, no folder
    nominations.ask(uri, None, request(2))
    nominations.ask(uri, None, request(1))
    nominations.ask(uri, None, request(1, attempt=2))  # another attempt's
    assert nominations.requests(uri, None, 1) == [request(1), request(2)]
    assert nominations.requests(uri, None, 2) == [request(1, attempt=2)]


def test_the_latest_nomination_is_what_is_read(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}"
    assert nominations.nominated(uri, None, 1) is None
    nominations.nominate(uri, None, 1, ("id3", "id2"))
    nominations.nominate(uri, None, 1, ("id3", "id4"))
    nominations.nominate(uri, None, 2, ("id9",))
    assert nominations.nominated(uri, None, 1) == ("id3", "id4")
    assert nominations.nominated(uri, None, 2) == ("id9",)


@pytest.mark.parametrize(
    "document",
    [
        pytest.param('{"node_ids": "id3"}', id="ids-not-a-list"),
        pytest.param('{"node_ids": ["id3", ""]}', id="an-empty-id"),
        pytest.param("[1, 2]", id="not-an-object"),
        pytest.param("{half", id="half-written"),
    ],
)
def test_a_malformed_nomination_is_none(tmp_path: Path, document: str) -> None:
    folder = tmp_path / ".meshctl"
    folder.mkdir()
    (folder / "nominated-1.json").write_text(document)
    assert nominations.nominated(f"file://{tmp_path}", None, 1) is None


def test_a_malformed_request_is_skipped(tmp_path: Path) -> None:
    folder = tmp_path / ".meshctl"
    folder.mkdir()
    (folder / "nominate-1-1.json").write_text('{"attempt": 1}')
    assert nominations.requests(f"file://{tmp_path}", None, 1) == []


def test_the_wait_ends_with_a_nomination_free_of_the_lost_or_at_its_deadline(
    tmp_path: Path,
) -> None:
    uri, now = f"file://{tmp_path}", [0.0]
    nominations.nominate(uri, None, 1, ("id1",))  # before the loss: names the lost node

    def pause(seconds: float) -> None:
        now[0] += seconds
        if now[0] >= 1.0:  # the controller replaces it one second in
            nominations.nominate(uri, None, 1, ("id3",))

    clock = lambda: now[0]  # noqa: E731
    free_of = lambda lost: lambda pins: not set(pins) & set(lost)  # noqa: E731
    got = nominations.wait_for_nomination(uri, None, 1, free_of({"id1"}), 5.0, clock=clock,
                                          pause=pause)  # fmt: skip
    assert got == ("id3",)
    assert 1.0 <= now[0] < 1.5
    now[0] = 0.0
    got = nominations.wait_for_nomination(uri, None, 1, free_of({"id3"}), 2.0, clock=clock,
                                          pause=pause)  # fmt: skip
    assert got is None
    assert 2.0 <= now[0] < 2.5


# --- the callback in the Ray Train controller -------------------------------------------------


@dataclass
class Scaling:
    max_workers: int
    label_selector: list[dict[str, str]] | None = None


@dataclass
class Context:
    scaling_config: Scaling
    extra: dict[str, Any] = field(default_factory=dict)


def callback(tmp_path: Path, alive: set[str], wait_s: float = 30.0) -> tuple[Any, Context]:
    from meshctl.workload.train.run import Replacements

    where = {"uri": f"file://{tmp_path}", "endpoint_url": None, "attempt": 3}
    pins = ["id1", "id2"]
    made = Replacements(where, "ray.io/node-id", pins, 2, wait_s, alive=lambda: set(alive))
    context = Context(Scaling(4, [{"ray.io/node-id": p} for p in ["id1", "id1", "id2", "id2"]]))
    made.after_controller_start(context)
    return made, context


def pins(context: Context) -> list[str]:
    assert context.scaling_config.label_selector is not None
    return [s["ray.io/node-id"] for s in context.scaling_config.label_selector]


def test_workers_restarted_after_a_node_died_go_to_the_nominated_node(tmp_path: Path) -> None:
    made, context = callback(tmp_path, alive={"id2", "id3"})
    uri = f"file://{tmp_path}"

    def controller() -> None:  # nominates once asked
        while not nominations.requests(uri, None, 3):
            threading.Event().wait(0.01)
        nominations.nominate(uri, None, 3, ("id3", "id2"))

    answering = threading.Thread(target=controller)
    answering.start()
    made.before_controller_execute_failure_decision(object())
    made.before_controller_execute_resize_decision(object())
    answering.join(timeout=30)
    assert pins(context) == ["id3", "id3", "id2", "id2"]
    [asked] = nominations.requests(uri, None, 3)
    assert (asked.n, asked.lost, asked.node_ids, asked.workers_per_node) == (
        1, ("id1",), ("id1", "id2"), 2
    )  # fmt: skip


@pytest.mark.parametrize(
    ("alive", "failed", "given", "expected", "asks"),
    [
        pytest.param({"id1", "id2"}, True, None, ["id1", "id1", "id2", "id2"], 0,
                     id="a-worker-crashed-its-node-lives"),
        pytest.param({"id2"}, False, None, ["id1", "id1", "id2", "id2"], 0,
                     id="no-failure-the-first-start-or-a-resize"),
        pytest.param({"id1", "id2"}, True, ("id3", "id2"), ["id3", "id3", "id2", "id2"], 0,
                     id="the-controller-replaced-a-node-ray-still-lists"),
        pytest.param({"id2"}, True, ("id1", "id2"), ["id1", "id1", "id2", "id2"], 1,
                     id="nominated-before-the-loss-no-answer-since"),
        pytest.param({"id2"}, True, ("id3",), ["id1", "id1", "id2", "id2"], 1,
                     id="too-few-nodes-nominated"),
    ],
)  # fmt: skip
def test_the_pins_change_only_to_a_nomination_free_of_lost_nodes(
    tmp_path: Path,
    alive: set[str],
    failed: bool,
    given: tuple[str, ...] | None,
    expected: list[str],
    asks: int,
) -> None:
    made, context = callback(tmp_path, alive=alive, wait_s=0.0)
    if given is not None:
        nominations.nominate(f"file://{tmp_path}", None, 3, given)
    if failed:
        made.before_controller_execute_failure_decision(object())
    made.before_controller_execute_resize_decision(object())
    assert pins(context) == expected
    assert len(nominations.requests(f"file://{tmp_path}", None, 3)) == asks


def test_no_nomination_within_the_wait_leaves_the_pins(tmp_path: Path) -> None:
    made, context = callback(tmp_path, alive={"id2"}, wait_s=0.0)
    made.before_controller_execute_failure_decision(object())
    made.before_controller_execute_resize_decision(object())
    assert pins(context) == ["id1", "id1", "id2", "id2"]
    assert [r.lost for r in nominations.requests(f"file://{tmp_path}", None, 3)] == [("id1",)]


def test_the_trainer_asks_for_replacements_only_when_the_job_says_so(tmp_path: Path) -> None:
    from meshctl.workload.train.run import Replacements, trainer
    from tests.unit.train.test_run import spec

    def replacing(built: Any) -> list[Any]:
        return [c for c in built.run_config.callbacks or [] if isinstance(c, Replacements)]

    assert replacing(trainer(spec(tmp_path), attempt=1)) == []
    [made] = replacing(trainer(spec(tmp_path, replace_wait_s=45), attempt=2))
    assert (made.pins, made.per_node, made.wait_s) == (["id1", "id2"], 2, 45.0)
    assert made.where["attempt"] == 2
    assert replacing(trainer(spec(tmp_path, replace_wait_s=45, storage=None), attempt=1)) == []


@dataclass
class Meta:
    node_id: str


@dataclass
class FakeWorker:
    metadata: Meta
    actor: str


@dataclass
class Group:
    nodes: list[str]

    def get_workers(self) -> list[FakeWorker]:
        return [FakeWorker(Meta(n), f"actor-{i}") for i, n in enumerate(self.nodes)]


@dataclass
class Status:
    running: bool = True
    error: Exception | None = None


@dataclass
class Polled:
    worker_statuses: dict[int, Status]


def watching(tmp_path: Path) -> tuple[Any, Context, list[str], list[float]]:
    """The callback of ``callback`` with its workers started (two per node, id1 then id2), a
    clock it reads, and what it ended."""
    from meshctl.workload.train.run import Replacements

    where = {"uri": f"file://{tmp_path}", "endpoint_url": None, "attempt": 3}
    ended: list[str] = []
    now = [0.0]
    recorder = progress.Recorder(f"file://{tmp_path}", None, 3)
    made = Replacements(where, "ray.io/node-id", ["id1", "id2"], 2, 30.0,
                        alive=lambda: {"id1", "id2", "id3"}, watch_s=1.0,
                        clock=lambda: now[0], kill=ended.append, recorder=recorder)  # fmt: skip
    context = Context(Scaling(4, [{"ray.io/node-id": p} for p in ["id1", "id1", "id2", "id2"]]))
    made.after_controller_start(context)
    made.after_worker_group_start(Group(["id1", "id1", "id2", "id2"]))
    return made, context, ended, now


def poll(made: Any) -> Polled:
    polled = Polled({rank: Status() for rank in range(4)})
    made.after_worker_group_poll_status(polled)
    return polled


def test_a_node_the_controller_replaces_ends_its_workers_and_they_start_on_the_new_one(
    tmp_path: Path,
) -> None:
    """A silent node: Ray still lists it alive, its workers' polls just hang. The nomination
    ends its workers (their polls fail) and the restart takes the new pins."""
    made, context, ended, now = watching(tmp_path)
    assert poll(made).worker_statuses[0].error is None  # nothing nominated
    nominations.nominate(f"file://{tmp_path}", None, 3, ("id3", "id2"))
    now[0] = 0.5
    assert [s.error for s in poll(made).worker_statuses.values()] == [None] * 4  # not yet read
    now[0] = 1.0
    polled = poll(made)
    errors = [type(s.error).__name__ for s in polled.worker_statuses.values()]
    assert errors == ["NodeReplaced", "NodeReplaced", "NoneType", "NoneType"]
    assert ended == ["actor-0", "actor-1"]
    recorded = read_progress(f"file://{tmp_path}", 3)
    assert recorded is not None
    assert [f["error"] for f in recorded["failures"]] == [
        "worker 0: NodeReplaced('node id1 was replaced')"
    ]  # the run's progress says why its workers restarted
    now[0] = 2.0
    assert poll(made).worker_statuses[0].error is None  # ended once, not at every poll
    made.before_controller_execute_failure_decision(object())
    made.before_controller_execute_resize_decision(object())
    assert pins(context) == ["id3", "id3", "id2", "id2"]
    made.after_worker_group_start(Group(["id3", "id3", "id2", "id2"]))
    now[0] = 3.0
    assert poll(made).worker_statuses[0].error is None
    assert len(ended) == 2


@pytest.mark.parametrize(
    ("given", "why"),
    [
        pytest.param(("id1", "id2"), "the pins as they are", id="the-same-pins"),
        pytest.param(("id3",), "one node for two", id="too-few-nodes"),
    ],
)
def test_a_nomination_that_changes_no_worker_ends_none(
    tmp_path: Path, given: tuple[str, ...], why: str
) -> None:
    made, _, ended, now = watching(tmp_path)
    nominations.nominate(f"file://{tmp_path}", None, 3, given)
    now[0] = 5.0
    assert all(s.error is None for s in poll(made).worker_statuses.values()), why
    assert ended == []


@dataclass
class GroupContext:
    train_fn_ref: str


def test_the_training_function_is_put_again_before_every_restart_not_the_first_start(
    tmp_path: Path,
) -> None:
    """The old workers' nodes hold copies of it; a restarted worker must not fetch one from a
    replaced node that Ray still lists alive."""
    from meshctl.workload.train.run import Replacements

    put: list[str] = []
    where = {"uri": f"file://{tmp_path}", "endpoint_url": None, "attempt": 1}
    made = Replacements(where, "ray.io/node-id", ["id1"], 1, 30.0, fresh=put.append)
    made.before_worker_group_start(GroupContext("fn"))
    assert put == []  # the first start: Ray Train's own put, on no other node yet
    made.after_worker_group_start(Group(["id1"]))
    for restart in range(1, 3):
        made.before_worker_group_start(GroupContext("fn"))
        assert put == ["fn"] * restart


def test_putting_the_training_function_again_replaces_the_reference_it_is_held_by(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``put_again`` on a wrapper as Ray Train's (``_ref``), and one it cannot handle. The
    object store is a dictionary here; the integration tier runs the real one."""
    import ray

    from meshctl.workload.train import run

    class Wrapper:
        def __init__(self, ref: object) -> None:
            self._ref = ref

    old, new = ray.ObjectRef(b"\x01" * 28), ray.ObjectRef(b"\x02" * 28)
    store = {old: "fn"}
    monkeypatch.setattr(run.ray, "get", store.__getitem__)
    monkeypatch.setattr(run.ray, "put", lambda value: store.setdefault(new, value) and new)
    wrapper = Wrapper(old)
    run.put_again(wrapper)
    assert wrapper._ref == new
    assert store[new] == "fn"
    odd = Wrapper("not a ref")
    run.put_again(odd)  # left as it is, with a message
    assert odd._ref == "not a ref"


LOCAL = [
    pytest.param("file:///tmp/run%201", "/tmp/run 1", id="file-uri"),
    pytest.param("/tmp/run", "/tmp/run", id="plain-path"),
    pytest.param("s3://bucket/run", None, id="s3"),
    pytest.param("gs://bucket/run", None, id="gcs"),
]


@pytest.mark.parametrize(("uri", "folder"), LOCAL)
def test_a_local_folder_is_listed_and_read_often_remote_storage_is_not(
    uri: str, folder: str | None
) -> None:
    from meshctl.workload.storage import local_folder

    assert local_folder(uri) == folder
    remote = folder is None
    assert nominations.poll_interval(uri) == (
        nominations.REMOTE_POLL_S if remote else nominations.LOCAL_POLL_S
    )
    if remote:
        assert nominations.asked_here(uri, 1) is None


def test_the_asks_of_an_attempt_are_listed_without_reading_them(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}"
    assert nominations.asked_here(uri, 1) == []  # no folder yet
    nominations.ask(uri, None, request(2))
    nominations.ask(uri, None, request(1))
    nominations.ask(uri, None, request(1, attempt=2))
    nominations.nominate(uri, None, 1, ("id3",))  # the controller's answer: not an ask
    assert nominations.asked_here(uri, 1) == [1, 2]
    assert nominations.asked_here(str(tmp_path), 2) == [1]
