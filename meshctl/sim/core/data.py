"""The simulator's data model: each job reads one dataset, which must be on every node it runs
on before it computes (the node agents' caches, ``meshctl.data``, as a model).

When an attempt starts, each of its nodes has the dataset already (a hit; still on its way for
another job: it waits for that copy), or fetches it: from another node of its pool that holds
it whole (peer bandwidth), else from central storage (its bandwidth; a node in a cloud pool
pays egress for it), as the agents do. Transfers do not contend for bandwidth. The attempt
stalls for the slowest of its nodes' fetches: GPUs held, no work done. Room in a node's cache
is made by the node agent's own rule (``meshctl.lifecycle.datacache.room``: least recently
used first, never a dataset a job on the node reads); a dataset that cannot fit is read from
its source every time. A failed or gone node loses its cache. Without a cache
(``cache=False``), every attempt reads its dataset from central storage on every node: the
baseline that caching is measured against. Pure: time is an argument.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from meshctl.lifecycle.datacache import Cached, room

GIB = 1024**3


@dataclass(frozen=True, slots=True)
class SimData:
    """A job's dataset: its key, a location (jobs that read the same data share it; its
    scheme tells its home for egress, as ``scheduler.request.home_of`` reads it), and size."""

    key: str
    size_gib: float


@dataclass(frozen=True, slots=True)
class DataModel:
    cache_gib: float = 3_000.0  # each node's cache (a few local NVMe drives)
    central_gibps: float = 1.25  # one node reading from central storage (10 Gbit/s)
    peer_gibps: float = 5.0  # one node reading from another of its pool (40 Gbit/s of NIC)
    cache: bool = True  # False: no cache, every attempt reads from central storage
    # USD a GiB read from central storage by a node of a pool (its egress; on-prem: none)
    egress_usd_per_gib: Mapping[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class DataStats:
    stall_gpu_s: float = 0.0  # GPUs held while their nodes fetched data
    central_gib: float = 0.0
    peer_gib: float = 0.0
    egress_gib: float = 0.0
    egress_usd: float = 0.0
    lookups: int = 0  # (attempt, node) pairs that needed a dataset
    hits: int = 0  # of which the node had it

    @property
    def hit_rate(self) -> float:
        return self.hits / self.lookups if self.lookups else 0.0


class NodeCaches:
    """Every node's cache, and which nodes of each pool hold each dataset."""

    def __init__(self, model: DataModel) -> None:
        self.model = model
        self.stats = DataStats()
        self.held: dict[str, dict[str, Cached]] = defaultdict(dict)  # node -> key -> entry
        self.holders: dict[tuple[str, str], set[str]] = defaultdict(set)  # (pool, key) -> nodes
        self.readers: dict[str, Counter[str]] = defaultdict(Counter)  # node -> key -> jobs
        self.ready: dict[tuple[str, str], float] = {}  # (node, key) -> when its copy is whole

    def start(
        self, data: SimData, pool: str, nodes: Sequence[str], gpus: float, now_s: float
    ) -> float:
        """An attempt of ``gpus`` in all starts on ``nodes`` of ``pool``: how long it stalls
        for its data (the slowest node's fetch); its nodes' caches take the dataset."""
        stall = max((self._bring(data, pool, node, now_s) for node in nodes), default=0.0)
        self.stats.stall_gpu_s += stall * gpus
        for node in nodes:
            self.readers[node][data.key] += 1
        return stall

    def holding(self, node: str) -> frozenset[str]:
        """The datasets in ``node``'s cache, whole or on their way: what the scheduler's
        locality scorer sees of it (the controller's nodes: their agents' reports)."""
        return frozenset(self.held.get(node, ()))

    def stop(self, data: SimData, nodes: Sequence[str]) -> None:
        """An attempt on ``nodes`` ended: they no longer read its dataset."""
        for node in nodes:
            readers = self.readers[node]
            readers[data.key] -= 1
            if readers[data.key] <= 0:
                del readers[data.key]

    def lose(self, pool: str, node: str) -> None:
        """The node failed or went: its cache is gone."""
        for key in self.held.pop(node, {}):
            self.holders[(pool, key)].discard(node)
            self.ready.pop((node, key), None)

    def _bring(self, data: SimData, pool: str, node: str, now_s: float) -> float:
        m, s = self.model, self.stats
        s.lookups += 1
        cache = self.held[node]
        entry = cache.get(data.key) if m.cache else None
        if entry is not None:  # here, or on its way here for another job
            s.hits += 1
            cache[data.key] = Cached(data.key, entry.size_bytes, now_s)
            return max(0.0, self.ready[(node, data.key)] - now_s)
        holders = self.holders.get((pool, data.key), ()) if m.cache else ()
        if any(self.ready[(n, data.key)] <= now_s for n in holders):  # a whole copy nearby
            s.peer_gib += data.size_gib
            took = data.size_gib / m.peer_gibps
        else:
            s.central_gib += data.size_gib
            price = m.egress_usd_per_gib.get(pool, 0.0)
            if price:
                s.egress_gib += data.size_gib
                s.egress_usd += data.size_gib * price
            took = data.size_gib / m.central_gibps
        if m.cache:
            self._keep(data, pool, node, now_s, now_s + took)
        return took

    def _keep(self, data: SimData, pool: str, node: str, now_s: float, ready_s: float) -> None:
        cache, reading = self.held[node], self.readers[node]
        entries = [Cached(c.key, c.size_bytes, c.last_used_s, reading[c.key] > 0)
                   for c in cache.values()]  # fmt: skip
        size = int(data.size_gib * GIB)
        going = room(entries, int(self.model.cache_gib * GIB), size)
        if going is None:
            return  # does not fit: read from its source every time
        for key in going:
            del cache[key]
            self.holders[(pool, key)].discard(node)
            self.ready.pop((node, key), None)
        cache[data.key] = Cached(data.key, size, now_s)
        self.holders[(pool, data.key)].add(node)
        self.ready[(node, data.key)] = ready_s
