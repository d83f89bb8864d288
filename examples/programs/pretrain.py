"""Gang pretraining job ("workers" mode): one Ray actor per node in $MESHCTL_NODES.

Each rank runs in the bundle that meshctl's placement group holds for it on its node
(meshctl.workload.bundle; pinned by a label_selector when run without one), reads its shard
of the job's dataset ``web-corpus`` (its files rank::ranks, at most --data-mib) from its
node's cache (meshctl.workload.dataset: the node's local copy, once whole), reports where
it runs, which GPUs Ray gave it and what it read, then the ranks do a fake data-parallel loop:
every rank computes a least-squares gradient on its own data shard (seeded by the bytes it
read), the driver all-reduces (averages) the gradients and broadcasts the new weights.

    python pretrain.py --steps 5
"""

import argparse
import os
import random
import time
import zlib

import ray

from meshctl.workload import bundle, dataset

DIM, SHARD = 16, 256
DATASET = "web-corpus"
# What meshctl pins work by: a Ray label (Ray's own ray.io/node-id) and its value on each of
# the job's nodes, in the order of MESHCTL_NODES (their names)
LABEL = os.environ.get("MESHCTL_NODE_LABEL") or "ray.io/node-id"
PINS = [v for v in os.environ.get("MESHCTL_NODE_IDS", "").split(",") if v]
NAMES = dict(zip(PINS, os.environ.get("MESHCTL_NODES", "").split(","), strict=False))


def read_shard(rank, ranks, cap_bytes):
    """This rank's files of its node's copy of the dataset (rank::ranks), at most
    ``cap_bytes``: (where, bytes read, their CRC-32). None when the job declares no dataset;
    bytes read None when its node holds no whole copy (this toy reads no remote source)."""
    try:
        where = dataset(DATASET, wait_s=120, node=rank)
    except KeyError:
        return None
    if "://" in where:
        return where, None, 0
    paths = sorted(os.path.join(d, f) for d, _, files in os.walk(where) for f in files)
    read, crc = 0, 0
    for path in paths[rank::ranks]:
        with open(path, "rb") as stream:
            while read < cap_bytes and (chunk := stream.read(min(1 << 22, cap_bytes - read))):
                read, crc = read + len(chunk), zlib.crc32(chunk, crc)
    return where, read, crc


@ray.remote
class Rank:
    def __init__(self, rank, ranks, cap_bytes):
        self.data = read_shard(rank, ranks, cap_bytes)
        seed = 1000 + rank if self.data is None else self.data[2]
        rng, true_w = random.Random(seed), [0.1 * (j + 1) for j in range(DIM)]
        self.xs = [[rng.gauss(0, 1) for _ in range(DIM)] for _ in range(SHARD)]
        self.ys = [sum(a * b for a, b in zip(x, true_w, strict=True)) for x in self.xs]

    def info(self):
        ctx = ray.get_runtime_context()
        return {
            "node": NAMES.get(ctx.get_node_labels().get(LABEL, ""), "-"),
            "node_id": ctx.get_node_id()[:8],
            "gpu_ids": ray.get_gpu_ids(),
            "cuda": os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"),
            "data": self.data,
        }

    def gradient(self, w):
        grad, loss = [0.0] * DIM, 0.0
        for x, y in zip(self.xs, self.ys, strict=True):
            err = sum(a * b for a, b in zip(x, w, strict=True)) - y
            loss += err * err / SHARD
            for j in range(DIM):
                grad[j] += 2 * err * x[j] / SHARD
        return grad, loss


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.2)
    parser.add_argument("--ready-timeout", type=float, default=180.0)
    parser.add_argument("--data-mib", type=float, default=64.0, help="each rank reads at most")
    args = parser.parse_args()
    nodes = PINS or [None]
    gpus = float(os.environ.get("MESHCTL_GPUS_PER_NODE") or 0)
    print(
        f"pretrain: job={os.environ.get('MESHCTL_JOB_ID', 'local')} "
        f"attempt={os.environ.get('MESHCTL_ATTEMPT', '0')} ranks={len(nodes)} gpus/rank={gpus}",
        flush=True,
    )

    t0 = time.time()
    ray.init()
    ranks = []
    for i, node in enumerate(nodes):
        opts = {"num_cpus": 0.05, "num_gpus": gpus, "memory": 64 * 2**20}
        if os.environ.get("MESHCTL_PLACEMENT_GROUP"):  # what Ray holds for rank i, on node i
            opts |= bundle(i)
        elif node:
            opts["label_selector"] = {LABEL: node}
        cap = int(args.data_mib * 2**20)
        ranks.append(Rank.options(**opts).remote(i, len(nodes), cap))
    refs = [r.info.remote() for r in ranks]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=args.ready_timeout)
    if len(ready) < len(refs):
        raise SystemExit(
            f"gang incomplete: {len(ready)}/{len(refs)} ranks started "
            f"within {args.ready_timeout}s (nodes {nodes})"
        )
    infos = ray.get(refs)
    for i, info in enumerate(infos):
        print(
            f"rank {i}: node={info['node']} node_id={info['node_id']} "
            f"gpu_ids={info['gpu_ids']} CUDA_VISIBLE_DEVICES={info['cuda']}",
            flush=True,
        )
        if info["data"] is not None:
            where, read, _ = info["data"]
            said = f"read {read / 2**20:.1f} MiB of" if read is not None else "no local copy of"
            print(f"rank {i}: {said} {DATASET} at {where}", flush=True)

    w = [0.0] * DIM
    for step in range(1, args.steps + 1):
        results = ray.get([r.gradient.remote(w) for r in ranks])
        avg = [sum(g[j] for g, _ in results) / len(results) for j in range(DIM)]  # all-reduce
        w = [wj - args.lr * gj for wj, gj in zip(w, avg, strict=True)]  # broadcast next step
        print(
            f"step {step}/{args.steps}: mean loss {sum(x for _, x in results) / len(results):.4f}",
            flush=True,
        )
    final = sum(x for _, x in ray.get([r.gradient.remote(w) for r in ranks])) / len(ranks)
    placed = ",".join(info["node"] for info in infos)
    print(
        f"RESULT: gang of {len(ranks)} ranks on {placed}, final loss {final:.4f} "
        f"after {args.steps} steps ({time.time() - t0:.1f}s)",
        flush=True,
    )


if __name__ == "__main__":
    main()
