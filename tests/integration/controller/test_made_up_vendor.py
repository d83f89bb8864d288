"""A mixed embedded mesh: NVIDIA, AMD, a TPU host and a made-up vendor, each node declaring
its devices in its vendor's Ray resource (the registry's). An accelerator added as data runs
end to end: a made-up vendor (``acme``, its GPUs counted in Ray's ``GPU``) and its model
(``X1``) are one entry each in the ``providers/accelerators.yaml`` beside the mesh file; ``up``
accepts a node of it, and a job asking for that vendor and model is placed there, runs and
succeeds. No code knows acme. A job on the TPU host holds Ray's ``TPU``, never a ``GPU``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.meshes import Mesh
from tests.unit.test_accelerators import with_acme

pytestmark = pytest.mark.integration

MESH = """\
apiVersion: meshctl/v1
kind: Mesh
metadata: {name: acme-lab}
spec:
  pools:
    - name: lab
      provider: local
      nodes:
        - {name: x, gpus: 1, cpus: 1, memory_gib: 2GiB,
           accelerator: {vendor: acme, model: X1, memory_gib: 64GiB}}
        - {name: h100, gpus: 1, cpus: 1, memory_gib: 2GiB,
           accelerator: {vendor: nvidia, model: H100, memory_gib: 80GiB}}
        - {name: mi, gpus: 1, cpus: 1, memory_gib: 2GiB,
           accelerator: {vendor: amd, model: MI300X, memory_gib: 192GiB}}
        - {name: tpu, gpus: 4, cpus: 1, memory_gib: 2GiB,
           accelerator: {vendor: google, model: TPU-v5e, memory_gib: 16GiB}}
"""
# what the job's own command sees of the cluster while its entrypoint holds what it was given
HELD = (
    "import os, ray; ray.init(); a, t = ray.available_resources(), ray.cluster_resources(); "
    "print('tpu held', t.get('TPU', 0) - a.get('TPU', 0), 'of', t.get('TPU', 0)); "
    "print('gpu held', t.get('GPU', 0) - a.get('GPU', 0)); "
    "print('cuda', os.environ.get('CUDA_VISIBLE_DEVICES', 'unset'))"
)
TPU_JOB = f"""\
apiVersion: meshctl/v1
kind: Job
metadata: {{name: on-tpu}}
spec:
  kind: batch
  entrypoint: python -c "{HELD}"
  resources: {{gpus: 4, cpus: 0.5, memory_gib: 512MiB, accelerator: {{vendor: google}}}}
"""
POLICY = """\
apiVersion: meshctl/v1
kind: Policy
metadata: {name: acme}
spec:
  priority_classes:
    - {name: standard, value: 100}
  default_priority_class: {train: standard, batch: standard, inference: standard,
                           interactive: standard}
"""
JOB = """\
apiVersion: meshctl/v1
kind: Job
metadata: {name: on-acme}
spec:
  kind: batch
  entrypoint: python -c "import os; print('ran on', os.environ['MESHCTL_NODES'])"
  resources: {gpus: 1, cpus: 0.5, memory_gib: 512MiB, accelerator: {vendor: acme, any_of: [X1]}}
"""


@pytest.fixture(scope="module")
def acme(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    base = tmp_path_factory.mktemp("acme")
    (base / "mesh.yaml").write_text(MESH)
    (base / "providers").mkdir()
    with_acme(base / "providers")
    (base / "policies").mkdir()
    (base / "policies" / "acme.yaml").write_text(POLICY)
    (base / "job.yaml").write_text(JOB)
    (base / "tpu.yaml").write_text(TPU_JOB)
    mesh = Mesh(base / "home", base)
    mesh.run("--mesh", str(base / "mesh.yaml"), "up", "--policies", str(base / "policies"))
    try:
        yield mesh
    finally:
        mesh.run("down", "--force", check=False)


def test_a_job_asking_for_the_made_up_vendor_runs_on_its_node(acme: Mesh) -> None:
    job = acme.submit("job.yaml")
    acme.wait_done(job)
    assert acme.show(job)["nodes"] == ["x"]
    assert "ran on x" in acme.run("jobs", "logs", job).stdout


def test_a_vendor_the_registry_lacks_is_refused_before_queueing(acme: Mesh) -> None:
    wrong = JOB.replace("vendor: acme", "vendor: acne")
    (acme.cwd / "wrong.yaml").write_text(wrong)
    refused = acme.run("submit", "wrong.yaml", check=False)
    assert refused.returncode == 2
    [line] = refused.stderr.strip().splitlines()
    assert line == (
        "error: wrong.yaml:7: spec.resources.accelerator.vendor: expected a"
        " vendor of the accelerator registry (nvidia, amd, google, aws, intel, acme), got 'acne'"
    )
    assert acme.run("jobs", "list", "-o", "json").stdout.count("acne") == 0


def test_each_node_declares_its_devices_in_its_vendors_resource(acme: Mesh) -> None:
    import json

    listed = json.loads(acme.run("nodes", "list", "-o", "json").stdout)
    seen = {n["node"]: (n["gpus"], n["devices"], n["accelerator"]) for n in listed}
    assert seen == {"lab/x": (1, {}, "X1"), "lab/h100": (1, {}, "H100"),
                    "lab/mi": (1, {}, "MI300X"),
                    "lab/tpu": (0, {"TPU": 4.0}, "TPU-v5e")}  # fmt: skip


def test_a_tpu_job_holds_the_hosts_chips_as_tpu_and_never_a_gpu(acme: Mesh) -> None:
    job = acme.submit("tpu.yaml")
    acme.wait_done(job)
    assert acme.show(job)["nodes"] == ["tpu"]
    logs = acme.run("jobs", "logs", job).stdout
    assert "tpu held 4.0 of 4.0" in logs, logs
    assert "gpu held 0" in logs, logs
    assert "cuda unset" in logs, logs  # Ray set no GPU for it
