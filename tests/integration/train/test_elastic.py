"""Elastic training for real: an embedded mesh (a local Ray cluster of two emulated 1-GPU
nodes and the controller daemon) runs an elastic train job (``train.workers: {min: 1, max:
2}``, one Ray Train worker a node) of a tiny PyTorch loop, and a job of a higher priority
class arrives while it runs:

- the train job lends it a node (the policy's rule lets urgent work take from
  ``victim.elastic``): asked to checkpoint, stopped after the rule's grace, a loan opened; it
  resumes from its checkpoint on the other node, one worker, while the urgent job runs on the
  node it lent;
- when the urgent job ends the loan closes and the train job grows back: asked to checkpoint
  again, stopped after the pool's grow grace (``GROW_GRACE_S``, 5 s here), and resumed from
  its checkpoint on both nodes.

The loop (written to the test's folder) reports every step, checkpoints every ``EVERY``
steps and whenever meshctl asks, records the Ray node of each worker of each attempt, and
runs until the test tells it to finish, so the test waits on what happened, never on a
guess of how long it takes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from meshctl.pools.checkpoints import read_progress
from meshctl.state import LoanRecord, open_store
from tests.conftest import wait_until
from tests.integration.meshes import WAIT_S, Mesh

pytestmark = pytest.mark.integration
T = TypeVar("T")

EVERY = 5  # a checkpoint every 5 steps
STEP_DELAY_S = 0.1
LEND_GRACE_S = 5  # the rule's grace: what the train job has to checkpoint before it lends
GROW_GRACE_S = 5  # the pool's grow grace (mesh.yaml graces.grow_s; 30 s by default)
MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {{name: elastic-test}}
spec:
  pools:
    - name: onprem
      provider: local
      checkpoint_storage: {{uri: "file://{checkpoints}"}}
      graces: {{grow_s: {grow}}}
      nodes:
        - {{name: n, count: 2, gpus: 1, cpus: 1, memory_gib: 2GiB,
           accelerator: {{model: A100, memory_gib: 80GiB}}}}
"""
POLICY = f"""\
apiVersion: meshctl/v1
kind: Policy
metadata: {{name: lending}}
spec:
  priority_classes:
    - {{name: urgent, value: 1000}}
    - {{name: train, value: 10}}
  default_priority_class: {{train: train, batch: urgent}}
  preemption:
    - name: lend
      when: 'job.priority_class == "urgent"'
      victims: 'victim.elastic'
      grace_s: {LEND_GRACE_S}s
"""
JOB = """\
apiVersion: meshctl/v1
kind: Job
metadata: {{name: elastic}}
spec:
  kind: train
  working_dir: .
  resources: {{gpus: 1, cpus: 0.5, memory_gib: 512MiB}}
  train:
    loop: loop:train_loop
    workers: {{min: 1, max: 2}}
    max_failures: 1
    config: {config}
"""
LOOP = '''\
"""A tiny elastic loop: one step a report, a checkpoint every few steps and when meshctl
asks; each worker records where it runs; it ends when the test writes the finish file."""

import json
import os
import tempfile
import time

import ray
import ray.train
import ray.train.torch
import torch
import torch.distributed as dist
from ray.train import Checkpoint

from meshctl.workload.train import Checkpointing


def _everyone(flag: bool) -> bool:
    """Rank 0's answer, for every rank (a report with a checkpoint is a collective)."""
    if not (dist.is_available() and dist.is_initialized()):
        return flag
    told = torch.tensor([int(flag)])
    dist.broadcast(told, 0)
    return bool(told.item())


def train_loop(config):
    every, delay = int(config["checkpoint_every_steps"]), float(config["step_delay_s"])
    context = ray.train.get_context()
    rank, world_size = context.get_world_rank(), context.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            state = torch.load(os.path.join(directory, "state.pt"), weights_only=True)
        model.load_state_dict(state["model"])
        start = state["step"] + 1
    attempt = os.environ.get("MESHCTL_ATTEMPT", "0")
    seen = {"attempt": int(attempt), "rank": rank, "world_size": world_size, "start": start,
            "node_id": ray.get_runtime_context().get_node_id()}
    out = os.path.join(config["out"], f"attempt-{attempt}-rank-{rank}-{time.time_ns()}.json")
    with open(out, "w") as f:
        json.dump(seen, f)
    model = ray.train.torch.prepare_model(model)
    checkpointing = Checkpointing(interval_s=float("inf"))  # every few steps, and when asked
    step = start
    while True:
        optimizer.zero_grad()
        loss = model(torch.randn(8, 4)).pow(2).mean()
        loss.backward()
        optimizer.step()
        finish = _everyone(rank == 0 and os.path.exists(config["finish"]))
        due = checkpointing.due(step) or (step + 1) % every == 0 or finish
        metrics = {"step": step, "world_size": world_size}
        if due and rank == 0:
            inner = model.module if hasattr(model, "module") else model
            with tempfile.TemporaryDirectory() as tmp:
                torch.save({"model": inner.state_dict(), "step": step},
                           os.path.join(tmp, "state.pt"))
                ray.train.report(metrics, checkpoint=Checkpoint.from_directory(tmp))
        else:
            ray.train.report(metrics)
        if rank == 0:  # the last step run, which meshctl's 1 s progress record may miss
            ran = os.path.join(config["out"], f"ran-{attempt}")
            with open(ran + ".tmp", "w") as f:
                f.write(str(step))
            os.replace(ran + ".tmp", ran)
        if finish:
            return {"step": step}
        step += 1
        time.sleep(delay)
'''

# the urgent job: it runs until the test releases it (once the train job runs on one node)
HOLD = (
    "import os, time; "
    "[time.sleep(0.2) for _ in iter(lambda: os.path.exists({release!r}), True)]; "
    "print('urgent work done')"
)


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    base = tmp_path_factory.mktemp("elastic")
    (base / "mesh.yaml").write_text(
        MESH.format(checkpoints=base / "checkpoints", grow=GROW_GRACE_S)
    )
    (base / "policies").mkdir()
    (base / "policies" / "lending.yaml").write_text(POLICY)
    m = Mesh(base / "home", base)
    try:  # a failed `up` may have started the pool: down either way
        m.run("--mesh", str(base / "mesh.yaml"), "up", "--policies", str(base / "policies"),
              "--interval", "0.5")  # fmt: skip
        yield m
    finally:
        m.run("down", "--force", check=False)


class Run:
    """The train job's folder: its loop, job file, finish file and what its workers record."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.out, self.finish = folder, folder / "seen", folder / "finish"
        self.release = folder / "release"  # the urgent job ends once it exists
        self.out.mkdir()
        (folder / "loop.py").write_text(LOOP)
        config = {"checkpoint_every_steps": EVERY, "step_delay_s": STEP_DELAY_S,
                  "out": str(self.out), "finish": str(self.finish)}  # fmt: skip
        (folder / "job.yaml").write_text(JOB.format(config=json.dumps(config)))

    def ran(self, attempt: int) -> int:
        """The last step ``attempt`` ran (rank 0's word)."""
        return int((self.out / f"ran-{attempt}").read_text())

    def workers(self, attempt: int) -> list[dict[str, Any]]:
        """What each worker of ``attempt`` recorded when it started (latest start last)."""
        found = [json.loads(p.read_text()) for p in self.out.glob(f"attempt-{attempt}-rank-*")]
        return sorted(found, key=lambda w: w["rank"])


def until(what: str | Callable[[], str], ready: Callable[[], T | None], timeout_s: float) -> T:
    """``wait_until``, typed for a ``ready`` that answers None until it is."""
    found = wait_until(what, ready, timeout_s, every_s=0.25)
    assert found is not None
    return found


def progress(mesh: Mesh, job_id: str, attempt: int) -> dict[str, Any] | None:
    found: dict[str, Any] | None = read_progress(
        f"file://{mesh.cwd / 'checkpoints' / job_id}", attempt
    )
    return found


def wait_for_step(mesh: Mesh, job_id: str, attempt: int, step: int) -> dict[str, Any]:
    """Until ``attempt`` has reported ``step``; what it recorded then."""

    def reached() -> dict[str, Any] | None:
        seen = progress(mesh, job_id, attempt)
        return seen if seen is not None and (seen.get("step") or -1) >= step else None

    return until(
        lambda: (
            f"{job_id} attempt {attempt} never reached step {step}: "
            f"{progress(mesh, job_id, attempt)}; {mesh.show(job_id)['events']}"
        ),
        reached,
        WAIT_S,
    )


def events(mesh: Mesh, job_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = mesh.show(job_id)["events"]  # type: ignore[assignment]
    return found


def wait_for_event(mesh: Mesh, job_id: str, kind: str, starts: str = "") -> dict[str, Any]:
    def seen() -> dict[str, Any] | None:
        return next(
            (e for e in events(mesh, job_id) if e["kind"] == kind
             and e["message"].startswith(starts)),
            None,
        )  # fmt: skip

    return until(
        lambda: f"{job_id}: no {kind} event {starts!r}: {events(mesh, job_id)}", seen, WAIT_S
    )


def ray_nodes(mesh: Mesh) -> dict[str, str]:
    """Ray node id -> the meshctl node name."""
    return {n.ray_node_id: n.name for n in mesh.ray().nodes() if n.alive}


def worker_nodes(mesh: Mesh, run: Run, attempt: int, count: int) -> list[str]:
    """The nodes the ``count`` workers of ``attempt`` run on, once they have all started."""
    workers = until(
        lambda: f"attempt {attempt}: expected {count} workers, saw {run.workers(attempt)}",
        lambda: run.workers(attempt) if len(run.workers(attempt)) >= count else None,
        WAIT_S,
    )
    assert [w["world_size"] for w in workers] == [count] * count, workers
    names = ray_nodes(mesh)
    return sorted(names[w["node_id"]] for w in workers)


@dataclass
class Story:
    """The train job's story, told in three tests that share it: what each saw, for the
    next."""

    run: Run
    job_id: str = ""
    urgent: str = ""
    lent: str = ""  # the node the train job lent the urgent job
    resumed_on_one: int = 0  # the step its one worker started from
    lost_at_shrink: int = 0
    urgent_running_s: float = 0.0


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Story:
    return Story(Run(tmp_path_factory.mktemp("run")))


def test_an_elastic_job_runs_a_worker_on_each_of_its_two_nodes(mesh: Mesh, story: Story) -> None:
    run = story.run
    job_id = mesh.submit(str(run.folder / "job.yaml"))
    wait_for_step(mesh, job_id, 1, 2 * EVERY)
    shown = mesh.show(job_id)
    assert shown["state"] == "running"
    assert shown["priority_class"] == "train"
    assert sorted(shown["nodes"]) == ["n-0", "n-1"], shown  # type: ignore[call-overload]
    assert worker_nodes(mesh, run, 1, 2) == ["n-0", "n-1"]
    story.job_id = job_id


def test_an_elastic_job_lends_a_node_to_urgent_work_and_resumes_on_the_other(
    mesh: Mesh, story: Story
) -> None:
    if not story.job_id:
        pytest.fail("the first test did not get its job running on two nodes")
    run, job_id = story.run, story.job_id
    # an urgent job (1 GPU) arrives: the train job lends it a node and resumes on the other
    submitted = time.monotonic()
    urgent = story.urgent = mesh.submit("--gpus", "1", "--name", "urgent", "--", "python",
                                        "-c", HOLD.format(release=str(run.release)))  # fmt: skip
    preempted = wait_for_event(mesh, job_id, "job.preempted", "lending")
    assert preempted["message"].startswith(f"lending 1 node(s) to {urgent}"), preempted
    assert wait_for_event(mesh, job_id, "loan.opened")["message"]
    mesh.wait_for(urgent, "running")
    story.urgent_running_s = time.monotonic() - submitted
    borrowed: list[str] = mesh.show(urgent)["nodes"]  # type: ignore[assignment]
    [lent] = borrowed
    kept = until("the train job never ran again", lambda: _attempt(mesh, job_id, 2), WAIT_S)
    assert kept["nodes"] == [n for n in ("n-0", "n-1") if n != lent], kept
    assert worker_nodes(mesh, run, 2, 1) == kept["nodes"]
    [worker] = run.workers(2)
    assert worker["start"] > 0  # from its checkpoint, not from scratch
    story.lost_at_shrink = run.ran(1) - (worker["start"] - 1)
    assert 0 <= story.lost_at_shrink <= EVERY, (run.ran(1), worker)
    story.lent, story.resumed_on_one = lent, worker["start"]


def test_when_the_urgent_job_ends_the_loan_closes_and_the_job_grows_back(
    mesh: Mesh, story: Story
) -> None:
    if not story.lent:
        pytest.fail("the lending test did not get this far: nothing to grow back from")
    run, job_id, urgent, lent = story.run, story.job_id, story.urgent, story.lent
    wait_for_step(mesh, job_id, 2, story.resumed_on_one + EVERY)  # it checkpointed on 1 node
    assert mesh.state(urgent) == "running"
    run.release.touch()
    assert mesh.run("jobs", "wait", urgent, "--timeout", str(WAIT_S)).returncode == 0
    ended = time.monotonic()
    closed = wait_for_event(mesh, job_id, "loan.closed")
    grown = wait_for_event(mesh, job_id, "job.preempted", "growing onto")
    assert grown["message"] == f"growing onto {lent}", grown
    back = until(
        "the train job never ran on 2 nodes again", lambda: _attempt(mesh, job_id, 3), WAIT_S
    )
    assert sorted(back["nodes"]) == ["n-0", "n-1"], back
    assert worker_nodes(mesh, run, 3, 2) == ["n-0", "n-1"]
    regrown_s = time.monotonic() - ended
    resumed = run.workers(3)[0]["start"]
    assert resumed > story.resumed_on_one
    lost_at_grow = run.ran(2) - (resumed - 1)
    assert 0 <= lost_at_grow <= EVERY, (run.ran(2), resumed)
    wait_for_step(mesh, job_id, 3, resumed + 1)
    run.finish.touch()
    assert mesh.run("jobs", "wait", job_id, "--timeout", str(WAIT_S)).returncode == 0
    shown = mesh.show(job_id)
    assert shown["state"] == "succeeded", shown["events"]
    assert shown["attempt"] == 3, shown["events"]
    training: dict[str, Any] = shown["training"]  # type: ignore[assignment]
    assert [a["resumed_from_step"] for a in training["attempts"]] == [
        None, story.resumed_on_one - 1, resumed - 1,
    ], training  # fmt: skip
    assert all(r["steps_lost"] <= EVERY for r in training["recoveries"]), training

    # the ledger: one loan, of the lent node, from the train job to the urgent one
    with open_store(mesh.home) as store:
        [loan] = [x for x in store.list(LoanRecord) if x.lender == job_id]
    assert (loan.lender, loan.borrower, loan.pool, loan.node) == (job_id, urgent, "onprem", lent)
    assert loan.gpus == 1.0
    assert loan.closed_at_s is not None
    assert loan.opened_at_s < loan.closed_at_s
    assert closed["message"]
    print(
        f"\nelastic: urgent running {story.urgent_running_s:.1f} s after submit; steps lost at "
        f"the shrink {story.lost_at_shrink}, at the grow {lost_at_grow}; on 2 nodes again "
        f"{regrown_s:.1f} s after the urgent job ended"
    )


def _attempt(mesh: Mesh, job_id: str, number: int) -> dict[str, Any] | None:
    """Attempt ``number`` of the job once it runs."""
    shown = mesh.show(job_id)
    attempts: list[dict[str, Any]] = shown["attempts"]  # type: ignore[assignment]
    found = next((a for a in attempts if a["number"] == number), None)
    return found if found is not None and shown["state"] == "running" else None
