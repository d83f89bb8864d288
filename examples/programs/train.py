"""Small training job ("entrypoint" mode): logistic regression by SGD in the driver.

The Ray Jobs entrypoint itself holds the job's GPUs/CPUs, so all work happens
here. A JSON checkpoint (epoch, weights, losses) is written to
$MESHCTL_CHECKPOINT_DIR after every epoch and resumed from on the next attempt.

    python train.py --epochs 5
"""

import argparse
import json
import math
import os
import random

FEATURES, SAMPLES, BATCH = 8, 2000, 32


def make_data():
    rng = random.Random(42)
    true_w = [rng.uniform(-2, 2) for _ in range(FEATURES)]
    xs = [[rng.gauss(0, 1) for _ in range(FEATURES)] for _ in range(SAMPLES)]
    ys = [
        1.0 if sum(a * b for a, b in zip(x, true_w, strict=True)) + rng.gauss(0, 0.5) > 0 else 0.0
        for x in xs
    ]
    return xs, ys


def predict(w, x):
    z = w[-1] + sum(a * b for a, b in zip(w, x, strict=False))  # w[-1] is the bias
    return 1.0 / (1.0 + math.exp(-max(min(z, 30.0), -30.0)))


def loss(w, xs, ys):
    ps = [min(max(predict(w, x), 1e-9), 1 - 1e-9) for x in xs]
    return -sum(
        y * math.log(p) + (1 - y) * math.log(1 - p) for p, y in zip(ps, ys, strict=True)
    ) / len(xs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()
    print(
        f"train: job={os.environ.get('MESHCTL_JOB_ID', 'local')} "
        f"attempt={os.environ.get('MESHCTL_ATTEMPT', '0')} "
        f"pool={os.environ.get('MESHCTL_POOL', '-')} "
        f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}",
        flush=True,
    )

    ckpt_dir = os.environ.get("MESHCTL_CHECKPOINT_DIR")
    ckpt = os.path.join(ckpt_dir, "train-checkpoint.json") if ckpt_dir else None
    w, start, losses = [0.0] * (FEATURES + 1), 0, []
    if ckpt and os.path.exists(ckpt):
        with open(ckpt) as f:
            state = json.load(f)
        w, start, losses = state["weights"], state["epoch"], state["losses"]
        print(f"resumed from {ckpt} at epoch {start}", flush=True)

    xs, ys = make_data()
    for epoch in range(start, args.epochs):
        order = list(range(SAMPLES))
        random.Random(epoch).shuffle(order)
        for b in range(0, SAMPLES, BATCH):
            idx = order[b : b + BATCH]
            grad = [0.0] * (FEATURES + 1)
            for i in idx:
                err = predict(w, xs[i]) - ys[i]
                for j in range(FEATURES):
                    grad[j] += err * xs[i][j]
                grad[-1] += err
            w = [wj - args.lr * g / len(idx) for wj, g in zip(w, grad, strict=True)]
        losses.append(loss(w, xs, ys))
        print(f"epoch {epoch + 1}/{args.epochs}: loss {losses[-1]:.4f}", flush=True)
        if ckpt:
            os.makedirs(ckpt_dir, exist_ok=True)
            with open(ckpt + ".tmp", "w") as f:
                json.dump({"epoch": epoch + 1, "weights": w, "losses": losses}, f)
            os.replace(ckpt + ".tmp", ckpt)
            print(f"checkpoint written: {ckpt} (epoch {epoch + 1})", flush=True)

    final = losses[-1] if losses else loss(w, xs, ys)
    print(
        f"RESULT: final loss {final:.4f} after {max(args.epochs, start)} epochs "
        f"(started at epoch {start})",
        flush=True,
    )


if __name__ == "__main__":
    main()
