"""Placement with data: locality by bytes, its weight against a shorter wait, the bytes local
each candidate reports, and the egress the cost scorer adds.

Each row's comment shows the arithmetic. With the policy's default weights (packing 1, cost 1,
wait 1, locality 0.5, fragmentation 0.25: 3.75 in all) a candidate's total is the weighted
mean of its scores, so two nodes equal in every other score differ by
(wait weight x wait difference - locality weight x locality difference) / 3.75.
"""

from __future__ import annotations

import pytest
from policy_helpers import job, pending_of, view
from sched_helpers import node, pending, req, snapshot

from meshctl.model.policy import Weights
from meshctl.scheduler import Permissive, PoolInfo, schedule
from meshctl.scheduler.framework import CycleContext
from meshctl.scheduler.plan import Decision
from meshctl.scheduler.request import DataSet, Request, home_of
from meshctl.scheduler.scorers.cost import CostScorer
from meshctl.scheduler.working import NodeState

pytestmark = pytest.mark.unit

DEFAULTS = Weights()  # cost 1, wait 1, locality 0.5, topology 0.5, fragmentation 0.25
TOTAL_WEIGHT = 1 + 1 + 1 + 0.5 + 0.25  # packing, cost, wait, locality, fragmentation


def decide(nodes, job_pending, policy=None, **kw) -> Decision:
    plan = schedule(snapshot(nodes, [job_pending], **kw), policy or Permissive(weights=DEFAULTS))
    return plan.decisions[job_pending.job_id]


def scores(decision: Decision) -> dict[str, dict[str, float]]:
    return {c.nodes[0]: dict(c.scores) for c in decision.candidates}


# --- locality by bytes --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "a_holds", "b_holds", "winner", "a_score", "b_score"),
    [
        pytest.param(  # a: 1 of 10 GiB = 0.1; b: 9 of 10 = 0.9 (by count both 0.5: a tie)
            [("/data/vocab", 1.0), ("/data/corpus", 9.0)],
            {"/data/vocab"}, {"/data/corpus"}, "b", 0.1, 0.9,
            id="more-bytes-win",
        ),
        pytest.param(  # /u weighs the mean of 1 and 9, 5: a 5 of 15, b 1 of 15
            [("/v", 1.0), ("/c", 9.0), ("/u", None)],
            {"/u"}, {"/v"}, "a", 5 / 15, 1 / 15,
            id="unsized-weighs-the-mean-of-the-sized",
        ),
        pytest.param(  # none sized: 1 each; a 1 of 2, b 2 of 2
            [("/v", None), ("/c", None)],
            {"/v"}, {"/v", "/c"}, "b", 0.5, 1.0,
            id="none-sized-counts-data-sets",
        ),
        pytest.param(  # 5 of 10 each: a true tie, broken by name
            [("/v", 5.0), ("/c", 5.0)],
            {"/v"}, {"/c"}, "a", 0.5, 0.5,
            id="equal-bytes-tie-by-name",
        ),
    ],
)  # fmt: skip
def test_locality_breaks_a_tie_by_the_bytes_a_node_holds(
    data, a_holds, b_holds, winner, a_score, b_score
):
    nodes = [node("a", datasets=frozenset(a_holds)), node("b", datasets=frozenset(b_holds))]
    decision = decide(nodes, pending("j", 1, data=data))
    assert decision.candidates[0].nodes == (winner,)
    got = scores(decision)
    assert (got["a"]["locality"], got["b"]["locality"]) == pytest.approx((a_score, b_score))
    assert got["a"]["wait"] == got["b"]["wait"]
    assert got["a"]["cost"] == got["b"]["cost"]


# --- locality against a shorter wait ------------------------------------------------------------


@pytest.mark.parametrize(
    ("wait_s", "locality", "winner", "free_minus_holder"),
    [
        pytest.param(  # holder's wait 1/(1 + 300/600) = 2/3: 1 x 1/3 < 0.5 x 1
            300.0, 0.5, "holder", (1 * (1 - 2 / 3) - 0.5 * 1) / TOTAL_WEIGHT,
            id="short-wait-the-data-wins",
        ),
        pytest.param(  # 1/(1 + 1800/600) = 1/4: 1 x 3/4 > 0.5 x 1
            1800.0, 0.5, "free", (1 * (1 - 1 / 4) - 0.5 * 1) / TOTAL_WEIGHT,
            id="long-wait-the-free-node-wins",
        ),
        pytest.param(  # locality weighs 2: 1 x 3/4 < 2 x 1 (total weight 5.25)
            1800.0, 2.0, "holder", (1 * (1 - 1 / 4) - 2 * 1) / (TOTAL_WEIGHT + 1.5),
            id="a-heavier-locality-weight-outweighs-it",
        ),
    ],
)  # fmt: skip
def test_locality_outweighs_a_wait_only_as_far_as_its_weight(
    wait_s, locality, winner, free_minus_holder
):
    nodes = [node("free", pool="near"), node("holder", pool="far", datasets=frozenset({"/d"}))]
    pools = (PoolInfo("near", False, 0.0), PoolInfo("far", False, wait_s))
    policy = Permissive(weights=DEFAULTS.model_copy(update={"locality": locality}))
    decision = decide(nodes, pending("j", 1, data=[("/d", 100.0)]), policy, pools=pools)
    assert decision.candidates[0].nodes == (winner,)
    total = {c.nodes[0]: c.total for c in decision.candidates}
    assert total["free"] - total["holder"] == pytest.approx(free_minus_holder)


# --- bytes local in the explanation -------------------------------------------------------------

DATA = [("/c", 1.5), ("/v", 0.5), ("/u", None)]  # 2.0 GiB sized; /u is not counted in GiB


@pytest.mark.parametrize(
    ("nodes", "request_", "expected"),
    [
        pytest.param(  # a: /c (1.5 GiB) and /u (no size); b: /v (0.5 GiB)
            [node("a", datasets=frozenset({"/c", "/u"})), node("b", datasets=frozenset({"/v"}))],
            req(1, data=DATA),
            {("a",): (1.5, 2.0), ("b",): (0.5, 2.0)},
            id="each-node",
        ),
        pytest.param(  # a gang: the node holding least, a's 1.5 (b holds 2.0)
            [node("a", datasets=frozenset({"/c"})), node("b", datasets=frozenset({"/c", "/v"}))],
            req(8, 2, data=DATA),
            {("a", "b"): (1.5, 2.0)},
            id="gang-least-of-its-nodes",
        ),
        pytest.param(
            [node("a"), node("b", gpus=4)],  # not twins: both scored
            req(1), {("a",): (None, None), ("b",): (None, None)},
            id="no-data-sets",
        ),
    ],
)  # fmt: skip
def test_candidates_report_the_bytes_local_on_their_nodes(nodes, request_, expected):
    decision = decide(nodes, pending("j", request=request_))
    got = {tuple(sorted(c.nodes)): (c.data_local_gib, c.data_gib) for c in decision.candidates}
    assert got == expected
    shown = decision.explanation()["candidates"]
    assert {
        tuple(sorted(c["nodes"])): (c["data_local_gib"], c["data_gib"]) for c in shown
    } == expected


# --- egress in the cost scorer ------------------------------------------------------------------

S3, GS = "s3://corpus/web", "gs://corpus/web"
# pool -> data set home -> USD a GiB (the home side's list price: AWS 0.09, GCP 0.12)
EGRESS = {"gcp-pool": {"aws": 0.09}, "aws-pool": {"gcp": 0.12}}
MAX_USD = 20.0  # the dearest node's USD per GPU-hour


@pytest.mark.parametrize(
    ("pool", "request_", "runtime_s", "held", "score"),
    [
        pytest.param(  # 100 GiB x 0.09 / (1 GPU x 1 h, the default) = 9: 1 - (3 + 9) / 20
            "gcp-pool", req(1, data=[(S3, 100.0)]), None, set(), 1 - (3 + 100 * 0.09 / 1) / 20,
            id="s3-data-to-a-gcp-node-over-one-hour",
        ),
        pytest.param(  # 9 / (8 GPUs x 10 h) = 0.1125: 1 - 3.1125 / 20
            "gcp-pool", req(8, data=[(S3, 100.0)]), 36_000.0, set(), 1 - (3 + 9 / 80) / 20,
            id="spread-over-the-jobs-gpu-hours",
        ),
        pytest.param(  # a gang of 2 x 4 GPUs, 1 h: 9 / 8 = 1.125
            "gcp-pool", req(4, 2, data=[(S3, 100.0)]), 3600.0, set(), 1 - (3 + 9 / 8) / 20,
            id="a-gang-spreads-it-over-all-its-gpus",
        ),
        pytest.param(  # 100 GiB x 0.12 (GCP's price: the source pays) = 12: 1 - 15 / 20
            "aws-pool", req(1, data=[(GS, 100.0)]), None, set(), 1 - (3 + 12) / 20,
            id="gs-data-to-an-aws-node-at-gcps-price",
        ),
        pytest.param(  # its own provider's data: 1 - 3 / 20
            "aws-pool", req(1, data=[(S3, 100.0)]), None, set(), 1 - 3 / 20,
            id="no-egress-within-the-home-provider",
        ),
        pytest.param(  # the node holds it whole: nothing moves
            "gcp-pool", req(1, data=[(S3, 100.0)]), None, {S3}, 1 - 3 / 20,
            id="no-egress-for-data-the-node-holds",
        ),
        pytest.param(  # no size, no bytes known: nothing added
            "gcp-pool", req(1, data=[(S3, None)]), None, set(), 1 - 3 / 20,
            id="unsized-data-adds-nothing",
        ),
        pytest.param(  # 1000 x 0.09 = 90: 3 + 90 is past the dearest 20: 0, not below
            "gcp-pool", req(1, data=[(S3, 1000.0)]), None, set(), 0.0,
            id="past-the-dearest-price-scores-0",
        ),
    ],
)  # fmt: skip
def test_the_cost_scorer_adds_the_egress_of_the_data_that_would_move(
    pool, request_, runtime_s, held, score
):
    state = NodeState(node("n", pool=pool, usd=3.0, datasets=frozenset(held)))
    ctx = CycleContext(
        0.0, max_usd_per_gpu_hour=MAX_USD, egress_usd_per_gib=EGRESS, runtime_s=runtime_s
    )
    assert CostScorer()(request_, state, ctx) == pytest.approx(score)


def test_a_job_goes_where_its_data_costs_nothing_to_move_over_its_runtime():
    # Same price (3), same everything else; s3 data: the aws node pays no egress. The job's
    # declared runtime (2 h) spreads 100 x 0.09 = 9 USD over 2 GPU-hours: 4.5 a GPU-hour.
    nodes = [
        node("g", pool="gcp-pool", usd=3.0),
        node("w", pool="aws-pool", usd=3.0),
        node("dear", pool="onprem", usd=MAX_USD, memory=1),  # sets the max; too small to take it
    ]
    pools = (
        PoolInfo("gcp-pool", True, egress_usd_per_gib=EGRESS["gcp-pool"]),
        PoolInfo("aws-pool", True, egress_usd_per_gib=EGRESS["aws-pool"]),
    )
    job_pending = pending("j", 1, runtime=7200.0, data=[(S3, 100.0)])
    decision = decide(nodes, job_pending, pools=pools)
    assert decision.candidates[0].nodes == ("w",)
    got = scores(decision)
    assert got["w"]["cost"] == pytest.approx(1 - 3 / 20)
    assert got["g"]["cost"] == pytest.approx(1 - (3 + 9 / 2) / 20)


# --- residency still forbids -------------------------------------------------------------------

RESIDENCY = """\
pools:
  - name: pii-stays-onprem
    when: '"pii" in job.data.tags'
    deny: pool.cloud
    reason: personal data (pii) stays on-prem
burst:
  - {name: anywhere, when: 'true', to: pool.cloud}
"""


@pytest.mark.parametrize(
    ("tags", "winner"),
    [
        pytest.param([], "cloud-node", id="without-pii-the-node-holding-the-data-wins"),
        pytest.param(["pii"], "onprem-node", id="pii-stays-on-prem-whatever-it-costs"),
    ],
)
def test_residency_still_forbids_what_locality_and_egress_would_prefer(tags, winner):
    # The cloud node holds the s3 data whole (locality 1, no egress); the on-prem node would
    # pay 100 x 0.09 = 9 USD to fetch it. Residency's deny is a filter: no score undoes it.
    data = [{"name": "people", "location": S3, "size_gib": 100, "tags": tags}]
    pii = job("j", resources={"gpus": 1}, data=data)
    engine = view(RESIDENCY, [pii])
    nodes = [
        node("onprem-node", pool="onprem", usd=1.0),
        node("cloud-node", pool="aws", usd=1.0, datasets=frozenset({S3})),
    ]
    pools = (
        PoolInfo("onprem", False, egress_usd_per_gib={"aws": 0.09}),
        PoolInfo("aws", True, egress_usd_per_gib={}),
    )
    decision = decide(nodes, pending_of(pii, engine), engine, pools=pools)
    assert decision.status == "placed"
    assert decision.candidates[0].nodes == (winner,)


# --- the request: homes, and a cache key --------------------------------------------------------


@pytest.mark.parametrize(
    ("location", "endpoint_url", "home"),
    [
        pytest.param("s3://corpus/v3", None, "aws", id="s3"),
        pytest.param("s3://corpus/v3", "https://s3.example", "onprem", id="s3-compatible-own"),
        pytest.param("gs://corpus/v3", None, "gcp", id="gs"),
        pytest.param("/data/corpus", None, "onprem", id="a-path"),
        pytest.param("file:///data/corpus", None, "onprem", id="file"),
    ],
)
def test_a_data_sets_home_is_where_its_location_says(location, endpoint_url, home):
    assert home_of(location, endpoint_url) == home


def test_a_request_with_data_stays_a_cache_key():
    # the scheduler keys per-cycle caches by request: equal data, equal keys; sizes count
    def of(gib: float | None) -> Request:
        data = [{"name": "c", "location": S3, "size_gib": gib}, {"name": "d", "location": S3}]
        return Request.of(job("j", resources={"gpus": 1}, data=data))

    assert of(100.0) == of(100.0)
    assert hash(of(100.0)) == hash(of(100.0))
    assert of(100.0) != of(None)
    assert of(100.0).data == (DataSet(S3, 100.0, "aws"),)  # one a location: the first listed
    assert of(100.0).datasets == frozenset({S3})
