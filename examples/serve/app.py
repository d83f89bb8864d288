"""A Ray Serve application: a tiny fixed model behind HTTP, the service meshctl deploys.

The model is a 16x4 weight matrix drawn from a seeded RNG, so every replica answers the same.
``POST {"x": [16 floats]}`` returns the 4 class scores (softmax); no body scores a random
input. Each request also waits ``MESHCTL_SERVE_COST_MS`` (default 20 ms) without holding the
event loop: a stand-in for a GPU forward pass, so a replica serves many requests at once up to
its ``max_ongoing_requests``.

    serve run app:app   # or through meshctl: import_path "app:app", working_dir this folder
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random

from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse

IN, OUT = 16, 4
SEED = 7


def softmax(logits: list[float]) -> list[float]:
    top = max(logits)
    exps = [math.exp(v - top) for v in logits]
    total = sum(exps)
    return [e / total for e in exps]


@serve.deployment
class Model:
    def __init__(self) -> None:
        rng = random.Random(SEED)
        self.weights = [[rng.uniform(-1, 1) for _ in range(OUT)] for _ in range(IN)]
        self.cost_s = float(os.environ.get("MESHCTL_SERVE_COST_MS", "20")) / 1000
        self.inputs = random.Random()

    def scores(self, x: list[float]) -> list[float]:
        logits = [sum(x[i] * self.weights[i][j] for i in range(IN)) for j in range(OUT)]
        return softmax(logits)

    async def __call__(self, request: Request) -> JSONResponse:
        body = await request.body()
        x = parse(body) if body else [self.inputs.gauss(0, 1) for _ in range(IN)]
        if x is None:
            return JSONResponse({"error": f'expected {{"x": [{IN} numbers]}}'}, 400)
        await asyncio.sleep(self.cost_s)  # the forward pass a GPU would do
        scores = self.scores(x)
        return JSONResponse({"scores": scores, "class": scores.index(max(scores))})


def parse(body: bytes) -> list[float] | None:
    """The input vector of a request body, or None when it is not ``{"x": [16 numbers]}``."""
    try:
        x = json.loads(body).get("x")
        return [float(v) for v in x] if isinstance(x, list) and len(x) == IN else None
    except (ValueError, TypeError, AttributeError):
        return None


app = Model.bind()  # type: ignore[attr-defined]  # Serve's decorator is untyped
