"""The simulated clouds: how cloud pools behave, the instances launched there, what they cost.

A launch asks for ``count`` instances of an offer; each joins its pool after the pool's
``provision_s`` (a node of the offer's shape, labelled with the pool's labels, priced at
what is paid for it per GPU). A spot instance lives an exponentially drawn time with the
pool's mean, is given ``notice_s`` of notice, then is taken back. Idle instances go by the
lifecycle's rule (``meshctl.lifecycle.teardown``). A launch in a pool with no live instance
starts its cluster: its head first, as the lifecycle splits launches
(``meshctl.lifecycle.clusters``); a pool's own head (``head``) is billed, joins no node and
takes no work, and goes with the last worker. Every instance is booked in the lifecycle's
ledger when it ends; budgets read this month's spend from it.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from meshctl.lifecycle.actions import Launch, Teardown
from meshctl.lifecycle.clusters import HeadOffer, parts
from meshctl.lifecycle.ledger import Charge, Ledger
from meshctl.lifecycle.snapshot import NodeShape, node_of
from meshctl.lifecycle.teardown import CloudNode, idle
from meshctl.scheduler import Offer
from meshctl.sim.core.nodes import Instance, SimNode


@dataclass(frozen=True, slots=True)
class CloudPool:
    """How a cloud pool behaves in the simulation (its shapes and prices are its offers)."""

    name: str
    provision_s: float = 120.0  # launch -> the node has joined the pool
    spot_lifetime_s: float | None = 24 * 3600.0  # mean life of a spot node; None: never taken
    notice_s: float = 120.0  # warning before a spot node is taken back
    idle_s: float = 600.0  # an idle node is torn down after this long
    labels: Mapping[str, str] = field(default_factory=dict)
    head: HeadOffer | None = None  # the pool's own head; None: its first worker is


class Fleet:
    """The cloud instances of every cloud pool, live and gone."""

    def __init__(
        self, clouds: Mapping[str, CloudPool], offers: Sequence[Offer], seed: int, epoch_s: float
    ) -> None:
        self.clouds = clouds
        self.offers = {(o.pool, o.node_type): o for o in offers}
        self.rng_spot = random.Random(f"{seed}:spot")
        self.ledger = Ledger(epoch_s)
        self.instances: dict[str, Instance] = {}
        self.live: dict[str, Instance] = {}  # in launch order
        self.live_per_pool: dict[str, int] = defaultdict(int)
        self.live_type: dict[tuple[str, str], int] = defaultdict(int)
        self.launching: dict[str, int] = defaultdict(int)  # job -> its instances not yet up
        self.held_s: dict[str, float] = {}  # pool -> when a job last stopped holding a node
        self.launches = 0

    def launch(self, action: Launch, team: str, now_s: float) -> list[Instance]:
        """Instances for ``action`` (each to join after its pool's provisioning delay): the
        pool's own head first when its cluster does not run (it joins no node)."""
        running = any(i.pool == action.pool for i in self.live.values())
        head = self.clouds[action.pool].head
        made = []
        for part in parts(action, running, head):
            if part.dedicated:
                assert head is not None
                self._add(Instance(self._id(action.pool), action.pool, None, False,
                                   head.usd_per_hour, now_s, action.job_id, team))  # fmt: skip
                continue
            offer = self.offers[(action.pool, part.node_type)]
            for _ in range(part.count):
                usd = action.usd_per_hour / action.count
                instance = Instance(
                    self._id(action.pool), action.pool, offer, action.spot, usd, now_s,
                    action.job_id, team,
                )  # fmt: skip
                self._add(instance)
                self.live_per_pool[action.pool] += 1
                self.live_type[(action.pool, action.node_type)] += 1
                self.launching[action.job_id] += 1
                made.append(instance)
        return made

    def _id(self, pool: str) -> str:
        return f"{pool}-{len(self.instances):05d}"

    def _add(self, instance: Instance) -> None:
        self.instances[instance.id] = instance
        self.live[instance.id] = instance
        self.launches += 1

    def join(self, instance: Instance) -> SimNode:
        """The instance's node, as it joins its pool."""
        cloud, offer = self.clouds[instance.pool], instance.offer
        assert offer is not None  # a pool's own head joins no node
        shape = NodeShape.of_offer(offer, cloud.labels)
        usd = instance.usd_per_hour / max(offer.gpus, 1)
        node = instance.node = SimNode(node_of(instance.pool, instance.id, shape, usd), instance)
        self.launching[instance.for_job] -= 1
        return node

    def terminate(self, instance: Instance, now_s: float) -> None:
        instance.gone = True
        self.live.pop(instance.id, None)
        if instance.offer is not None:
            self.live_per_pool[instance.pool] -= 1
            self.live_type[(instance.pool, instance.offer.node_type)] -= 1
        self.ledger.close(instance.charge(now_s))

    def held(self, pool: str, stopped_s: float) -> None:
        """A job stopped holding a node of ``pool`` at ``stopped_s``."""
        self.held_s[pool] = max(self.held_s.get(pool, 0.0), stopped_s)

    def head_idle_since(self, head: Instance) -> float:
        """When a pool's own head became idle: its launch, or the end of the last job that
        held a node of its pool, whichever is later."""
        return max(head.launched_s, self.held_s.get(head.pool, 0.0))

    def head_alone(self, pool: str) -> Instance | None:
        """The pool's own head when it is all that is left of the pool (it goes by the idle
        rule)."""
        left = [i for i in self.live.values() if i.pool == pool]
        return left[0] if len(left) == 1 and left[0].offer is None else None

    def spot_life(self, instance: Instance) -> float | None:
        """How long a spot instance lives, drawn when it joins; None: it is never taken."""
        mean = self.clouds[instance.pool].spot_lifetime_s
        if not instance.spot or not mean:
            return None
        return self.rng_spot.expovariate(1.0 / mean)

    def idle(self, pool: str, now_s: float, busy: set[str]) -> list[Teardown]:
        """What of ``pool``'s live instances goes now (``busy``: nodes placed on this cycle)."""
        nodes = [self._cloud_node(i, busy) for i in self.live.values() if i.pool == pool]
        return idle(nodes, self.clouds[pool].idle_s, now_s)

    def _cloud_node(self, instance: Instance, busy: set[str]) -> CloudNode:
        node = instance.node
        if instance.offer is None:  # the pool's own head: never holds work
            return CloudNode(instance.pool, instance.id, self.head_idle_since(instance))
        if node is None or node.jobs or node.name in busy:
            return CloudNode(instance.pool, instance.id, None)
        return CloudNode(instance.pool, instance.id, max(instance.launched_s, node.idle_since))

    def charges(self) -> Iterator[Charge]:
        return (i.charge() for i in self.live.values())

    def spend(self, now_s: float) -> tuple[dict[str, float], dict[str, float]]:
        """This month's spend by pool and by team (what budgets read)."""
        spent = self.ledger.this_month(now_s, self.charges())
        return spent.by_pool, spent.by_team
