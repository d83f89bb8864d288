"""Replacement nodes asked for by a run and nominated by the controller, beside the run's
checkpoints; and the Ray Train controller callback that asks (built, not run: no cluster)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from meshctl.train import nominations
from meshctl.train.nominations import Answer, Ask

pytestmark = pytest.mark.unit


def request(n: int = 1, attempt: int = 1) -> Ask:
    return Ask(attempt, n, 100.0, ("id1",), ("id1", "id2"), 2)


def test_an_asked_request_is_unanswered_until_the_controller_answers(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}"
    assert nominations.unanswered(uri, None, 1) == []  # nothing written yet, no folder
    nominations.ask(uri, None, request(1))
    nominations.ask(uri, None, request(2))
    nominations.ask(uri, None, request(1, attempt=2))  # another attempt's
    assert nominations.unanswered(uri, None, 1) == [request(1), request(2)]
    nominations.answer(uri, None, 1, 1, Answer(("id3", "id2")))
    assert nominations.unanswered(uri, None, 1) == [request(2)]
    assert nominations.answered(uri, None, 1, 1) == Answer(("id3", "id2"))
    assert nominations.answered(uri, None, 1, 2) is None
    nominations.answer(uri, None, 1, 2, Answer(refused="no free node in pool onprem"))
    assert nominations.answered(uri, None, 1, 2) == Answer((), "no free node in pool onprem")
    assert nominations.unanswered(uri, None, 1) == []


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        pytest.param('{"node_ids": "id3"}', Answer(refused="an answer without node ids"),
                     id="ids-not-a-list"),
        pytest.param("[1, 2]", None, id="not-an-object"),
        pytest.param("{half", None, id="half-written"),
    ],
)  # fmt: skip
def test_a_malformed_answer_is_no_nomination(
    tmp_path: Path, document: str, expected: Answer | None
) -> None:
    folder = tmp_path / ".meshctl"
    folder.mkdir()
    (folder / "nominated-1-1.json").write_text(document)
    assert nominations.answered(f"file://{tmp_path}", None, 1, 1) == expected


def test_a_malformed_request_is_skipped(tmp_path: Path) -> None:
    folder = tmp_path / ".meshctl"
    folder.mkdir()
    (folder / "nominate-1-1.json").write_text('{"attempt": 1}')
    assert nominations.unanswered(f"file://{tmp_path}", None, 1) == []


def test_the_wait_ends_with_the_answer_or_at_its_deadline(tmp_path: Path) -> None:
    uri, now = f"file://{tmp_path}", [0.0]

    def pause(seconds: float) -> None:
        now[0] += seconds
        if now[0] >= 1.0:  # the controller answers one second in
            nominations.answer(uri, None, 1, 1, Answer(("id3",)))

    clock = lambda: now[0]  # noqa: E731
    got = nominations.wait_for_answer(uri, None, 1, 1, 5.0, clock=clock, pause=pause)
    assert got == Answer(("id3",))
    assert 1.0 <= now[0] < 1.5
    now[0] = 0.0
    got = nominations.wait_for_answer(uri, None, 1, 2, 2.0, clock=clock, pause=pause)
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
    from meshctl.train.run import Replacements

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

    def controller() -> None:  # answers once the request is there
        while not nominations.unanswered(uri, None, 3):
            threading.Event().wait(0.01)
        nominations.answer(uri, None, 3, 1, Answer(("id3", "id2")))

    answering = threading.Thread(target=controller)
    answering.start()
    made.before_controller_execute_failure_decision(object())
    made.before_controller_execute_resize_decision(object())
    answering.join(timeout=30)
    assert pins(context) == ["id3", "id3", "id2", "id2"]
    assert nominations.answered(uri, None, 3, 1) == Answer(("id3", "id2"))
    [asked] = [p.name for p in (tmp_path / ".meshctl").glob("nominate-*")]
    assert asked == "nominate-3-1.json"


@pytest.mark.parametrize(
    ("alive", "failed", "answer", "expected"),
    [
        pytest.param({"id1", "id2"}, True, None, ["id1", "id1", "id2", "id2"],
                     id="a-worker-crashed-its-node-lives"),
        pytest.param({"id2"}, False, None, ["id1", "id1", "id2", "id2"],
                     id="no-failure-the-first-start-or-a-resize"),
        pytest.param({"id2"}, True, Answer(refused="no free node"), ["id1", "id1", "id2", "id2"],
                     id="refused"),
        pytest.param({"id2"}, True, Answer(("id3",)), ["id1", "id1", "id2", "id2"],
                     id="too-few-nodes-nominated"),
    ],
)  # fmt: skip
def test_the_pins_stay_unless_a_node_died_and_replacements_were_given(
    tmp_path: Path, alive: set[str], failed: bool, answer: Answer | None, expected: list[str]
) -> None:
    made, context = callback(tmp_path, alive=alive, wait_s=0.0)
    if answer is not None:
        nominations.answer(f"file://{tmp_path}", None, 3, 1, answer)
    if failed:
        made.before_controller_execute_failure_decision(object())
    made.before_controller_execute_resize_decision(object())
    assert pins(context) == expected
    asked = list((tmp_path / ".meshctl").glob("nominate-*"))
    assert len(asked) == (1 if failed and alive != {"id1", "id2"} else 0)


def test_no_answer_within_the_wait_leaves_the_pins(tmp_path: Path) -> None:
    made, context = callback(tmp_path, alive={"id2"}, wait_s=0.0)
    made.before_controller_execute_failure_decision(object())
    made.before_controller_execute_resize_decision(object())
    assert pins(context) == ["id1", "id1", "id2", "id2"]
    assert [r.lost for r in nominations.unanswered(f"file://{tmp_path}", None, 3)] == [("id1",)]


def test_the_trainer_asks_for_replacements_only_when_the_job_says_so(tmp_path: Path) -> None:
    from meshctl.train.run import Replacements, trainer
    from tests.unit.train.test_run import spec

    def replacing(built: Any) -> list[Any]:
        return [c for c in built.run_config.callbacks or [] if isinstance(c, Replacements)]

    assert replacing(trainer(spec(tmp_path), attempt=1)) == []
    [made] = replacing(trainer(spec(tmp_path, replace_wait_s=45), attempt=2))
    assert (made.pins, made.per_node, made.wait_s) == (["id1", "id2"], 2, 45.0)
    assert made.where["attempt"] == 2
    assert replacing(trainer(spec(tmp_path, replace_wait_s=45, storage=None), attempt=1)) == []
