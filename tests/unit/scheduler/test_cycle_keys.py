"""What a cycle keys its caches by: requests (hashed once each, the same in every process)
and node shapes (numbered within a cycle's table). A large cycle looks these up hundreds of
thousands of times, so neither may cost a hash of a dozen fields per look-up, and neither may
ever make two different things look alike."""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshctl.scheduler.request import DataSet, Request
from meshctl.scheduler.working import NodeState, States
from tests.unit.scheduler.sched_helpers import node, req

pytestmark = pytest.mark.unit


def test_a_request_hashes_exactly_the_fields_it_compares() -> None:
    """A field added to Request and compared must be hashed too, or equal requests could land
    in different buckets of a cycle's caches."""
    r = req(gpus=4, nodes=2, topology="rack")
    compared = tuple(getattr(r, f.name) for f in dataclasses.fields(Request) if f.compare)
    assert r._compared() == compared
    assert hash(r) == hash(compared)


requests = st.builds(
    Request,
    gpus=st.sampled_from([0.5, 1.0, 4.0, 8.0]),
    gpu_memory_gib=st.sampled_from([0.0, 40.0]),
    accelerators=st.frozensets(st.sampled_from(["h100", "a100"]), max_size=2),
    vendor=st.sampled_from([None, "nvidia"]),
    cpus=st.sampled_from([1.0, 4.0]),
    memory_gib=st.sampled_from([8.0, 32.0]),
    nic_gbps=st.sampled_from([0.0, 100.0]),
    nodes=st.integers(1, 3),
    data=st.sampled_from([(), (DataSet("s3://b/x", 10.0, "aws"),)]),
)


@given(requests, requests)
def test_equal_requests_hash_alike(a: Request, b: Request) -> None:
    assert (a == b) == (a._compared() == b._compared())
    if a == b:
        assert hash(a) == hash(b)
    copied = pickle.loads(pickle.dumps(a))
    assert copied == a
    assert hash(copied) == hash(a)


def test_a_request_sent_to_another_process_hashes_as_that_process_would() -> None:
    """Strings hash differently in each process: a request unpickled elsewhere (a sweep's Ray
    task) must not carry this process's hash, or it would miss its equal in every cache."""
    r = Request(
        1.0, 0.0, frozenset({"h100"}), "nvidia", 4.0, 32.0, 0.0, accelerator_names=("H100",)
    )
    check = (
        "import pickle, sys; from meshctl.scheduler.request import Request\n"
        "r = pickle.loads(sys.stdin.buffer.read())\n"
        "fresh = Request(1.0, 0.0, frozenset({'h100'}), 'nvidia', 4.0, 32.0, 0.0)\n"
        "assert r == fresh and hash(r) == hash(fresh) and r.accelerator_names == ('H100',)\n"
        "print('same')\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    done = subprocess.run(
        [sys.executable, "-c", check], input=pickle.dumps(r), capture_output=True, env=env
    )
    assert done.stdout.strip() == b"same", done.stderr.decode()


def test_twins_share_a_shape_number_and_a_changed_node_gets_another() -> None:
    states = States({n.name: n for n in (node("a"), node("b"), node("c", gpus=4))})
    a, b, c = states["a"], states["b"], states["c"]
    assert a.shape_id() == b.shape_id() != c.shape_id()
    before = a.shape_id()
    a.allocate(req(gpus=4))
    assert a.shape_id() not in (before, b.shape_id())
    assert a.shape_id() == a.copy().shape_id()  # a copy keeps its table
    b.allocate(req(gpus=4))
    assert a.shape_id() == b.shape_id()  # twins again


def test_a_cycles_shape_numbers_never_meet_those_of_nodes_made_outside_one() -> None:
    inside = States({"a": node("a", gpus=4)})["a"]
    outside = NodeState(node("x", gpus=2))
    assert inside._shapes is not outside._shapes
