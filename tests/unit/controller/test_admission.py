"""What submit refuses and how it says so: impossible on this mesh, or inadmissible under the
current policies (a policy change would admit it). Real policies, the shipped embedded mesh."""

from __future__ import annotations

import pytest

from meshctl.catalog import load_catalogs
from meshctl.controller.submit import Rejected, check
from meshctl.files import load_one
from meshctl.model import Mesh
from meshctl.pools.observed import PoolObservation
from tests.builders import mesh, observed_node, observed_pool, ray_pool
from tests.conftest import EXAMPLES
from tests.unit.scheduler.policy_helpers import NOW, job, policies

pytestmark = pytest.mark.unit

MESH = load_one(EXAMPLES / "mesh.yaml", Mesh)
CATALOGS = {found.provider: found.catalog for found in load_catalogs()}
RULES = policies(
    """
    priority_classes: [{name: batch, value: 100}, {name: production, value: 1000}]
    teams: [{name: default}, {name: secret, description: may use no pool}]
    quotas:
      - {team: vision, cohort: research, gpus: 4, borrowing_limit_gpus: 2}
      - {team: llm, cohort: research, gpus: 4}
      - {team: search, gpus: 1}
    pools:
      - {name: secret-only, when: 'job.team == "secret"', allow: 'pool.name == "nowhere"'}
    """
)

REFUSED = [
    pytest.param(
        job("j", resources={"gpus": 1}, priority_class="nope"),
        "job j is inadmissible under the current policies: priority class 'nope' is not "
        "defined (defined: batch, production)",
        id="an undefined priority class",
    ),
    pytest.param(
        job("j", resources={"gpus": 1}, priority_class="batchh"),
        "job j is inadmissible under the current policies: priority class 'batchh' is not "
        "defined (defined: batch, production); did you mean 'batch'?",
        id="a misspelt priority class",
    ),
    pytest.param(
        job("j", team="serch", resources={"gpus": 3}),
        "job j is inadmissible under the current policies: team 'serch' is not declared by "
        "the policies (teams: default, llm, search, secret, vision); did you mean 'search'?",
        id="a misspelt team: reported, it got around team search's quota of 1 GPU",
    ),
    pytest.param(
        job("j", team="search", resources={"gpus": 2}),
        "job j is inadmissible under the current policies: team search's quota is 1 GPU, "
        "the job needs 2",
        id="over a quota with nothing to borrow",
    ),
    pytest.param(
        job("j", team="vision", resources={"gpus": 4, "nodes": 2}),
        "job j is inadmissible under the current policies: team vision's quota is 4 GPUs "
        "(6 with what it may borrow), the job needs 8",
        id="over a quota and all it may borrow",
    ),
    pytest.param(
        job("j", team="secret", resources={"gpus": 1}),
        "job j is inadmissible under the current policies: every pool is denied to it: "
        "not selected by the allow rules that apply (secret-only)",
        id="no pool allowed",
    ),
    pytest.param(
        job("j", resources={"gpus": 16}),
        "job j can never run on this mesh: needs 16 GPUs per node; the largest node or node "
        "type has 8",
        id="impossible on this mesh, whatever the policies",
    ),
]


@pytest.mark.parametrize(("refused", "message"), REFUSED)
def test_what_submit_refuses_says_why(refused, message: str) -> None:
    with pytest.raises(Rejected) as raised:
        check(refused, MESH, CATALOGS, RULES, NOW)
    assert str(raised.value) == message


def test_within_its_quota_by_borrowing_it_is_admitted() -> None:
    """6 GPUs: vision's 4 and the 2 it may borrow. Admitted at the default priority (no class
    named, none by default), and the scheduler's word on the idle mesh is to wait (not
    never): its nodes have less memory free than the job asks; burst could give it more."""
    admitted = check(
        job("j", team="vision", resources={"gpus": 3, "nodes": 2}), MESH, CATALOGS, RULES, NOW
    )
    decision = admitted.decision
    assert (admitted.priority, admitted.priority_class) == (0, None)
    assert (decision.status, decision.exhausted) == ("pending", "memory")


def test_a_working_directory_holding_meshctl_s_home_is_copied_without_it(tmp_path) -> None:
    from meshctl.controller.submit import package

    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "home" / "packages" / "older").mkdir(parents=True)
    (tmp_path / "home" / "state.db").write_text("x")
    copy = package(tmp_path, tmp_path / "home" / "packages" / "j-1")
    assert sorted(p.name for p in copy.iterdir()) == [".meshctl-job", "train.py"]


RAY_MESH = mesh(ray_pool("lab", "http://127.0.0.1:1"))


def _lab(*alive: bool) -> dict[str, PoolObservation]:
    nodes = (
        observed_node(f"w{i}", ray_node_id=f"id{i}", alive=up, gpus=1, memory_gib=4.0, labels={})
        for i, up in enumerate(alive)
    )
    return {"lab": observed_pool("lab", *nodes)}


@pytest.mark.parametrize(
    ("alive", "never"),
    [((True, True), False), ((True, False), False), ((True,), True)],
    ids=[
        "both nodes up: placed",
        "one of its two known nodes not up now (joining, restarting): it waits",
        "one node ever: never",
    ],
)
def test_a_gang_on_a_pool_of_undeclared_capacity_is_judged_by_the_nodes_it_has_had(
    alive: tuple[bool, ...], never: bool
) -> None:
    """Reported: a 2-node gang submitted while one of the cluster's two nodes was joining was
    refused as one that can never run ("the pool lab has 1 such node")."""
    gang = job("g", resources={"gpus": 1, "nodes": 2})
    if never:
        with pytest.raises(Rejected, match="can never run on this mesh: needs 2 nodes"):
            check(gang, RAY_MESH, CATALOGS, None, NOW, _lab(*alive))
        return
    admitted = check(gang, RAY_MESH, CATALOGS, None, NOW, _lab(*alive))
    assert admitted.decision.status == ("placed" if all(alive) else "pending")
