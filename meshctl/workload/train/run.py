"""The entrypoint of a train job (``python -m meshctl.workload.train.run``): build the
``TorchTrainer`` around the job's loop and fit it.

What the job file says arrives in ``MESHCTL_TRAIN`` (JSON; the controller writes it):

- ``loop``: ``module:function`` in the working directory, run on every worker;
- ``workers``, ``min_workers`` (elastic), ``per_worker`` (CPU, GPU, memory), ``nodes`` (their
  names), ``node_label`` and ``node_ids`` (what they are pinned by: Ray's ``ray.io/node-id``
  and each node's id) and ``workers_per_node``: worker ``i`` is pinned to
  ``node_ids[i // workers_per_node]``, so the workers run where meshctl placed the job;
- ``run_name``, ``storage`` and ``endpoint_url``: ``RunConfig(name, storage_path)``, the same
  on every attempt of the job, so Ray Train resumes from the latest checkpoint;
- ``devices``: the vendor of the nodes' accelerators and, from the accelerator registry, the
  torch backend (``TorchConfig``; gloo where the node has no CUDA device: an emulated mesh)
  and the visibility variable;
- ``max_failures`` (``FailureConfig``), ``keep`` (``CheckpointConfig.num_to_keep``),
  ``config`` (the loop's ``train_loop_config``), ``export`` (``onnx``: the model rank 0's
  loop returns, exported in that worker beside the checkpoints and checked,
  ``meshctl.workload.train.export``; the model and its example are not handed on to Ray Train, which
  refuses tensors in a return value);
- ``replace_wait_s``: when given (with ``storage``), workers that Ray Train starts again after
  a failure are not pinned to nodes that died: the run asks the controller for replacements
  and waits this long for them (``meshctl.workload.train.nominations``).

Progress (reports, checkpoints, failures, worker-group starts) is recorded beside the
checkpoints for the controller (``meshctl.workload.train.progress``).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import ray
import ray.train
from ray.train.torch.config import TorchConfig
from ray.train.v2._internal.execution.callback import ControllerCallback, WorkerGroupCallback
from ray.train.v2.api.callback import UserCallback
from ray.train.v2.api.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.v2.torch.torch_trainer import TorchTrainer

from meshctl.errors import in_words
from meshctl.workload.storage import filesystem
from meshctl.workload.train import nominations, progress


def load_loop(reference: str) -> Callable[..., Any]:
    module, _, function = reference.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # the job's working directory
    found = getattr(importlib.import_module(module), function, None)
    if not callable(found):
        raise SystemExit(f"meshctl train: {reference}: no function {function} in {module}")
    return found  # type: ignore[no-any-return]


def run_loop(reference: str, where: dict[str, Any], config: dict[str, Any]) -> Any:
    """What every worker runs: record the start (rank 0), the job's own loop, and (rank 0)
    that the loop returned: what follows is Ray Train tearing the workers down, not a hang."""
    context = ray.train.get_context()
    if where.get("devices"):  # the registry's visibility variable, for the devices Ray gave
        from meshctl.workload.train.devices import VisibilityError, set_visible

        try:
            shown = set_visible(where["devices"])
        except VisibilityError as err:  # Ray's own variable, by index, stays
            shown = {}
            say(f"worker {context.get_world_rank()}: {err}; Ray's numbering stays")
        if shown and context.get_world_rank() == 0:
            say(", ".join(f"{k}={v}" for k, v in shown.items()))
    if context.get_world_rank() == 0 and where.get("uri"):
        checkpoint = ray.train.get_checkpoint()
        path = checkpoint.path if checkpoint is not None else None
        progress.record_start(where["uri"], where.get("endpoint_url"), where["attempt"], path)
    loop = load_loop(reference)
    takes_config = bool(inspect.signature(loop).parameters)
    returned = loop(config) if takes_config else loop()
    if context.get_world_rank() == 0 and where.get("uri"):
        progress.record_end(where["uri"], where.get("endpoint_url"), where["attempt"])
    if context.get_world_rank() == 0 and where.get("export"):
        exported(where, returned)
    if isinstance(returned, dict):  # Ray Train refuses tensors in a return value
        returned = {k: v for k, v in returned.items() if k not in ("model", "example")}
    return returned


def exported(where: dict[str, Any], returned: Any) -> None:
    """The model the loop returned, exported beside the checkpoints and checked, in rank 0's
    worker (``meshctl.workload.train.export``). A failure is said and recorded; the run goes on."""
    from meshctl.workload.train.export import export

    if not where.get("uri"):
        say("export: skipped: the job has no checkpoint storage")
        return
    record = export(returned, where["uri"], where.get("endpoint_url"), where["attempt"])
    if record["error"]:
        say(f"export to {where['export']} failed: {record['error']}")
        return
    checked = record["checked"]
    say(
        f"exported {record['path']} ({record['bytes']} bytes); {checked['runtime']} agrees"
        f" with PyTorch on {checked['samples']} samples (max |diff| "
        f"{checked['max_abs_diff']:.3g}; rtol {checked['rtol']:g}, atol {checked['atol']:g})"
    )


class Progress(UserCallback, ControllerCallback):
    """Runs in the Ray Train controller: every report and failure, recorded; what is not yet
    written is written when the run finishes or is aborted."""

    def __init__(self, uri: str, endpoint_url: str | None, attempt: int) -> None:
        self.recorder = progress.Recorder(uri, endpoint_url, attempt)

    def after_report(
        self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any
    ) -> None:
        self.recorder.reported(
            metrics[0] if metrics else {}, checkpoint.path if checkpoint else None
        )

    def after_exception(self, run_context: Any, worker_exceptions: dict[int, Exception]) -> None:
        first = next(iter(worker_exceptions.items()), None)
        error = f"worker {first[0]}: {first[1]!r}" if first else "a worker failed"
        self.recorder.failed(error)

    def after_controller_finish(self, result: Any) -> None:
        self.recorder.flush()

    def before_controller_abort(self) -> None:
        self.recorder.flush()


def say(message: str) -> None:
    """A line of the run's log, with its time: Ray forwards what Ray Train's controller prints
    without one, and a restart's steps are told apart by theirs."""
    print(f"meshctl train [{time.strftime('%H:%M:%S')}]: {message}", flush=True)


WATCH_S = 1.0  # how often a running group's nomination is read again (a file, or S3 GET)


def alive_node_ids() -> set[str]:
    return {str(n["NodeID"]) for n in ray.nodes() if n.get("Alive")}  # type: ignore[no-untyped-call]


def put_again(wrapper: Any) -> None:
    """Ray Train's training function put into the object store anew, its only copy beside the
    caller (Ray Train's controller).

    Ray Train puts the function once, at start (an ``ObjectRefWrapper``), and every worker's
    node keeps the copy it fetched. Ray's object manager fetches from one listed copy at
    random and tries another after 10, 20, 40 s: a worker started after its node was replaced
    while Ray still lists that node alive (silent) was seen to wait 10 or 70 s there before
    its loop began. A fresh put has no copy on any node of the old workers."""
    held = getattr(wrapper, "_ref", None)
    if not isinstance(held, ray.ObjectRef):
        say("cannot put the training function again (Ray Train keeps it differently)")
        return
    wrapper._ref = ray.put(ray.get(held))


class NodeReplaced(RuntimeError):
    """A worker ended by its run because the controller replaced its node (silent, or gone
    before Ray noticed): Ray Train restarts the worker group on the nominated pins."""


class Replacements(ControllerCallback, WorkerGroupCallback):
    """Runs in the Ray Train controller (beside the driver): before the workers start again
    after a failure, they are pinned to the nodes the controller nominated
    (``meshctl.workload.train.nominations``): at once when it already has (a node it found dead or
    silent), else, when Ray reports a pinned node dead, once it does, waiting at most
    ``wait_s``. Nothing nominated leaves the pins as they were.

    While the workers run, the nomination is read again every ``watch_s`` (at Ray Train's
    health polls): one that replaces a node a worker runs on ends that worker (``ray.kill``,
    and a ``NodeReplaced`` error in its poll), so Ray Train restarts the group there and then
    on the new pins, without waiting for Ray to call the node dead (a silent node: about a
    minute) or for its health check (ten). Before workers start again, the training function
    is put anew (``put_again``): none of them fetches it from the replaced node."""

    def __init__(
        self,
        where: dict[str, Any],
        label: str,
        pins: list[str],
        per_node: int,
        wait_s: float,
        alive: Callable[[], set[str]] = alive_node_ids,
        watch_s: float = WATCH_S,
        clock: Callable[[], float] = time.monotonic,
        kill: Callable[[Any], None] | None = None,
        recorder: progress.Recorder | None = None,
        fresh: Callable[[Any], None] | None = None,
    ) -> None:
        """``recorder``: the run's progress (``Progress``'s): a worker this callback ends is a
        failure there, as one Ray Train saw would be (its user callbacks see the poll first)."""
        self.where, self.label, self.pins, self.per_node = where, label, pins, per_node
        self.wait_s, self.alive, self.watch_s, self.clock = wait_s, alive, watch_s, clock
        self.kill, self.recorder, self.fresh = kill, recorder, fresh
        self.context: Any = None
        self.failed = False
        self.asked = 0
        self.workers: list[tuple[str, Any]] = []  # (node id, actor) by world rank
        self.read_at = -float("inf")
        self.ended: tuple[str, ...] | None = None  # the nomination whose workers were ended

    def after_controller_start(self, train_run_context: Any) -> None:
        self.context = train_run_context

    def before_worker_group_start(self, worker_group_context: Any) -> None:
        if self.workers:  # a restart: the old workers' nodes hold copies of the function
            try:
                (self.fresh or put_again)(worker_group_context.train_fn_ref)
            except Exception as err:  # the old ref still works, at worst slowly
                say(f"could not put the training function again: {in_words(err)}")

    def after_worker_group_start(self, worker_group: Any) -> None:
        again = bool(self.workers)
        self.workers = [(w.metadata.node_id, w.actor) for w in worker_group.get_workers()]
        if again:
            say(f"workers started again on {', '.join(sorted({n for n, _ in self.workers}))}")

    def after_worker_group_poll_status(self, worker_group_status: Any) -> None:
        now = self.clock()
        if not self.workers or now - self.read_at < self.watch_s:
            return
        self.read_at = now
        given = self._nominated()
        if given is None or given == tuple(self.pins) or given == self.ended:
            return
        if len(given) != len(self.pins):
            return  # not a nomination these workers can take
        replaced = set(self.pins) - set(given)
        ranks = [r for r, (node, _) in enumerate(self.workers) if node in replaced]
        if not ranks:
            return
        self.ended = given
        gone = ", ".join(sorted(replaced))
        say(f"node(s) {gone} replaced by the controller; ending their workers")
        for rank in ranks:
            self._kill(self.workers[rank][1])
            error = NodeReplaced(f"node {self.workers[rank][0]} was replaced")
            status = worker_group_status.worker_statuses.get(rank)
            if status is not None:
                status.error = error
        if self.recorder is not None:
            self.recorder.failed(f"worker {ranks[0]}: {error!r}")

    def _kill(self, actor: Any) -> None:
        try:
            (self.kill or ray.kill)(actor)  # ray.kill looked up in the controller's process
        except Exception as err:  # already gone: its poll fails anyway
            say(f"could not end a worker: {in_words(err)}")

    def _nominated(self) -> tuple[str, ...] | None:
        try:
            return nominations.nominated(
                self.where["uri"], self.where["endpoint_url"], self.where["attempt"]
            )
        except Exception:  # storage unreachable for now: read again at the next poll
            return None

    def before_controller_execute_failure_decision(self, failure_decision: Any) -> None:
        self.failed = True

    def before_controller_execute_resize_decision(self, resize_decision: Any) -> None:
        if not self.failed or self.context is None:
            return  # the first start, or a resize of an elastic run: its pins hold
        self.failed = False
        uri, endpoint, attempt = (
            self.where["uri"],
            self.where["endpoint_url"],
            self.where["attempt"],
        )
        living = self.alive()
        lost = tuple(p for p in self.pins if p not in living)
        given = nominations.nominated(uri, endpoint, attempt)
        if given is not None and self._fits(given, lost) and given != tuple(self.pins):
            return self._pin(given)  # the controller replaced a node already
        if not lost:
            return None  # a worker died, not its node: Ray Train starts it again in place
        self.asked += 1
        request = nominations.Ask(
            attempt, self.asked, time.time(), lost, tuple(self.pins), self.per_node
        )
        nominations.ask(uri, endpoint, request)
        say(f"node(s) {', '.join(lost)} lost; waiting for replacements")
        given = nominations.wait_for_nomination(
            uri, endpoint, attempt, lambda pins: self._fits(pins, lost), self.wait_s
        )
        if given is None:
            say(f"no replacement within {self.wait_s:g} s")
            return None
        return self._pin(given)

    def _fits(self, given: tuple[str, ...] | None, lost: tuple[str, ...]) -> bool:
        """Nominated pins the workers can start on: one per node, none of them lost."""
        return given is not None and len(given) == len(self.pins) and not set(given) & set(lost)

    def _pin(self, node_ids: tuple[str, ...]) -> None:
        self.pins = list(node_ids)
        scaling = self.context.scaling_config  # re-read when the workers start
        scaling.label_selector = [
            {self.label: self.pins[i // self.per_node]} for i in range(int(scaling.max_workers))
        ]
        say(f"starting again on {', '.join(self.pins)}")


def cuda_here() -> bool:
    import torch

    return bool(torch.cuda.is_available())


RUNTIMES = {"xla": "torch_xla", "hccl": "habana_frameworks.torch"}  # backend -> its module


def runtime_here(resource: str, backend: str | None) -> bool:
    """Whether this host can drive the devices: CUDA (or ROCm's) for GPUs, else the torch
    runtime of the vendor's backend (torch_xla, Habana's), importable."""
    if resource == "GPU":
        return cuda_here()
    module = RUNTIMES.get(backend or "")
    if module is None:
        return False
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package missing
        return False


class Trainer(TorchTrainer):
    """``TorchTrainer`` less Ray Data's dataset manager when it is given no datasets (a train
    job never gives any: its loop reads its own data, ``meshctl.workload``).

    Ray Train starts a ``DatasetManager`` actor beside its controller at every start of the
    worker group, a restart after a lost node included, datasets or not: a process that imports
    Ray Data, about 1.7 CPU-seconds (``benchmarks/recovery.py``, each start, both sides). On a
    small head it competes with the new workers while the run should be resuming. Its other
    part, handing the driver's Ray Data context to the workers, has nothing to hand: the driver
    runs no user code before the workers do. A Ray Train that builds its callbacks otherwise
    keeps them all."""

    def _create_default_callbacks(self) -> list[Any]:
        callbacks: list[Any] = super()._create_default_callbacks()
        if self.datasets:
            return callbacks
        try:
            from ray.train.v2._internal.callbacks import DatasetsCallback
        except ImportError:
            return callbacks
        return [c for c in callbacks if not isinstance(c, DatasetsCallback)]


def trainer(spec: dict[str, Any], attempt: int) -> TorchTrainer:
    workers, per_node = int(spec["workers"]), int(spec.get("workers_per_node", 1))
    label, pins = str(spec["node_label"]), list(spec.get("node_ids") or [])
    per_worker = {k: v for k, v in spec.get("per_worker", {}).items() if v}
    devices = spec.get("devices") or {}
    resource = str(devices.get("resource") or "GPU")
    held = bool(per_worker.get(resource))
    here = held and runtime_here(resource, devices.get("backend"))
    use_gpu = here and resource == "GPU"
    if held and not here:  # devices declared on CPU nodes: an emulated mesh
        said = f"{devices['vendor']} ({devices['backend']}); " if devices else ""
        print(f"meshctl train: {said}no {resource} runtime here; the workers train on CPU"
              " (gloo)", flush=True)  # fmt: skip
    if resource == "TPU" or (resource == "GPU" and not here):
        # Ray Train asks CUDA of GPU workers, and a TPU worker of its own slice reservation
        # (use_tpu, which pins by its own labels): meshctl placed the job, its label selector
        # pins the workers, and its placement holds the devices. Other resources (Neuron
        # cores, HPUs) the workers hold, and Ray makes only theirs visible to them.
        per_worker.pop(resource, None)
    backend = (devices.get("backend") or "nccl") if here else "gloo"
    scaling = ScalingConfig(
        num_workers=(int(spec["min_workers"]), workers) if spec.get("min_workers") else workers,
        use_gpu=use_gpu,
        resources_per_worker=per_worker or None,
        label_selector=[{label: pins[i // per_node]} for i in range(workers)]
        if len(pins) * per_node >= workers
        else None,
    )
    storage, endpoint = spec.get("storage"), spec.get("endpoint_url")
    uri = f"{storage.rstrip('/')}/{spec['run_name']}" if storage else None
    fs, path = filesystem(storage, endpoint) if storage else (None, None)
    where = {"uri": uri, "endpoint_url": endpoint, "attempt": attempt, "export": spec.get("export")}
    if devices:
        where["devices"] = devices
    recorded = Progress(uri, endpoint, attempt) if uri else None
    callbacks: list[Any] = [recorded] if recorded else []
    wait_s = spec.get("replace_wait_s")
    if recorded and wait_s is not None and scaling.label_selector is not None:
        callbacks.append(
            Replacements(where, label, pins, per_node, float(wait_s), recorder=recorded.recorder)
        )
    run = RunConfig(
        name=spec["run_name"],
        storage_path=path,
        storage_filesystem=fs,
        failure_config=FailureConfig(max_failures=int(spec.get("max_failures", 3))),
        checkpoint_config=CheckpointConfig(num_to_keep=int(spec.get("keep", 3))),
        callbacks=callbacks or None,
    )
    return Trainer(
        functools.partial(run_loop, spec["loop"], where),
        train_loop_config=dict(spec.get("config") or {}),
        torch_config=TorchConfig(backend=backend),  # the registry's for the nodes' vendor
        scaling_config=scaling,
        run_config=run,
    )


def main() -> None:
    spec = json.loads(os.environ["MESHCTL_TRAIN"])
    attempt = int(os.environ.get("MESHCTL_ATTEMPT", "1"))
    load_loop(spec["loop"])  # a wrong reference fails here, before any worker starts
    print(
        f"meshctl train: {spec['loop']} on {spec['workers']} workers, run {spec['run_name']} "
        f"(attempt {attempt}) in {spec.get('storage') or 'Ray default storage'}",
        flush=True,
    )
    result = trainer(spec, attempt).fit()
    latest = result.checkpoint.path if result.checkpoint else None
    print(f"meshctl train: finished; latest checkpoint {latest}", flush=True)


if __name__ == "__main__":
    main()
