"""A train job's model, exported to ONNX (``train.export: onnx``) and checked.

Rank 0's loop returns ``{"model": module, "example": inputs}`` (``inputs`` a tensor or a
tuple of them, a batch the model takes; ``meshctl.workload.train.exporting()`` tells the loop
the job asked). In that worker, once the loop has returned, the model is exported with
``torch.onnx.export`` (its default, ``torch.export``-based exporter, the weights inside the
one file), then checked: onnxruntime loads the file and runs the example, and its outputs
must equal PyTorch's within ``RTOL`` and ``ATOL`` (``numpy.allclose``). The file goes beside
the run's checkpoints (``<run>/model.onnx``); what happened, an error included, goes in
``<run>/.meshctl/export-<attempt>.json`` for ``meshctl jobs show``.

A failed export (no model returned, an operator the exporter cannot convert, outputs that
differ) is recorded with its reason and fails nothing else: the training and its checkpoints
stand.
"""

from __future__ import annotations

import importlib.metadata
import os
import tempfile
import time
from typing import Any

from meshctl.workload.storage import filesystem, write

FORMAT = "onnx"
FILE = "model.onnx"
RTOL, ATOL = 1e-4, 1e-5  # onnxruntime's outputs against PyTorch's on the example batch


class ExportError(Exception):
    """Why the export failed, in one line."""


def export(returned: Any, uri: str, endpoint_url: str | None, attempt: int) -> dict[str, Any]:
    """Export and check the model the loop returned; write it beside the run's checkpoints
    (``uri``) and record the outcome. Returns the record; never raises."""
    record: dict[str, Any] = {"attempt": attempt, "format": FORMAT, "at_s": None, "error": None}
    try:
        model, example = model_of(returned)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, FILE)
            record |= to_onnx(model, example, path)
            record["path"] = _upload(path, uri, endpoint_url)
    except ExportError as err:
        record["error"] = str(err)
    except Exception as err:  # the exporter's own errors: reported, the training stands
        record["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    record["at_s"] = time.time()
    try:
        fs, base = filesystem(uri, endpoint_url)
        write(fs, base, f"export-{attempt}.json", record)
    except Exception as err:
        print(f"meshctl train: could not record the export: {err}", flush=True)
    return record


def model_of(returned: Any) -> tuple[Any, tuple[Any, ...]]:
    """(model, example inputs) from what the loop returned; ExportError otherwise."""
    import torch

    if not isinstance(returned, dict) or "model" not in returned:
        got = type(returned).__name__
        raise ExportError(
            f"the loop returned no model: expected {{'model': module, 'example': inputs}}, "
            f"got {got}"
        )
    model, example = returned["model"], returned.get("example")
    if not isinstance(model, torch.nn.Module):
        raise ExportError(f"'model': expected a torch.nn.Module, got {type(model).__name__}")
    inputs = example if isinstance(example, tuple) else (example,)
    if example is None or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise ExportError("'example': expected a tensor (or a tuple of them) the model takes")
    return model, inputs


def to_onnx(model: Any, example: tuple[Any, ...], path: str) -> dict[str, Any]:
    """Export to ``path`` and check it with onnxruntime; what the check found."""
    import numpy as np
    import onnxruntime
    import torch

    model = model.eval().cpu()
    example = tuple(t.cpu() for t in example)
    with torch.no_grad():
        expected = model(*example)
    wanted = [t.numpy() for t in (expected if isinstance(expected, tuple) else (expected,))]
    torch.onnx.export(model, example, path, dynamo=True, external_data=False)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), example, strict=True)}
    outputs = session.run(None, feeds)
    if len(outputs) != len(wanted):
        raise ExportError(f"onnxruntime gave {len(outputs)} outputs, PyTorch {len(wanted)}")
    pairs = list(zip(outputs, wanted, strict=True))
    diff = max(float(np.max(np.abs(o - w))) if w.size else 0.0 for o, w in pairs)
    close = all(np.allclose(o, w, rtol=RTOL, atol=ATOL) for o, w in pairs)
    checked = {
        "runtime": f"onnxruntime {importlib.metadata.version('onnxruntime')}",
        "samples": int(example[0].shape[0]) if example[0].dim() else 1,
        "max_abs_diff": diff,
        "rtol": RTOL,
        "atol": ATOL,
    }
    if not close:
        raise ExportError(
            f"onnxruntime's outputs differ from PyTorch's by up to {diff:.3g}"
            f" (tolerance: rtol {RTOL:g}, atol {ATOL:g})"
        )
    return {"bytes": os.path.getsize(path), "checked": checked}


def _upload(path: str, uri: str, endpoint_url: str | None) -> str:
    """Copy the file beside the run's checkpoints; its URI."""
    fs, base = filesystem(uri, endpoint_url)
    fs.create_dir(base, recursive=True)
    with open(path, "rb") as source, fs.open_output_stream(f"{base}/{FILE}") as out:
        out.write(source.read())
    return f"{uri.rstrip('/')}/{FILE}"
