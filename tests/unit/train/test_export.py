"""A train job's model leaves in an open format (``train.export: onnx``): the example's MLP
exported and checked by onnxruntime against PyTorch on a batch, the artifact and the check
recorded beside the checkpoints for ``jobs show``; a failed export says why and fails
nothing else; and an export asked of a loop that never returns a value is refused before
anything is queued."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshctl.cli.app import app
from meshctl.pools.checkpoints import read_history
from meshctl.workload.train.loops import returns_value

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("    return {'model': m}\n", True),
        ("    if config:\n        return None\n    return m\n", True),
        ("    for s in range(3):\n        pass\n", False),
        ("    return\n", False),
        ("    return None\n", False),
        ("    def inner():\n        return 1\n    inner()\n", False),
        ("    f = lambda: 1\n", False),
    ],
    ids=["a-dict", "one-path-returns", "no-return", "bare-return", "return-none",
         "only-an-inner-function-returns", "only-a-lambda-returns"],
)  # fmt: skip
def test_whether_a_loop_returns_a_value_is_read_from_its_source(
    tmp_path: Path, body: str, expected: bool
) -> None:
    (tmp_path / "model.py").write_text(f"m = 1\n\n\ndef train_loop(config):\n{body}")
    assert returns_value(tmp_path, "model:train_loop") is expected


@pytest.mark.parametrize(
    "reference", ["absent:train_loop", "model:not_there"], ids=["no-module", "no-function"]
)
def test_a_loop_that_cannot_be_read_is_not_judged(tmp_path: Path, reference: str) -> None:
    (tmp_path / "model.py").write_text("train_loop = None\n")
    assert returns_value(tmp_path, reference) is None


JOB = """\
apiVersion: meshctl/v1
kind: Job
metadata: {name: t}
spec:
  kind: train
  working_dir: .
  resources: {gpus: 1, cpus: 1, memory_gib: 1GiB}
  train:
    loop: model:train_loop
    export: onnx
"""


def test_an_export_of_a_loop_that_returns_nothing_is_refused_before_queueing(
    cli: CliRunner, tmp_path: Path
) -> None:
    (tmp_path / "model.py").write_text("def train_loop(config):\n    print(config)\n")
    (tmp_path / "job.yaml").write_text(JOB)
    said = (
        "spec.train.export: expected a loop that returns its model ({'model': module,"
        " 'example': inputs}) for export onnx, got model:train_loop, which never returns a value"
    )
    submitted = cli.invoke(app, ["submit", str(tmp_path / "job.yaml")])
    assert submitted.exit_code == 2
    assert submitted.stderr.strip() == f"error: {tmp_path / 'job.yaml'}:10: {said}"
    flags = ["train", "model:train_loop", "--export", "onnx", "--working-dir", str(tmp_path)]
    trained = cli.invoke(app, flags)
    assert trained.exit_code == 2
    assert trained.stderr.strip() == (
        "error: --export: expected a loop that returns its model ({'model': module,"
        " 'example': inputs}), got model:train_loop, which never returns a value"
    )
    listed = cli.invoke(app, ["jobs", "list", "-o", "json"])
    assert listed.stdout.strip() in ("[]", "")  # nothing queued


def test_an_unknown_export_format_is_one_line() -> None:
    result = CliRunner().invoke(app, ["train", "model:train_loop", "--export", "savedmodel"])
    assert result.exit_code == 2
    [line] = result.stderr.strip().splitlines()
    assert line == "error: --export: expected 'onnx', got 'savedmodel'"


def example_model():  # type: ignore[no-untyped-def]
    """The example's MLP (examples/train/model.py), a few steps trained, and a batch."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    x = torch.randn(64, 16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(5):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), torch.sin(x[:, :1])).backward()
        optimizer.step()
    return model, x[:8]


def test_the_example_model_exported_to_onnx_agrees_with_pytorch_in_onnxruntime(
    tmp_path: Path,
) -> None:
    import onnxruntime

    from meshctl.workload.train.export import ATOL, RTOL, export

    model, example = example_model()
    uri = f"file://{tmp_path}/job-1"
    record = export({"model": model, "example": example, "loss": 0.1}, uri, None, 2)
    assert record["error"] is None
    assert record["path"] == f"{uri}/model.onnx"
    onnx_file = tmp_path / "job-1" / "model.onnx"
    assert record["bytes"] == onnx_file.stat().st_size > 0
    checked = record["checked"]
    assert (checked["samples"], checked["rtol"], checked["atol"]) == (8, RTOL, ATOL)
    assert checked["max_abs_diff"] <= ATOL + RTOL  # outputs of order one
    assert checked["runtime"] == f"onnxruntime {onnxruntime.__version__}"
    session = onnxruntime.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    [single] = session.get_inputs()
    assert list(single.shape) == [8, 16]  # one file, the weights inside it
    assert sorted(p.name for p in onnx_file.parent.iterdir()) == [".meshctl", "model.onnx"]
    assert read_history(uri)["exports"] == {2: record}


@pytest.mark.parametrize(
    ("returned", "error"),
    [
        pytest.param(
            {"step": 3}, "the loop returned no model: expected {'model': module, 'example':"
            " inputs}, got dict", id="no-model",
        ),
        pytest.param(
            None, "the loop returned no model: expected {'model': module, 'example': inputs},"
            " got NoneType", id="nothing",
        ),
        pytest.param(
            "model-without-example", "'example': expected a tensor (or a tuple of them) the"
            " model takes", id="no-example",
        ),
    ],
)  # fmt: skip
def test_a_failed_export_is_recorded_with_its_reason_and_writes_no_file(
    tmp_path: Path, returned: object, error: str
) -> None:
    from meshctl.workload.train.export import export

    if returned == "model-without-example":
        returned = {"model": example_model()[0]}
    uri = f"file://{tmp_path}/job-1"
    record = export(returned, uri, None, 1)
    assert record["error"] == error
    assert not (tmp_path / "job-1" / "model.onnx").exists()
    assert read_history(uri)["exports"][1]["error"] == error


def test_jobs_show_lists_the_artifact_and_what_the_check_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import meshctl.cli.render as render
    from meshctl.cli.jobtraining import show_export

    lines: list[str] = []
    exported = {
        "attempt": 1, "format": "onnx", "path": "file:///ckpt/job-1/model.onnx", "bytes": 6443,
        "checked": {"runtime": "onnxruntime 1.30.0", "samples": 8, "max_abs_diff": 5.96e-08,
                    "rtol": 1e-4, "atol": 1e-5},
        "error": None, "exported_at": "2026-12-05T15:00:00Z",
    }  # fmt: skip
    monkeypatch.setattr(render, "say", lines.append)
    show_export(exported)
    show_export({**exported, "path": None, "checked": None, "error": "no model"})
    assert lines == [
        "  artifact: file:///ckpt/job-1/model.onnx (onnx, 6443 bytes); onnxruntime 1.30.0"
        " agrees with PyTorch on 8 samples: max |diff| 5.96e-08 (rtol 0.0001, atol 1e-05)",
        "  export, attempt 1: onnx failed: no model",
    ]


@pytest.mark.parametrize(
    ("train", "expected"),
    [('{"export": "onnx"}', "onnx"), ('{"loop": "m:f"}', None), (None, None)],
    ids=["asked", "not-asked", "not-a-meshctl-job"],
)
def test_a_loop_learns_whether_the_job_asked_for_an_export(
    monkeypatch: pytest.MonkeyPatch, train: str | None, expected: str | None
) -> None:
    from meshctl.workload.train import exporting

    if train is None:
        monkeypatch.delenv("MESHCTL_TRAIN", raising=False)
    else:
        monkeypatch.setenv("MESHCTL_TRAIN", train)
    assert exporting() == expected
