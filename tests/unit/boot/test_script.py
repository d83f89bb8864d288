"""The startup script meshctl renders for a cloud instance, and what it hands over to on the
instance (``meshctl.boot.join``): the script is valid bash, carries the secret's name and
never a token, and says head or worker; the join's ``ray start`` arguments and labels; the
metadata client against the emulated metadata endpoint, both flavours."""

from __future__ import annotations

import argparse
import subprocess
from dataclasses import replace

import pytest

from meshctl.boot import join
from meshctl.boot.metadata import Identity, Metadata
from meshctl.boot.script import StartupSpec, render, secret_name
from meshctl.pools.metadata_server import Entry, MetadataServer

pytestmark = pytest.mark.unit

HEAD = StartupSpec(
    provider="aws", mesh="m", pool="aws-burst", role="head", ray_version="2.60.0",
    secret=secret_name("m", "aws-burst"), node_type="g6.xlarge", where="us-east-1", gpus=1,
    accelerator="L4", gpu_memory_gib=24.0, nic_gbps=16.0, spot=True,
)  # fmt: skip
WORKER = replace(HEAD, role="worker", head_address="10.0.1.5:6379")


@pytest.mark.parametrize(
    ("spec", "has", "lacks"),
    [
        (HEAD, ["--role head", "--secret meshctl-m-aws-burst-ray-token", "--spot",
                "--gpu-memory-gib 24", "want=2.60.0"], ["--head "]),
        (WORKER, ["--role worker", "--head 10.0.1.5:6379"], ["--role head"]),
        (replace(HEAD, provider="gcp", where="my-project", spot=False, accelerator=None),
         ["--provider gcp", "--where my-project", "GCP Secret Manager"],
         ["--spot", "--accelerator"]),
    ],
    ids=["the head", "a worker joins the head's address", "a GCP on-demand CPU node"],
)  # fmt: skip
def test_the_script_says_what_it_joins_as_and_names_the_secret(
    spec: StartupSpec, has: list[str], lacks: list[str]
) -> None:
    text = render(spec)
    assert text.startswith("#!/bin/bash\n")
    for word in has:
        assert word in text
    for word in lacks:
        assert word not in text
    assert subprocess.run(["bash", "-n"], input=text, text=True, check=False).returncode == 0


def test_a_head_with_an_address_or_a_worker_without_one_is_refused() -> None:
    with pytest.raises(ValueError, match="a worker joins a head's address"):
        replace(HEAD, head_address="10.0.1.5:6379")
    with pytest.raises(ValueError, match="a worker joins a head's address"):
        replace(HEAD, role="worker")


def test_odd_labels_are_quoted_for_the_shell() -> None:
    text = render(replace(HEAD, labels=(("team", "a b;rm -rf /"),)))
    assert "--label 'team=a b;rm -rf /'" in text
    assert subprocess.run(["bash", "-n"], input=text, text=True, check=False).returncode == 0


ME = Identity("i-0abc", "us-east-1a", "us-east-1", "10.0.1.7")


def args(*extra: str) -> argparse.Namespace:
    base = ["--provider", "aws", "--mesh", "m", "--pool", "p", "--secret", "s", "--where",
            "us-east-1", "--node-type", "g6.xlarge", "--gpus", "1", "--accelerator", "L4",
            "--gpu-memory-gib", "24"]  # fmt: skip
    return join.parse([*base, *extra])


def test_the_head_starts_ray_on_the_fixed_ports_with_the_node_s_labels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MESHCTL_BOOT_RAY_ARGS", raising=False)
    found = join.ray_args(args("--role", "head", "--spot"), ME, 9109)
    assert found[:4] == ["--head", "--port=6379", "--dashboard-host=0.0.0.0",
                         "--dashboard-port=8265"]  # fmt: skip
    assert "--node-ip-address=10.0.1.7" in found
    assert '--resources={"accelerator_type:L4": 1, "gpu_memory_gib": 24.0}' in found
    [labels] = [a for a in found if a.startswith("--labels=")]
    assert "meshctl.io/node=i-0abc" in labels
    assert "meshctl.io/agent-host=10.0.1.7" in labels
    assert "meshctl.io/agent-port=9109" in labels
    assert "meshctl.io/spot=true" in labels
    assert found[-1] == "--block"


def test_a_worker_joins_its_head_and_the_machine_s_own_arguments_come_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MESHCTL_BOOT_RAY_ARGS", "--num-cpus=1 --port=7000")
    found = join.ray_args(args("--role", "worker", "--head", "10.0.1.5:6379"), ME, 9109)
    assert found[0] == "--address=10.0.1.5:6379"
    assert found[-2:] == ["--num-cpus=1", "--port=7000"]


def test_a_worker_without_a_head_is_a_usage_error() -> None:
    with pytest.raises(SystemExit):
        args("--role", "worker")


@pytest.mark.parametrize(
    ("provider", "entry", "expected"),
    [
        ("aws", Entry("aws", "i-0abc", "us-east-1a", "us-east-1", "127.0.0.1"),
         Identity("i-0abc", "us-east-1a", "us-east-1", "127.0.0.1")),
        ("gcp", Entry("gcp", "us-central1-a/meshctl-x", "us-central1-a", "proj", "127.0.0.1"),
         Identity("us-central1-a/meshctl-x", "us-central1-a", "us-central1", "127.0.0.1",
                  "proj")),
    ],
    ids=["AWS IMDSv2", "GCE"],
)  # fmt: skip
def test_an_instance_reads_who_it_is_from_its_metadata_endpoint(
    provider: str, entry: Entry, expected: Identity
) -> None:
    server = MetadataServer()
    try:
        url = server.url("key", entry)
        assert Metadata(provider, url).identity() == expected  # type: ignore[arg-type]
    finally:
        server.close()


def test_the_metadata_endpoint_wants_its_flavour_s_header() -> None:
    server = MetadataServer()
    server.entries["a"] = Entry("aws", "i-1", "us-east-1a", "us-east-1", "127.0.0.1")
    server.entries["g"] = Entry("gcp", "z/n", "z", "p", "127.0.0.1")
    assert server.answer("GET", "/a/latest/meta-data/instance-id", {})[0] == 401
    assert server.answer("GET", "/g/computeMetadata/v1/instance/name", {})[0] == 403
    assert server.answer("GET", "/nobody/latest/meta-data/instance-id", {})[0] == 404
