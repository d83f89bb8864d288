"""What ``meshctl.workload.placement`` reads from the job's environment before it asks Ray for the
group: one bundle per node, each pinned to its node; a mismatch says which variable."""

from __future__ import annotations

import json

import pytest

from meshctl.workload.placement import bundles_of, describe, main

pytestmark = pytest.mark.unit

TWO = {
    "MESHCTL_BUNDLES": json.dumps([{"CPU": 0.5, "GPU": 4, "memory": 2**30, "nic_gbps": 0}] * 2),
    "MESHCTL_NODE_LABEL": "ray.io/node-id",
    "MESHCTL_NODE_IDS": "aa,bb",
}


def test_each_bundle_is_pinned_to_its_node_and_holds_no_zero() -> None:
    bundles, selectors = bundles_of(TWO)
    assert bundles == [{"CPU": 0.5, "GPU": 4.0, "memory": float(2**30)}] * 2
    assert selectors == [{"ray.io/node-id": "aa"}, {"ray.io/node-id": "bb"}]
    assert describe(bundles, selectors).startswith(
        "{CPU=0.5, GPU=4, memory=1.07374e+09} on ray.io/node-id=aa; "
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({**TWO, "MESHCTL_BUNDLES": ""}, "MESHCTL_BUNDLES: expected a JSON list"),
        ({**TWO, "MESHCTL_BUNDLES": "{}"}, "MESHCTL_BUNDLES: expected a JSON list"),
        ({**TWO, "MESHCTL_NODE_IDS": "aa"}, "MESHCTL_NODE_IDS: expected 2 node ids"),
    ],
    ids=["none", "not a list", "one node short"],
)
def test_a_bundle_list_that_does_not_match_its_nodes_is_refused(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        bundles_of(env)


def test_it_takes_exactly_one_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["python a.py", "extra"]) == 2
    assert "usage: python -m meshctl.workload.placement 'COMMAND'" in capsys.readouterr().err
