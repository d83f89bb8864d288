"""The chaos benchmark's user (``chaos.py`` has the command): submits jobs to the API server
over HTTP as a patient client would. A 502/503/504 (the store away, the server restarting)
or a dropped connection is tried again; after a dropped connection the job may have been
stored before the answer was lost, so it is first looked for by its name (each name is used
once here), and sent again only when it is not there."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

PATIENCE_S = 300.0  # a fault's outage is a minute at most; past this the benchmark stops
RETRY_S = 0.5


@dataclass(frozen=True)
class Submitted:
    id: str
    name: str
    first_try_s: float  # when the client first sent it (time.time())
    tries: int
    acked_s: float  # when the API server acknowledged it (or it was found)


class Client:
    def __init__(self, port: int, token: str) -> None:
        self.port, self.token = port, token
        self.answers: Counter[str] = Counter()  # each try of a submission: HTTP status, or why none
        self._lock = threading.Lock()

    def _count(self, answer: str) -> None:
        with self._lock:
            self.answers[answer] += 1

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            headers = {"Authorization": f"Bearer {self.token}",
                       "Content-Type": "application/json"}  # fmt: skip
            conn.request(method, path, None if body is None else json.dumps(body), headers)
            answer = conn.getresponse()
            return answer.status, json.loads(answer.read() or b"null")
        finally:
            conn.close()

    def submit(self, job: dict[str, Any]) -> Submitted:
        name = job["metadata"]["name"]
        first, tries = time.time(), 0
        while time.time() - first < PATIENCE_S:
            tries += 1
            try:
                status, said = self.request("POST", "/v1/jobs", {"job": job})
            except (OSError, http.client.HTTPException) as err:
                self._count(type(err).__name__)
                found = self._find(name)
                if found is not None:
                    return Submitted(found, name, first, tries, time.time())
                time.sleep(RETRY_S)
                continue
            self._count(str(status))
            if status == 201:
                return Submitted(said["id"], name, first, tries, time.time())
            if status not in (500, 502, 503, 504):  # a 500 is tried again: counted, and told
                raise SystemExit(f"chaos.py: submitting {name}: HTTP {status}: {said}")
            time.sleep(RETRY_S)
        raise SystemExit(f"chaos.py: submitting {name}: no answer for {PATIENCE_S:g} s")

    def _find(self, name: str) -> str | None:
        """The id of the job of that name, or None (also when the server cannot say now)."""
        try:
            status, rows = self.request("GET", "/v1/jobs")
        except (OSError, http.client.HTTPException):
            return None
        if status != 200:
            return None
        return next((str(r["id"]) for r in rows if r["name"] == name), None)

    def ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if self.request("GET", "/healthz")[0] == 200:
                    return
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.2)
        raise SystemExit("chaos.py: the API server did not answer")
