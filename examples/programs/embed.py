"""Batch embedding job ("workers" mode): a Ray Tasks fan-out over 8 chunks.

meshctl submits this with an entrypoint that holds no resources; the script
places its own tasks, in the placement group bundle that meshctl has Ray hold on
the node it chose (meshctl.workload.bundle). Each item gets a deterministic "embedding" (hash-seeded
token vectors, mean-pooled) so the final checksum is reproducible run to run.

    python embed.py --shard 0 --items 2000
"""

import argparse
import hashlib
import os
import random
import time

import ray

from meshctl.workload import bundle

DIM, TOKENS, CHUNKS = 32, 4, 8
# What meshctl pins work by: a Ray label (Ray's own ray.io/node-id) and its value on each of
# the job's nodes, in the order of MESHCTL_NODES (their names)
LABEL = os.environ.get("MESHCTL_NODE_LABEL") or "ray.io/node-id"
PINS = [v for v in os.environ.get("MESHCTL_NODE_IDS", "").split(",") if v]
NAMES = dict(zip(PINS, os.environ.get("MESHCTL_NODES", "").split(","), strict=False))


@ray.remote
def embed_chunk(shard, chunk, start, stop):
    digest = hashlib.sha256()
    for item in range(start, stop):
        seed = hashlib.sha256(f"{shard}:{item}".encode()).digest()[:8]
        rng = random.Random(int.from_bytes(seed, "big"))
        tokens = [[rng.uniform(-1.0, 1.0) for _ in range(DIM)] for _ in range(TOKENS)]
        pooled = [sum(col) / TOKENS for col in zip(*tokens, strict=True)]
        digest.update(",".join(f"{x:.6f}" for x in pooled).encode())
    ctx = ray.get_runtime_context()
    return {
        "chunk": chunk,
        "items": stop - start,
        "checksum": digest.hexdigest(),
        "node": NAMES.get(ctx.get_node_labels().get(LABEL, ""), ctx.get_node_id()[:8]),
        "gpus": ray.get_gpu_ids(),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shard", type=int, default=0)
    parser.add_argument("--items", type=int, default=2000)
    args = parser.parse_args()

    nodes = PINS
    gpus_per_node = float(os.environ.get("MESHCTL_GPUS_PER_NODE") or 0)
    print(
        f"embed: job={os.environ.get('MESHCTL_JOB_ID', 'local')} "
        f"attempt={os.environ.get('MESHCTL_ATTEMPT', '0')} shard={args.shard} "
        f"items={args.items} nodes={list(NAMES.values()) or 'any'} gpus/node={gpus_per_node}",
        flush=True,
    )

    t0 = time.time()
    ray.init()
    options = {"num_cpus": 0.05, "num_gpus": gpus_per_node / CHUNKS, "memory": 64 * 2**20}
    if os.environ.get("MESHCTL_PLACEMENT_GROUP"):  # what Ray holds for the job on its node
        options |= bundle(0)
    elif nodes:
        options["label_selector"] = {LABEL: nodes[0]}
    bounds = [(c * args.items // CHUNKS, (c + 1) * args.items // CHUNKS) for c in range(CHUNKS)]
    pending = [
        embed_chunk.options(**options).remote(args.shard, c, lo, hi)
        for c, (lo, hi) in enumerate(bounds)
    ]

    results, done = {}, 0
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        r = ray.get(ready[0])
        results[r["chunk"]] = r
        done += r["items"]
        print(
            f"chunk {r['chunk']}/{CHUNKS}: {r['items']} items on node={r['node']} "
            f"gpu_ids={r['gpus']} sha={r['checksum'][:12]} ({done}/{args.items})",
            flush=True,
        )

    total = hashlib.sha256("".join(results[c]["checksum"] for c in range(CHUNKS)).encode())
    print(
        f"RESULT: embedded {done} items, checksum {total.hexdigest()[:16]} "
        f"(shard {args.shard}, {CHUNKS} chunks, {time.time() - t0:.1f}s)",
        flush=True,
    )


if __name__ == "__main__":
    main()
