"""Properties of the loader: it never crashes, and what it accepts survives a round trip."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshctl.files import load_text
from meshctl.model import Job
from meshctl.problems import InvalidFileError

pytestmark = pytest.mark.unit

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from(["80GiB", "0.25", "-1", "meshctl/v1", "Job", "Mesh"]),
)
keys = st.sampled_from(
    [
        "apiVersion",
        "kind",
        "metadata",
        "spec",
        "name",
        "pools",
        "resources",
        "gpus",
        "provider",
        "nodes",
        "entrypoint",
        "region",
        "node_types",
        "x",
    ]
)
trees = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=25,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(trees.map(lambda t: yaml.safe_dump(t)), st.text(max_size=200)))
def test_any_input_gives_documents_or_problems_never_a_crash(text):
    try:
        docs, problems = load_text(text, "f.yaml"), []
    except InvalidFileError as err:
        docs, problems = [], [str(p) for p in err.problems]
    assert bool(docs) != bool(problems)
    assert all(p.startswith("f.yaml") and "\n" not in p for p in problems)


gpus = st.one_of(st.sampled_from([0.25, 0.5, 0.125]), st.integers(0, 64).map(float))


@given(
    gpus=gpus,
    memory=st.integers(1, 65536).map(lambda m: m / 1024 * 64),
    cpus=st.integers(1, 4096).map(lambda m: m / 1000),
    kind=st.sampled_from(["train", "inference", "batch", "interactive"]),
)
def test_a_valid_job_round_trips_through_yaml(gpus, memory, cpus, kind):
    job = Job.model_validate(
        {
            "metadata": {"name": "j"},
            "spec": {
                "kind": kind,
                "entrypoint": "python x.py",
                "resources": {"gpus": gpus, "memory_gib": memory, "cpus": cpus},
            },
        }
    )
    text = yaml.safe_dump(job.model_dump(mode="json"))
    (loaded,) = load_text(text)
    assert loaded.document == job
