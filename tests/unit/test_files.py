"""Loading meshctl files: every kind of mistake gets file:line, the field and what was expected."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conftest import EXAMPLES

from meshctl.files import load_path, load_text
from meshctl.model import Job, Mesh
from meshctl.problems import InvalidFileError

pytestmark = pytest.mark.unit

JOB = """\
apiVersion: meshctl/v1
kind: Job
metadata:
  name: tiny
spec:
  kind: batch
  entrypoint: python run.py
  resources:
    gpus: 1
    memory_gib: 2GiB
"""


def problems_of(text: str) -> list[str]:
    with pytest.raises(InvalidFileError) as caught:
        load_text(textwrap.dedent(text), "f.yaml")
    return [str(p) for p in caught.value.problems]


# Each row: the mistake, the file, and the exact first line of the report.
BAD = [
    pytest.param(
        JOB.replace("  kind: batch\n", "  kind: batch\n  entrypoint: [\n"),
        "f.yaml:9: invalid YAML: did not find expected ',' or ']'"
        " (while parsing a flow sequence on line 7)",
        id="yaml-syntax",
    ),
    pytest.param(
        JOB.replace("gpus: 1", "gpus: lots"),
        "f.yaml:9: spec.resources.gpus: expected a whole number of GPUs or a fraction of one GPU"
        " (0 < x < 1), such as 8 or 0.25, got 'lots'",
        id="wrong-type-quantity",
    ),
    pytest.param(
        JOB.replace("entrypoint: python run.py", "entrypoint: {cmd: run}"),
        "f.yaml:7: spec.entrypoint: expected a valid string, got {'cmd': 'run'}",
        id="wrong-type-string",
    ),
    pytest.param(
        JOB.replace("gpus: 1", "gpu: 1"),
        "f.yaml:9: spec.resources.gpu: unknown field 'gpu'; did you mean 'gpus'?",
        id="unknown-field-suggests",
    ),
    pytest.param(
        JOB.replace("    gpus: 1\n", "    gpus: 1\n    colour: red\n"),
        "f.yaml:10: spec.resources.colour: unknown field 'colour'; expected one of: gpus,"
        " gpu_memory_gib, accelerator, cpus, memory_gib, nic_gbps, nodes, topology",
        id="unknown-field-lists",
    ),
    pytest.param(
        JOB.replace("memory_gib: 2GiB", "memory_gib: -2GiB"),
        "f.yaml:10: spec.resources.memory_gib: expected a memory size such as 80GiB or 512MiB,"
        " got a negative quantity -2",
        id="negative-quantity",
    ),
    pytest.param(
        JOB.replace("memory_gib: 2GiB", "memory_gib: 2PiB"),
        "f.yaml:10: spec.resources.memory_gib: expected memory in GiB of at most 65536,"
        " got 2.09715e+06",
        id="absurd-quantity",
    ),
    pytest.param(
        JOB.replace("gpus: 1", "gpus: 640"),
        "f.yaml:9: spec.resources.gpus: expected GPUs per node of at most 64, got 640",
        id="absurd-gpus",
    ),
    pytest.param(
        JOB.replace("  kind: batch\n", ""),
        "f.yaml:5: spec.kind: required field is missing",
        id="missing-required",
    ),
    pytest.param(
        JOB.replace("  entrypoint: python run.py\n", ""),
        "f.yaml:5: spec: needs an entrypoint (the command to run), a train section"
        " or a serve section",
        id="nothing-to-run",
    ),
    pytest.param(
        JOB.replace("  kind: batch\n", "  kind: batch\n  train: {loop: 'model:fit'}\n"),
        "f.yaml:5: spec: give an entrypoint or a train section, not both",
        id="two-things-to-run",
    ),
    pytest.param(
        JOB.replace("  entrypoint: python run.py\n", "  train: {loop: model}\n"),
        "f.yaml:7: spec.train.loop: expected module:function, e.g. model:train_loop, got 'model'",
        id="train-loop-not-module-function",
    ),
    pytest.param(
        JOB.replace("kind: batch", "kind: training"),
        "f.yaml:6: spec.kind: expected 'train', 'inference', 'batch' or 'interactive',"
        " got 'training'",
        id="bad-enum",
    ),
    pytest.param(
        JOB.replace("  name: tiny", "  name: Tiny_Job"),
        "f.yaml:4: metadata.name: expected a name of lower-case letters, digits and '-'"
        " (at most 63 characters), got 'Tiny_Job'",
        id="bad-name",
    ),
    pytest.param(
        JOB.replace("    gpus: 1\n", "    gpus: 1\n    gpus: 2\n"),
        "f.yaml:10: spec.resources.gpus: duplicate key; each key may appear once",
        id="duplicate-key",
    ),
    pytest.param(
        JOB.replace("meshctl/v1", "meshctl/v2"),
        "f.yaml:1: apiVersion: expected 'meshctl/v1', got 'meshctl/v2'",
        id="wrong-api-version",
    ),
    pytest.param(
        JOB.replace("kind: Job", "kind: Workload"),
        "f.yaml:2: kind: expected one of Accelerators, Catalog, Job, Mesh, MeshState, Policy,"
        " PolicyTest, got 'Workload'",
        id="unknown-kind",
    ),
    pytest.param(
        JOB.replace("gpus: 1", "gpus: 0.5\n    nodes: 2"),
        "f.yaml:8: spec.resources: a fraction of a GPU is for single-node jobs; use whole GPUs",
        id="cross-field-rule",
    ),
    pytest.param("", "f.yaml: empty file: expected a meshctl document", id="empty-file"),
    pytest.param(
        "- just\n- a list\n",
        "f.yaml:1: expected a mapping with apiVersion, kind",
        id="not-a-mapping",
    ),
]


@pytest.mark.parametrize(("text", "first"), BAD)
def test_bad_file_is_reported_on_one_line(text, first):
    reported = problems_of(text)
    assert reported[0] == first
    assert all("\n" not in line for line in reported)


def test_every_problem_in_a_file_is_reported_in_line_order():
    text = JOB.replace("gpus: 1", "gpu: 1").replace("kind: batch", "kind: nope")
    assert [line.split(":")[1] for line in problems_of(text)] == ["6", "9"]


def test_problems_of_every_document_are_reported():
    text = JOB + "---\n" + JOB.replace("gpus: 1", "gpus: -1")
    reported = problems_of(text)
    assert len(reported) == 1
    assert reported[0].startswith("f.yaml:20: spec.resources.gpus:")


def test_discriminated_pool_errors_name_the_pool_field():
    text = """\
    apiVersion: meshctl/v1
    kind: Mesh
    metadata: {name: m}
    spec:
      pools:
        - name: east
          provider: aws
          regoin: us-east-1
          node_types: [{name: p5.48xlarge, max_nodes: 2}]
    """
    assert problems_of(text) == [
        "f.yaml:6: spec.pools[0].region: required field is missing",
        "f.yaml:8: spec.pools[0].regoin: unknown field 'regoin'; did you mean 'region'?",
    ]


def test_unknown_provider_lists_the_known_ones():
    text = """\
    apiVersion: meshctl/v1
    kind: Mesh
    metadata: {name: m}
    spec:
      pools: [{name: p, provider: azure}]
    """
    assert problems_of(text) == [
        "f.yaml:5: spec.pools[0].provider: expected 'local', 'ray', 'aws' or 'gcp', got 'azure'"
    ]


def test_duplicate_pool_names_are_rejected():
    pool = "{name: a, provider: ray, address: 'http://10.0.0.1:8265'}"
    head = "apiVersion: meshctl/v1\nkind: Mesh\nmetadata: {name: m}\n"
    text = f"{head}spec:\n  pools: [{pool}, {pool}]\n"
    assert problems_of(text) == [
        "f.yaml:5: spec.pools: pool name 'a' is used twice; names must be unique"
    ]


def test_zones_must_be_in_the_region():
    text = """\
    apiVersion: meshctl/v1
    kind: Mesh
    metadata: {name: m}
    spec:
      pools:
        - {name: g, provider: gcp, project: my-project, region: us-central1,
           zones: [us-central1-a, europe-west4-b],
           node_types: [{name: g2-standard-8, max_nodes: 1}]}
    """
    assert problems_of(text) == [
        "f.yaml:6: spec.pools[0]: zones europe-west4-b are not in region us-central1"
    ]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        pytest.param("missing.yaml", "missing.yaml: no such file", id="no-such-file"),
        pytest.param("latin1.yaml", "latin1.yaml: cannot read: not UTF-8 text", id="not-utf8"),
        pytest.param(".", ".: is a directory, expected a file", id="directory"),
    ],
)
def test_unreadable_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name, message):
    monkeypatch.chdir(tmp_path)
    Path("latin1.yaml").write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(InvalidFileError) as caught:
        load_path(name)
    assert str(caught.value) == message


def test_a_good_job_parses_units_into_named_fields():
    (loaded,) = load_text(JOB.replace("gpus: 1", "gpus: 25%\n    cpus: 500m"))
    job = loaded.document
    assert isinstance(job, Job)
    assert (job.spec.resources.gpus, job.spec.resources.cpus) == (0.25, 0.5)
    assert job.spec.resources.memory_gib == 2.0


def test_merge_keys_and_anchors_work():
    text = """\
    apiVersion: meshctl/v1
    kind: Mesh
    metadata: {name: m}
    spec:
      pools:
        - name: onprem
          provider: local
          nodes:
            - &node {name: a, gpus: 8, cpus: 64, memory_gib: 1TiB,
                     accelerator: {model: H100, memory_gib: 80GiB}, labels: {rack: r1}}
            - {<<: *node, name: b, labels: {rack: r2}}
    """
    (loaded,) = load_text(textwrap.dedent(text))
    mesh = loaded.document
    assert isinstance(mesh, Mesh)
    nodes = mesh.spec.pools[0].nodes  # type: ignore[union-attr]
    assert [(n.name, n.gpus, n.labels["rack"]) for n in nodes] == [("a", 8, "r1"), ("b", 8, "r2")]


@pytest.mark.parametrize("path", sorted(EXAMPLES.rglob("*.yaml")), ids=lambda p: p.name)
def test_examples_are_valid(path: Path):
    assert load_path(path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "kind: []\n",
            "f.yaml:1: kind: expected one of Accelerators, Catalog, Job, Mesh, MeshState, Policy,"
            " PolicyTest, got []",
            id="kind-not-text",
        ),
        pytest.param(
            "a: 1\n\x1f\n",
            "f.yaml:2: invalid YAML: unacceptable character #x001f:"
            " control characters are not allowed",
            id="control-character",
        ),
        pytest.param(
            "d: 2026-13-45\n", "f.yaml: invalid YAML: month must be in 1..12", id="impossible-date"
        ),
    ],
)
def test_found_by_fuzzing(text, expected):
    assert expected in problems_of(text)


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path: Path):
    big = tmp_path / "big.yaml"
    big.write_text("description: '" + "x" * (5 * 2**20) + "'\n")
    with pytest.raises(InvalidFileError) as caught:
        load_path(big)
    assert str(caught.value) == f"{big}: file is 5.0 MiB; expected at most 4 MiB"


def test_an_alias_bomb_is_refused():
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 7)]
    problems = problems_of("\n".join(levels) + "\n")
    assert problems == [
        "f.yaml: invalid YAML: more than 200,000 values (aliases expanding?);"
        " expected a smaller file"
    ]


def test_a_number_too_large_for_a_float():
    reported = problems_of(JOB.replace("memory_gib: 2GiB", "memory_gib: 1" + "0" * 400))
    assert reported[0].endswith(
        "memory_gib: expected a memory size such as 80GiB or 512MiB, got a number too large to hold"
    )


def test_nesting_too_deep():
    assert problems_of("a: " + "[" * 5000 + "]" * 5000 + "\n") == [
        "f.yaml:1: invalid YAML: exceeded maximum nesting depth"
        " (while increasing flow level on line 1)"
    ]
    # within the parser's depth, deeper than Python's recursion: the builder's own limit
    assert problems_of("a: " + "[" * 990 + "]" * 990 + "\n") == [
        "f.yaml: invalid YAML: nested too deeply"
    ]
