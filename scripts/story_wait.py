"""The waits of `make demo` and `make tour` (scripts/demo.sh, scripts/tour.sh), one process per
wait reading the mesh's store (``$MESHCTL_HOME``) twice a second: a `meshctl` command every
half second would cost more CPU than what it waits for, on a 2-core machine.

Each wait says at once what it waits for, then what it sees (the job's events, cloud instances
launched and joined) as it comes, a line every 5 s when nothing new comes, and how long it took.
What can no longer come (the job ended otherwise), or did not come within --timeout-s, is exit
1 with the reason on stderr: the story stops there.

    story_wait.py job JOB... --state running [--state succeeded] --what TEXT
    story_wait.py step JOB ATTEMPT STEP --what TEXT    # attempt ATTEMPT passed step STEP
    story_wait.py attempt JOB ATTEMPT --what TEXT      # attempt ATTEMPT placed (the job requeued)
    story_wait.py node POOL/NODE STATE --what TEXT
    story_wait.py event KIND --what TEXT               # the mesh recorded an event of KIND

``--follow JOB`` prints that job's events as they come (every wait prints cloud instances').
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from meshctl.app.jobdata import attempts_of, nodes_of
from meshctl.app.jobs import show
from meshctl.state import AttemptRecord, InstanceRecord, JobRecord, NodeRecord, open_store

FINISHED = ("succeeded", "failed", "cancelled")
EVERY_S = 5.0  # a line at least this often while nothing new comes


class Failed(Exception):
    """What the story waited for can no longer come."""


class Watch:
    """The store, and what was already told: news is printed once, with its time."""

    def __init__(self, home: Path, what: str, follow: list[str]) -> None:
        self.home, self.store, self.what = home, open_store(home), what
        self.follow, self.started = follow, time.monotonic()
        self.seen_events = max((e.seq for e in self.store.events(limit=None)), default=0)
        self.instances = {i.id: (i.state, i.instance_type) for i in self.store.list(InstanceRecord)}

    def elapsed(self) -> str:
        return f"{time.monotonic() - self.started:5.1f} s"

    def news(self) -> bool:
        """Print the followed jobs' new events and cloud instances' changes; whether any."""
        told = False
        for event in self.store.events(after_seq=self.seen_events):
            self.seen_events = event.seq
            if event.job_id in self.follow or event.kind.startswith(("instance.", "pool.")):
                print(f"  {self.elapsed()}  {event.kind}: {event.message[:150]}", flush=True)
                told = True
        for instance in self.store.list(InstanceRecord):
            if self.instances.get(instance.id, ("",))[0] != instance.state:
                self.instances[instance.id] = (instance.state, instance.instance_type)
                joined = {"ready": f": joined pool {instance.pool}"}.get(instance.state, "")
                line = f"{instance.id} ({instance.instance_type}) {instance.state}{joined}"
                print(f"  {self.elapsed()}  {line}", flush=True)
                told = True
        return told

    def until(
        self, check: Callable[[], str | None], status: Callable[[], str], limit_s: float
    ) -> None:
        """Until ``check`` says what came (it raises Failed when it never will)."""
        print(f"waiting for {self.what} ...", flush=True)
        last_line = time.monotonic()
        while True:
            told = self.news()  # first: what led to the end is told before it
            came = check()
            if came is not None:
                print(f"  {self.elapsed()}  {came}", flush=True)
                return
            if time.monotonic() - self.started > limit_s:
                raise Failed(f"{self.what}: not within {limit_s:g} s ({status()})")
            if told:
                last_line = time.monotonic()
            elif time.monotonic() - last_line >= EVERY_S:
                print(f"  {self.elapsed()}  still waiting: {status()}", flush=True)
                last_line = time.monotonic()
            time.sleep(0.5)


def job(watch: Watch, job_id: str) -> JobRecord:
    found = watch.store.get(JobRecord, job_id)
    if found is None:
        raise Failed(f"no job {job_id} in {watch.home}")
    return found


def wait_jobs(watch: Watch, ids: list[str], states: list[str], limit_s: float) -> None:
    def check() -> str | None:
        now = {i: str(job(watch, i).state) for i in ids}
        wrong = {i: s for i, s in now.items() if s in FINISHED and s not in states}
        if wrong:
            raise Failed(f"{watch.what}: {', '.join(f'{i} {s}' for i, s in wrong.items())}")
        if all(s in states for s in now.values()):
            return ", ".join(f"{i} {s}" for i, s in now.items())
        return None

    def status() -> str:
        states = ", ".join(f"{i} {job(watch, i).state}" for i in ids)
        joining = [
            f"{i} ({kind})" for i, (state, kind) in watch.instances.items() if state == "joining"
        ]
        return states + (f"; booting: {', '.join(joining)}" if joining else "")

    watch.until(check, status, limit_s)


def training(watch: Watch, job_id: str) -> tuple[dict[str, Any], dict[int, int]]:
    """The job as ``jobs show`` has it, and the last step each attempt reported."""
    shown = show(watch.home, watch.store, job(watch, job_id))
    attempts = (shown.get("training") or {}).get("attempts") or []
    steps = {int(a["attempt"]): a.get("last_step") for a in attempts}
    return shown, {n: int(step) for n, step in steps.items() if step is not None}


def ended(watch: Watch, shown: dict[str, Any], job_id: str) -> Failed:
    last = (shown.get("events") or [{}])[-1]
    said = f"{last.get('kind', '')}: {last.get('message', '')}"
    return Failed(f"{watch.what}: {job_id} {shown['state']} first ({said})")


def wait_step(watch: Watch, job_id: str, attempt: int, step: int, limit_s: float) -> None:
    def check() -> str | None:
        shown, steps = training(watch, job_id)
        if steps.get(attempt, -1) >= step:
            return f"attempt {attempt} of {job_id} at step {steps[attempt]}"
        if shown["state"] in FINISHED:
            raise ended(watch, shown, job_id)
        return None

    def status() -> str:
        shown, steps = training(watch, job_id)
        at = steps.get(attempt)
        where = f"attempt {attempt} at step {at}" if at is not None else "no step reported yet"
        return f"{job_id} {shown['state']}, {where}"

    watch.until(check, status, limit_s)


def wait_attempt(watch: Watch, job_id: str, attempt: int, limit_s: float) -> None:
    def latest() -> AttemptRecord | None:
        found = attempts_of(watch.store, job_id)
        return found[-1] if found else None

    def check() -> str | None:
        now = latest()
        if now is not None and now.number >= attempt:
            return f"attempt {now.number} of {job_id} on {', '.join(nodes_of(now)) or '-'}"
        if job(watch, job_id).state in FINISHED:
            raise ended(watch, show(watch.home, watch.store, job(watch, job_id)), job_id)
        return None

    def status() -> str:
        now = latest()
        return f"{job_id} {job(watch, job_id).state}, attempt {now.number if now else '-'}"

    watch.until(check, status, limit_s)


def wait_node(watch: Watch, ref: str, state: str, limit_s: float) -> None:
    def now() -> str:
        for node in watch.store.list(NodeRecord):
            if ref in (node.id, f"{node.pool}/{node.id}"):
                return str(node.state)
        raise Failed(f"no node {ref} in {watch.home}")

    watch.until(
        lambda: f"{ref} {state}" if now() == state else None, lambda: f"{ref} {now()}", limit_s
    )


def wait_event(watch: Watch, kind: str, limit_s: float) -> None:
    def check() -> str | None:
        found = [e for e in watch.store.events(limit=None) if e.kind == kind]
        return f"{kind} recorded" if found else None

    watch.until(check, lambda: f"no {kind} yet", limit_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wait", choices=["job", "step", "attempt", "node", "event"])
    parser.add_argument("args", nargs="+")
    parser.add_argument("--what", required=True, help="what the story waits for, in words")
    parser.add_argument("--state", action="append", default=[], help="job: states that end it")
    parser.add_argument(
        "--follow", action="append", default=[], help="a job: its events, as they come"
    )
    parser.add_argument("--timeout-s", type=float, default=300.0)
    args = parser.parse_args()
    home = Path(os.environ["MESHCTL_HOME"])
    watch = Watch(home, args.what, args.follow)
    try:
        if args.wait == "job":
            wait_jobs(watch, args.args, args.state or ["succeeded"], args.timeout_s)
        elif args.wait == "step":
            job_id, attempt, step = args.args
            wait_step(watch, job_id, int(attempt), int(step), args.timeout_s)
        elif args.wait == "attempt":
            wait_attempt(watch, args.args[0], int(args.args[1]), args.timeout_s)
        elif args.wait == "node":
            wait_node(watch, args.args[0], args.args[1], args.timeout_s)
        else:
            wait_event(watch, args.args[0], args.timeout_s)
    except Failed as err:
        print(f"story: {err}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
