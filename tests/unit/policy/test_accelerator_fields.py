"""Policies read accelerators: what a job asks of each device (``job.accelerator``) and the
kinds a pool carries (``pool.vendors``, ``pool.accelerator_types``), from nvidia, amd and
google pools built from a mesh and a catalog."""

from __future__ import annotations

import textwrap

import pytest
from helpers import NOW, compiled, job, pool, verdict

from meshctl.files import load_text
from meshctl.model import Mesh
from meshctl.model.capacity import AcceleratorType
from meshctl.model.catalog import Catalog
from meshctl.policy import MeshSnapshot, bind
from meshctl.policy.facts import job_map, mesh_snapshot, observed, pool_map
from meshctl.policy.refs import ExpressionError, compile_checked

pytestmark = pytest.mark.unit

H100 = AcceleratorType("nvidia", "H100", 80.0)
A100_40 = AcceleratorType("nvidia", "A100", 40.0)
MI300X = AcceleratorType("amd", "MI300X", 192.0)
V5E = AcceleratorType("google", "v5e", 16.0)


def _pool(name: str, provider: str, *kinds: AcceleratorType):
    models = tuple(sorted({k.model for k in kinds}))
    return pool(name, provider, accelerators=models, accelerator_types=kinds)


# one pool per vendor, one with two nvidia kinds, one without accelerators
MESH = MeshSnapshot(
    (
        _pool("nvidia", "local", H100),
        _pool("amd", "local", MI300X),
        _pool("mixed", "local", A100_40, H100),
        _pool("tpu", "gcp", V5E),
        _pool("cpu", "local"),
    )
)
CRITICAL_BIG = """\
pools:
  - name: critical-on-big-gpus
    when: job.criticality == "critical"
    allow: >-
      pool.accelerator_types.size() > 0 &&
      pool.accelerator_types.all(accelerator,
        accelerator.vendor in ["nvidia", "amd"] && accelerator.memory_gib >= 80.0)
"""


def _selecting(selector: str) -> str:
    return f"pools:\n  - name: s\n    allow: >-\n      {selector}\n"


@pytest.mark.parametrize(
    ("selector", "eligible"),
    [
        pytest.param('"amd" in pool.vendors', ["amd"], id="vendor-in-list"),
        pytest.param(
            'pool.vendors.exists(v, v == "nvidia")', ["nvidia", "mixed"], id="vendor-exists"
        ),
        pytest.param('pool.vendors == ["google"]', ["tpu"], id="only-google"),
        pytest.param("pool.vendors.size() == 0", ["cpu"], id="no-accelerator"),
        pytest.param(  # the mixed pool's A100 has 40 GiB: `all` is false, `exists` true
            "pool.accelerator_types.all(a, a.memory_gib >= 80.0)",
            ["nvidia", "amd", "cpu"],
            id="all-is-vacuous-without-accelerators",
        ),
        pytest.param(
            "pool.accelerator_types.exists(a, a.memory_gib >= 80.0)",
            ["nvidia", "amd", "mixed"],
            id="some-kind-with-80-gib",
        ),
        pytest.param(
            'pool.accelerator_types.exists(a, a.vendor == "nvidia" && a.model == "A100")',
            ["mixed"],
            id="vendor-and-model-of-one-kind",
        ),
        pytest.param(
            "pool.accelerator_types.exists(a, a.memory_gib < 20)",  # an int literal is fine
            ["tpu"],
            id="int-literal-against-double",
        ),
        pytest.param(
            'pool.accelerator_types.filter(a, a.vendor == "nvidia").all(a, a.model == "H100")',
            ["nvidia", "amd", "tpu", "cpu"],
            id="filter-then-all",
        ),
        pytest.param('"MI300X" in pool.accelerators', ["amd"], id="models-unchanged"),
    ],
)
def test_pool_accelerator_fields(selector, eligible):
    result = verdict(compiled(_selecting(selector)), job(), MESH)
    assert sorted(result.eligible_pools) == sorted(eligible)


@pytest.mark.parametrize(
    ("criticality", "eligible"),
    [
        # critical: only pools whose every accelerator is nvidia or amd with >= 80 GiB
        pytest.param("critical", ["nvidia", "amd"], id="critical-on-big-nvidia-or-amd"),
        pytest.param("standard", ["nvidia", "amd", "mixed", "tpu", "cpu"], id="others-anywhere"),
    ],
)
def test_critical_jobs_only_on_big_nvidia_or_amd(criticality, eligible):
    result = verdict(compiled(CRITICAL_BIG), job(criticality=criticality), MESH)
    assert list(result.eligible_pools) == eligible


ASKS_AMD = {"gpus": 1, "gpu_memory_gib": "128GiB", "accelerator": {"vendor": "amd"}}
ASKS_MODELS = {"gpus": 2, "accelerator": {"any_of": ["H100", "H200"]}}


@pytest.mark.parametrize(
    ("condition", "resources", "matched"),
    [
        pytest.param('job.accelerator.vendor == "amd"', ASKS_AMD, True, id="vendor"),
        pytest.param('job.accelerator.vendor == ""', ASKS_MODELS, True, id="vendor-unset"),
        pytest.param("job.accelerator.memory_gib >= 80.0", ASKS_AMD, True, id="memory"),
        pytest.param("job.accelerator.memory_gib == 0.0", ASKS_MODELS, True, id="memory-unset"),
        pytest.param('"H200" in job.accelerator.models', ASKS_MODELS, True, id="models"),
        pytest.param("job.accelerator.models.size() == 0", ASKS_AMD, True, id="models-unset"),
        pytest.param(
            "job.accelerator.models == job.resources.accelerators",
            ASKS_MODELS,
            True,
            id="resources-accelerators-kept",
        ),
        pytest.param(
            'job.accelerator.vendor == "" && job.accelerator.memory_gib == 0.0',
            {"gpus": 1},
            True,
            id="asks-nothing",
        ),
        pytest.param('job.accelerator.vendor == "nvidia"', ASKS_AMD, False, id="other-vendor"),
    ],
)
def test_job_accelerator_fields(condition, resources, matched):
    spec = f"pools:\n  - name: d\n    when: >-\n      {condition}\n    deny: 'true'\n"
    result = verdict(compiled(spec), job(resources=resources), MESH)
    assert (result.eligible_pools == ()) is matched


def test_a_rule_matches_the_jobs_models_to_a_pools_kinds():
    spec = _selecting(
        "job.accelerator.models.size() == 0 || "
        "pool.accelerator_types.exists(a, a.model in job.accelerator.models && "
        "a.memory_gib >= job.accelerator.memory_gib)"
    )
    asks = {"gpus": 1, "gpu_memory_gib": "80GiB", "accelerator": {"any_of": ["A100", "H100"]}}
    bound = bind(compiled(spec), MESH, NOW)
    assert bound.evaluate(job(resources=asks)).eligible_pools == ("nvidia", "mixed")
    assert len(bound.evaluate(job()).eligible_pools) == 5


@pytest.mark.parametrize(
    ("source", "message"),
    [
        pytest.param(
            'job.accelerator.model == "H100"',
            "job.accelerator has no field 'model'; did you mean 'models'?",
            id="job-models",
        ),
        pytest.param(
            'pool.vendor == "amd"',
            "pool has no field 'vendor'; did you mean 'vendors'?",
            id="pool-vendors",
        ),
        pytest.param(
            "pool.accelerator.memory_gib >= 80.0",
            "pool has no field 'accelerator'; a pool may carry several kinds: did you mean "
            "'accelerator_types' (pool.accelerator_types.all(a, a.memory_gib >= 80.0)) or "
            "'vendors'?",
            id="pool-has-no-single-accelerator",
        ),
        pytest.param(
            'accelerator.vendor == "amd"',
            "unknown variable 'accelerator'; did you mean 'job.accelerator' (what the job asks "
            "of each device) or 'pool.accelerator_types' (what a pool carries: "
            'pool.accelerator_types.all(a, a.vendor == "amd"))?',
            id="no-top-level-accelerator",
        ),
        pytest.param(
            "pool.accelerator_types.exists(a, a.memory > 80.0)",
            "a has no field 'memory'; did you mean 'memory_gib'?",
            id="element-field",
        ),
        pytest.param(
            'job.accelerator.memory_gib > "80"',
            "type error at column 28: '>' cannot compare double with string; write 80 without "
            "quotes for a number",
            id="memory-is-a-number",
        ),
    ],
)
def test_unknown_accelerator_fields_are_rejected(source, message):
    with pytest.raises(ExpressionError) as caught:
        compile_checked(source, ("job", "pool", "mesh", "now"))
    assert str(caught.value) == message


MESH_YAML = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {name: m}
spec:
  pools:
    - name: onprem
      provider: local
      nodes:
        - {name: h, count: 2, gpus: 8, cpus: 64, memory_gib: 1TiB,
           accelerator: {model: H100, memory_gib: 80}}
        - {name: h2, gpus: 8, cpus: 64, memory_gib: 1TiB,
           accelerator: {vendor: nvidia, model: H100, memory_gib: 80}}
        - {name: m, gpus: 8, cpus: 64, memory_gib: 1TiB,
           accelerator: {vendor: amd, model: MI300X, memory_gib: 192}}
        - {name: c, cpus: 8, memory_gib: 32GiB}
    - name: tpus
      provider: local
      nodes:
        - {name: t, gpus: 4, cpus: 8, memory_gib: 64GiB,
           accelerator: {vendor: google, model: v5e, memory_gib: 16}}
    - name: aws-burst
      provider: aws
      region: us-east-1
      node_types: [{name: g.small, max_nodes: 2}, {name: g.big, max_nodes: 1},
                   {name: not-in-the-catalog, max_nodes: 1}]
      max_nodes: 3
"""
CATALOG = """\
apiVersion: meshctl/v1
kind: Catalog
metadata: {name: aws}
spec:
  provider: aws
  as_of: 2026-01-01
  source: a test
  instance_types:
    - {name: g.small, family: g, vcpus: 4, memory_gib: 16, nic_gbps: 10,
       accelerator: {vendor: nvidia, model: L4, count: 1, memory_gib: 24}}
    - {name: g.big, family: g, vcpus: 192, memory_gib: 2048, nic_gbps: 3200,
       accelerator: {vendor: nvidia, model: H200, count: 8, memory_gib: 141}}
"""


def _document(text: str, kind: type):
    (loaded,) = load_text(textwrap.dedent(text))
    assert isinstance(loaded.document, kind)
    return loaded.document


def test_facts_gather_each_pools_kinds_from_node_groups_and_the_catalog():
    mesh = _document(MESH_YAML, Mesh)
    facts = mesh_snapshot(mesh, {"aws": _document(CATALOG, Catalog)})
    got = {p.name: (p.vendors, p.accelerators, p.accelerator_types) for p in facts.pools}
    assert got == {
        # two groups of one kind (nvidia is the default vendor) give it once; the CPU group none
        "onprem": (("amd", "nvidia"), ("H100", "MI300X"), (MI300X, H100)),
        "tpus": (("google",), ("v5e",), (V5E,)),
        # a node type the catalog lacks adds nothing, as it adds no GPUs
        "aws-burst": (
            ("nvidia",),
            ("H200", "L4"),
            (AcceleratorType("nvidia", "H200", 141.0), AcceleratorType("nvidia", "L4", 24.0)),
        ),
    }
    assert pool_map(facts.pools[0])["accelerator_types"] == [
        {"vendor": "amd", "model": "MI300X", "memory_gib": 192.0},
        {"vendor": "nvidia", "model": "H100", "memory_gib": 80.0},
    ]
    # the controller's and the simulator's observed pools keep what the mesh says
    seen = observed(facts, {"onprem": 3.0}, {"onprem": 24}, 0, {}, {}, {})
    assert [p.accelerator_types for p in seen.pools] == [p.accelerator_types for p in facts.pools]


def test_the_job_map_says_what_the_job_asks():
    asks = {"gpus": 1, "gpu_memory_gib": "96GiB", "accelerator": {"vendor": "amd",
            "any_of": ["MI300X"]}}  # fmt: skip
    assert job_map(job(resources=asks), "")["accelerator"] == {
        "vendor": "amd",
        "models": ["MI300X"],
        "memory_gib": 96.0,
    }
    assert job_map(job(), "")["accelerator"] == {"vendor": "", "models": [], "memory_gib": 0.0}


def test_a_job_naming_its_models_is_judged_by_those_kinds_alone():
    # the mixed pool's A100 has 40 GiB, but a job that takes only H100s never lands on one
    spec = """\
pools:
  - name: named-models-on-big-gpus
    when: job.accelerator.models.size() > 0
    allow: >-
      pool.accelerator_types.filter(a, a.model in job.accelerator.models)
        .all(a, a.memory_gib >= 80.0)
"""
    h100 = job(resources={"gpus": 1, "accelerator": {"any_of": ["H100"]}})
    either = job(resources={"gpus": 1, "accelerator": {"any_of": ["A100", "H100"]}})
    policies = compiled(spec)
    # amd, tpu and cpu carry no H100: the filter leaves none, and `all` of none is true
    assert verdict(policies, h100, MESH).eligible_pools == ("nvidia", "amd", "mixed", "tpu", "cpu")
    assert verdict(policies, either, MESH).eligible_pools == ("nvidia", "amd", "tpu", "cpu")
