"""How a multi-node job's placement over the network slows it down: a first-order model.

The nodes carry two topology labels (see the mesh file): ``rack`` (the leaf switch the node
hangs off) and ``switch`` (the block above it: a fat-tree pod, or a Dragonfly+ group).

- **fat-tree** (Al-Fares et al., SIGCOMM 2008; Leiserson 1985): leaves connect to spines
  through uplinks that may be oversubscribed ``o:1``. Traffic between nodes under one leaf
  runs at full rate; traffic that leaves a leaf shares its uplinks and gets ``1/o`` of the
  rate. Above the leaves the fabric is taken as non-blocking.
- **dragonfly+** (Shpiner et al., HiPINEB 2017): each group is a two-level fat-tree of leaf
  and spine switches, non-blocking inside; groups connect spine-to-spine by global links
  tapered ``o:1``. Traffic inside a group runs at full rate; traffic between groups gets
  ``1/o``.

A data-parallel job spends ``comm_fraction`` of a step communicating (all-reduce) when all
its links run at full rate. A ring all-reduce runs at the pace of its slowest hop, so the
communication part runs ``o`` times slower as soon as any of the job's traffic crosses a
slow boundary, weighted by the share of its node pairs that cross it (a ring over a
placement packed per domain crosses as often as the pairs do, to first order):

    slowdown = 1 + comm_fraction * crossing * (o - 1)
    crossing = 1 - sum_d (n_d / n)^2       (n_d: the job's nodes in domain d)

``crossing`` is 0 for a job inside one domain and approaches 1 as it spreads evenly over many.
Single-node jobs are never slowed. The model ignores congestion from other jobs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

Topology = Literal["fat-tree", "dragonfly+"]


@dataclass(frozen=True, slots=True)
class Network:
    topology: Topology = "fat-tree"
    oversubscription: float = 1.0  # fat-tree: leaf uplinks; dragonfly+: global links
    comm_fraction: float = 0.3  # of a step, for a job whose links all run at full rate

    @property
    def domain_label(self) -> str:
        """The label whose boundary is slow."""
        return "rack" if self.topology == "fat-tree" else "switch"


def crossing(domains: Sequence[str]) -> float:
    """The share of node pairs (with replacement) in different domains."""
    n = len(domains)
    if n <= 1:
        return 0.0
    return 1.0 - sum((c / n) ** 2 for c in Counter(domains).values())


def slowdown(network: Network | None, labels: Sequence[Mapping[str, str]]) -> float:
    """Wall time over work time for a job on nodes with these labels (1.0: no slowdown)."""
    if network is None or len(labels) <= 1 or network.oversubscription <= 1.0:
        return 1.0
    key = network.domain_label
    share = crossing([node.get(key, f"?{i}") for i, node in enumerate(labels)])
    return 1.0 + network.comm_fraction * share * (network.oversubscription - 1.0)
