"""The loop both sides of the recovery benchmark train (``traced_loop``) and how it appends to
its trace: a module of its own, so that the workers of both sides import this and the example
(``model.py``) when they start or start again, and nothing else of the benchmark."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from meshctl.pools.observed import NODE_LABEL


def append(path: str, record: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


def traced_loop(config: dict[str, Any]) -> Any:
    """What the worker runs on both sides: the example loop, rank 0 appending to the file
    ``config["bench_trace"]`` each (re)start (node, checkpoint) and each report (time, step)."""
    import ray
    import ray.train

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # the working_dir: model.py
    import model

    trace = str(config["bench_trace"])
    rank0 = ray.train.get_context().get_world_rank() == 0
    if rank0:
        checkpoint = ray.train.get_checkpoint()
        node = ray.get_runtime_context().get_node_labels().get(NODE_LABEL)
        start = {
            "kind": "start",
            "at_s": time.time(),
            "node": node[0] if isinstance(node, list) else node,
            "checkpoint": checkpoint.path if checkpoint is not None else None,
        }
        append(trace, start)
    report = ray.train.report

    def recorded(metrics: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        report(metrics, *args, **kwargs)
        if rank0:
            append(trace, {"kind": "report", "at_s": time.time(), "step": metrics.get("step")})

    ray.train.report = recorded  # model.py calls ray.train.report(...)
    try:
        return model.train_loop({k: v for k, v in config.items() if not k.startswith("bench_")})
    finally:
        ray.train.report = report
