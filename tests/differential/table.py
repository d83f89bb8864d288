"""The differential check's scenarios: a table of named ones, each about one part of the
lifecycle, and a generator of random ones (seeded, or driven by Hypothesis in the tests).

Times are seconds from the start; the controller cycles every 10 s. On-prem: nodes of 4 L4
GPUs, two to a rack. The aws pool launches 1-GPU g6.xlarge nodes.
"""

from __future__ import annotations

import random
from dataclasses import replace

from meshctl.lifecycle.serving import ServeSpec
from meshctl.sim.core.inference import SimServe, Surge, Traffic
from meshctl.sim.core.workload import SimJob
from tests.differential.scenario import Cloud, Scenario

PRIORITIES = """
priority_classes:
  - {name: high, value: 1000}
  - {name: low, value: 100}
default_priority_class: {train: low}
preemption:
  - name: high-over-low
    when: job.priority_class == "high"
    victims: victim.priority_class == "low"
    grace_s: 30s
"""

BURST = """
burst:
  - name: spill
    when: job.criticality != "critical" && mesh.pools["onprem"].expected_wait_s > 60.0
    to: pool.cloud
"""

BUDGET = (
    BURST
    + """
budgets:
  - name: cloud
    scope: {pool: aws}
    usd_per_month: 0.05
    soft_pct: 50
"""
)

BURST_AND_PRIORITIES = PRIORITIES + BURST


def job(
    job_id: str,
    arrival: float,
    duration: float,
    gpus: float = 1,
    nodes: int = 1,
    name: str | None = None,
    **kw: object,
) -> SimJob:
    """A train job of team t (the differential jobs all record checkpoints)."""
    criticality = str(kw.pop("criticality", "standard"))
    return SimJob(
        job_id,
        arrival,
        duration,
        gpus,
        nodes,
        "train",
        criticality,
        "t",
        name=name or job_id,
        **kw,  # type: ignore[arg-type]
    )


def service(
    job_id: str,
    arrival: float,
    rps: float,
    surges: tuple[tuple[float, float, float], ...] = (),
    least: int = 1,
    most: int = 3,
    gpus: float = 4,
    downscale_s: float = 120.0,
) -> SimJob:
    """A service of team t at priority high: one request a second in flight is one replica
    (1 s a request, a target of 1); flat traffic of ``rps`` times each surge's factor during
    it ((start, seconds, factor)); out after 30 s above, in after ``downscale_s`` below."""
    spec = ServeSpec(least, most, 1.0, 30.0, downscale_s)
    traffic = Traffic(rps, trough=1.0, surges=tuple(Surge(*x) for x in surges))
    return SimJob(
        job_id, arrival, 0.0, gpus, 1, "inference", "standard", "t", name=job_id,
        priority_class="high", serve=SimServe(spec, 1.0, traffic),
    )  # fmt: skip


# an elastic job on three nodes lends one to a high-priority job that comes and goes
LOAN = (
    job("e", 0, 3000, 4, nodes=3, elastic_min=1),
    job("hi", 100, 200, 4, priority_class="high"),
)

# two teams of one cohort, 4 GPUs each: the borrower fills both nodes while the lender is
# idle; the lender comes back and reclaims (``reclaim`` says from whom: any, lower-priority)
RECLAIM = """
priority_classes:
  - {name: high, value: 1000}
  - {name: low, value: 100}
default_priority_class: {train: low}
quotas:
  - {team: lender, cohort: lab, gpus: 4, reclaim: %s}
  - {team: borrower, cohort: lab, gpus: 4}
reclaim: {grace_s: 30s, min_runtime_s: 60s}
"""
BORROWED = tuple(
    replace(job(f"b{i}", 0, 3000, 1, priority_class="high"), team="borrower") for i in range(8)
)
COMES_BACK = (replace(job("l", 500, 200, 2), team="lender"),)

TABLE: tuple[Scenario, ...] = (
    Scenario("fifo", (job("a", 0, 100, 4), job("b", 0, 50, 4), job("c", 10, 30, 4))),
    Scenario(
        "fractions-pack-one-gpu",
        (job("a", 0, 200, 0.5), job("b", 5, 100, 0.5), job("c", 5, 100, 0.25)),
        nodes=1,
        gpus=1,
    ),
    Scenario(
        "a-gang-waits-for-two-nodes-a-small-job-runs",
        (job("a", 0, 300, 4), job("g", 5, 100, 4, nodes=2), job("s", 10, 50, 2)),
    ),
    Scenario(
        "backfill-reserves-nodes-for-the-gang",
        (
            job("a", 0, 300, 4, max_runtime_s=300),
            job("b", 0, 600, 2, max_runtime_s=600),
            job("g", 10, 200, 4, nodes=2, max_runtime_s=300),
            job("short", 20, 100, 2, max_runtime_s=200),  # ends before a: backfilled
            job("long", 30, 1000, 2, max_runtime_s=1000),  # would delay g: waits
        ),
    ),
    Scenario(
        "estimates-from-the-teams-last-runs-let-backfill-form",
        (
            job("e1", 0, 200, 4, name="etl"),
            job("e2", 0, 200, 4, name="etl"),
            job("e3", 300, 400, 4, name="etl"),  # estimated 200 s from e1 and e2
            job("w", 310, 300, 2),
            job("g", 320, 100, 4, nodes=2),
            job("q", 330, 50, 2, name="quick", max_runtime_s=100),
        ),
    ),
    Scenario(
        "a-node-failure-requeues-and-resumes-from-the-checkpoint",
        (job("a", 0, 500, 4), job("b", 0, 300, 4)),
        failures=((250.0, "n1", 400.0),),
    ),
    Scenario(
        # its driver lives on the pool's head: n3 is free and stands in for n1 inside the
        # attempt, from the checkpoint at 200 (no requeue, no new attempt)
        "a-dead-node-is-replaced-inside-the-attempt-by-a-free-one",
        (job("a", 0, 500, 4), job("b", 0, 900, 4)),
        nodes=3,
        failures=((250.0, "n1", 400.0),),
    ),
    Scenario(
        # a gang of two on n1 and n2; n2 dies and n3 stands in; the second death, n3's,
        # finds no free node (n2 is still down): evicted, it starts again when n3 is back
        "a-gang-has-a-node-replaced-then-is-evicted-when-none-is-free",
        (job("g", 0, 800, 4, nodes=2),),
        nodes=3,
        failures=((130.0, "n2", 500.0), (330.0, "n3", 100.0)),
    ),
    Scenario(
        "a-gang-loses-a-node",
        (job("g", 0, 400, 4, nodes=2),),
        failures=((130.0, "n2", 100.0),),
    ),
    Scenario(
        "past-max-restarts-a-job-fails",
        (job("a", 0, 1000, 4, max_restarts=1), job("b", 0, 1000, 4, max_restarts=5)),
        failures=((100.0, "n1", 30.0), (200.0, "n1", 30.0), (300.0, "n2", 30.0)),
    ),
    Scenario(
        "preemption-for-a-higher-priority-job",
        (
            job("low", 0, 500, 4),
            job("low2", 0, 500, 4),
            job("hi", 100, 100, 4, priority_class="high"),
        ),
        policies=PRIORITIES,
    ),
    Scenario(
        # At 440 both run on a node of their own. veteran (started at 0) checkpointed at 400:
        # 40 s of work would be lost; newcomer (started at 250, the youngest) checkpointed at
        # 350: 90 s. The victim is veteran, though newcomer is younger and first by name.
        "the-victim-with-least-work-since-its-checkpoint-goes",
        (
            job("veteran", 0, 2000, 4),
            job("newcomer", 250, 2000, 4),
            job("hi", 440, 100, 4, priority_class="high"),
        ),
        policies=PRIORITIES,
        checkpoint_s=100.0,
    ),
    Scenario(
        "a-preempted-gang-frees-two-nodes",
        (job("g", 0, 800, 4, nodes=2), job("hi", 50, 100, 4, nodes=2, priority_class="high")),
        policies=PRIORITIES,
    ),
    Scenario(
        # hi borrows one of e's three nodes: e checkpoints for 30 s, resumes on two; when hi
        # ends, the loan closes and e grows back onto the free node, resuming on three
        "an-elastic-job-lends-a-node-and-grows-back",
        LOAN,
        nodes=3,
        policies=PRIORITIES,
    ),
    Scenario(
        # j0 fails at 100 s, past its max_runtime_s, and is being stopped when n2 dies under
        # it a cycle later: a job that has ended is not evicted (the controller did, the
        # simulator did not: found by the drawn scenarios)
        "a-job-stopped-past-its-max-runtime-is-not-evicted-when-its-node-dies",
        (job("j0", 0, 1097, 4, nodes=2, max_runtime_s=100.0),),
        failures=((110.0, "n2", 300.0),),
    ),
    Scenario(
        # lo, a train job on n1 and n2 (its driver apart: a dead node is waited out inside
        # the attempt), is preempted at 200 s for 30 s; n1 dies at 210 s, n2 at 230 s as its
        # grace ends and its stop is sent: Ray stops it as asked, and it is requeued when the
        # stop is seen a cycle later (the simulator took n2's death as its end: found by the
        # drawn scenarios, seeds 2:664, 3:145942, 4:29704)
        "a-train-job-whose-node-dies-as-its-grace-ends-is-requeued-when-its-stop-is-seen",
        (job("lo", 0, 900, 4, nodes=2), job("hi", 200, 300, 4, priority_class="high")),
        failures=((210.0, "n1", 100.0), (230.0, "n2", 100.0)),
        policies=PRIORITIES,
    ),
    Scenario(
        # as an-elastic-job-lends-a-node-and-grows-back, in a pool whose grow grace (mesh.yaml
        # graces.grow_s) is 5 s: once the loan closes, e is stopped 5 s after it is asked to
        # checkpoint, not 30
        "an-elastic-job-grows-back-after-its-pool-s-grace",
        LOAN,
        nodes=3,
        policies=PRIORITIES,
        grow_grace_s=5.0,
    ),
    Scenario(
        # a two-node gang borrows two nodes of e, never below its least of one; then a
        # third high job finds only e's last node: e is at its least and is preempted whole
        "lending-stops-at-the-least-then-the-lender-is-preempted",
        (
            job("e", 0, 3000, 4, nodes=3, elastic_min=1),
            job("g", 100, 300, 4, nodes=2, priority_class="high"),
            job("hi", 200, 100, 4, priority_class="high"),
        ),
        nodes=3,
        policies=PRIORITIES,
    ),
    Scenario(
        # s runs one replica on n1; its traffic doubles at 300 s for 600 s: after 30 s above
        # its target it wants a second replica, which borrows a node of e (e checkpoints for
        # 30 s, resumes on one); 120 s after the surge it scales in, the borrowed replica
        # goes, the loan closes and e grows back onto two nodes
        "a-surge-borrows-from-elastic-training-and-gives-back",
        (
            service("s", 0, 1.0, surges=((300, 600, 2.0),)),
            job("e", 20, 3000, 4, nodes=2, elastic_min=1),
        ),
        nodes=3,
        policies=PRIORITIES,
    ),
    Scenario(
        # a surge of s wants three replicas: e lends down to its least (one node), then is
        # preempted whole for the third (the policy lets high take low); a node failure
        # under a replica takes it, and it is placed again when the node is back
        "a-surge-stops-at-the-lenders-least-and-replicas-come-back-after-a-failure",
        (
            service("s", 0, 1.0, surges=((200, 900, 3.0),)),
            job("e", 20, 3000, 4, nodes=2, elastic_min=1),
        ),
        nodes=3,
        failures=((600.0, "n1", 300.0),),
        policies=PRIORITIES,
    ),
    Scenario(
        # the only node is down when s arrives: its replica waits, and is placed at the cycle
        # the node is back (the run lasts until the failures are repaired, on both sides)
        "a-service-whose-only-node-is-down-is-placed-when-it-is-back",
        (service("s", 0, 1.0, least=1, most=2, gpus=1),),
        nodes=1,
        failures=((0.0, "n1", 20.0),),
        policies=PRIORITIES,
    ),
    Scenario(
        "burst-when-the-wait-is-long-and-teardown-when-idle",
        (job("a", 0, 600, 4, nodes=2, max_runtime_s=600), job("b", 10, 100, 1)),
        policies=BURST,
        cloud=Cloud(),
    ),
    Scenario(
        "no-burst-when-the-wait-is-short",
        (job("a", 0, 50, 4, nodes=2, max_runtime_s=50), job("b", 10, 100, 1)),
        policies=BURST,
        cloud=Cloud(),
    ),
    Scenario(
        "a-burst-pool-keeps-its-head-until-the-last-worker-goes",
        (
            job("a", 0, 900, 4, nodes=2, max_runtime_s=900),
            job("b", 10, 100, 1),
            job("c", 10, 400, 1),
        ),
        policies=BURST,
        cloud=Cloud(idle_s=60.0),
    ),
    Scenario(
        "a-pool-with-its-own-head-bills-it-and-ends-it-with-the-last-worker",
        (
            job("a", 0, 3000, 4, nodes=2, max_runtime_s=3000),
            job("b", 10, 400, 1),
            job("c", 20, 200, 1),
        ),
        policies=BUDGET,
        cloud=Cloud(idle_s=60.0, head=True),
    ),
    Scenario(
        "a-spot-worker-taken-back-leaves-the-pools-own-head-up",
        (job("a", 0, 2000, 4, nodes=2, max_runtime_s=2000), job("b", 10, 600, 1)),
        policies=BURST,
        cloud=Cloud(spot=True, notice_s=60.0, head=True),
        notices=((200.0, 1),),  # the first worker: aws#0 is the head
    ),
    Scenario(
        "a-head-left-alone-by-a-spot-worker-stays-the-idle-time-from-its-jobs-end",
        (job("a", 0, 265, 4, nodes=2, max_runtime_s=300), job("b", 10, 600, 1)),
        policies=BURST,
        cloud=Cloud(spot=True, notice_s=60.0, head=True),
        notices=((200.0, 1),),  # b requeued as a ends: it runs on-prem, the head waits
    ),
    Scenario(
        "a-spot-notice-preempts-checkpoints-and-requeues",
        (job("a", 0, 2000, 4, nodes=2, max_runtime_s=2000), job("b", 10, 600, 1)),
        policies=BURST,
        cloud=Cloud(spot=True, notice_s=60.0),
        notices=((200.0, 0),),
    ),
    Scenario(
        "a-budget-warns-then-stops-bursting",
        (
            job("a", 0, 3000, 4, nodes=2, max_runtime_s=3000),
            job("b", 10, 400, 1),
            job("c", 600, 300, 1),
        ),
        policies=BUDGET,
        cloud=Cloud(idle_s=30.0),
    ),
    Scenario(
        "a-discounted-cloud-node-is-charged-what-is-paid",
        (
            job("a", 0, 2000, 4, nodes=2, max_runtime_s=2000),
            job("b", 10, 800, 1),
            job("c", 900, 300, 1),
        ),
        policies=BUDGET,
        cloud=Cloud(idle_s=30.0, discount_pct=50.0),
    ),
    Scenario(
        "a-deadline-that-comes-first-fails-the-job",
        (
            job("a", 0, 500, 4, nodes=2),
            job("late", 10, 100, 4, deadline_s=200.0),
            job("soon", 20, 100, 4, deadline_s=900.0),
        ),
    ),
    Scenario(
        "past-its-max-runtime-a-job-is-stopped-and-fails",
        (job("a", 0, 500, 4, max_runtime_s=120), job("b", 50, 100, 4, nodes=2)),
    ),
    Scenario(
        "critical-work-waits-on-prem-others-burst",
        (
            job("a", 0, 700, 4, nodes=2, max_runtime_s=700),
            job("crit", 10, 100, 1, criticality="critical"),
            job("std", 10, 100, 1),
        ),
        policies=BURST_AND_PRIORITIES,
        cloud=Cloud(),
    ),
    # two jobs that declared no runtime fill on-prem; w comes 20 s later. Each is assumed to
    # run 2 h more: w's wait (2 h) opens the 60 s gate at once. With the policies' 30 s, the
    # wait is the larger of 30 s and as long again as they have run: past 60 s once they have
    # run past 60 s, so w bursts at 70 s (the cycle every 10 s).
    Scenario(
        "a-pool-full-of-jobs-without-runtimes-opens-the-burst-gate",
        (job("a", 0, 1000, 4), job("b", 0, 1000, 4), job("w", 20, 100, 1)),
        policies=BURST,
        cloud=Cloud(),
    ),
    Scenario(  # j1, of a higher class, takes the node launched for j0: j0 launches again
        "a-launch-asked-again-after-another-job-took-its-node-launches",
        (job("j0", 60, 685, 1), job("j1", 70, 725, 0.5, priority_class="high")),
        nodes=1,
        policies=BURST_AND_PRIORITIES,
        cloud=Cloud(max_nodes=3, idle_s=300.0, head=True),
        failures=((60.0, "n1", 360.0),),
    ),
    Scenario(
        "the-policies-set-what-a-job-without-a-runtime-is-assumed-to-run",
        (job("a", 0, 1000, 4), job("b", 0, 1000, 4), job("w", 20, 100, 1)),
        policies=BURST + "forecast: {unknown_runtime_s: 30s}\n",
        cloud=Cloud(),
    ),
    Scenario(  # the lender's low job takes 2 GPUs back from the borrower's high ones
        "a-lender-reclaims-from-a-borrower-of-higher-priority",
        BORROWED + COMES_BACK,
        policies=RECLAIM % "any",
    ),
    Scenario(  # the same, but the lender may reclaim from lower priorities only: it waits
        "a-lender-that-reclaims-from-lower-priority-only-waits",
        BORROWED + COMES_BACK,
        policies=RECLAIM % "lower-priority",
    ),
)


# --- random scenarios -----------------------------------------------------------------------------


def generate(rng: random.Random, name: str = "random") -> Scenario:
    """A random small scenario: jobs of every size that fits, failures, maybe a burst pool
    with spot notices, policies with priorities and preemption. Event times fall on the
    controller's cycles (notices are taken as seen at the cycle they come)."""
    nodes = rng.randint(1, 3)
    jobs = []
    for i in range(rng.randint(1, 7)):
        width = rng.choice([1, 1, 1, 2]) if nodes > 1 else 1
        gpus = rng.choice([0.5, 1, 2, 4]) if width == 1 else 4
        extra: dict[str, object] = {}
        if rng.random() < 0.4:
            extra["max_runtime_s"] = float(rng.choice([100, 300, 1000, 3000]))
        if rng.random() < 0.15:
            extra["deadline_s"] = float(rng.randrange(0, 600, 10))
        if rng.random() < 0.3:
            extra["priority_class"] = "high"
        if rng.random() < 0.2:
            extra["criticality"] = "critical"
        extra["max_restarts"] = rng.choice([0, 1, 3])
        if width > 1 and rng.random() < 0.4:
            extra["elastic_min"] = 1
        if rng.random() < 0.1:
            surges = tuple(
                (float(rng.randrange(0, 900, 10)), float(rng.randrange(60, 600, 10)), 2.0 + k)
                for k in range(rng.choice([0, 1, 2]))
            )
            jobs.append(
                service(
                    f"s{i}",
                    float(rng.randrange(0, 600, 10)),
                    rng.choice([0.5, 1.0, 1.5]),
                    surges,
                    least=rng.choice([1, 1, 2]),
                    most=rng.choice([2, 3]),
                    gpus=rng.choice([1, 2, 4]),
                    downscale_s=float(rng.choice([60, 120, 300])),
                )
            )
            continue
        jobs.append(
            job(
                f"j{i}",
                float(rng.randrange(0, 600, 10)),
                float(rng.randrange(20, 1500)),
                gpus,
                width,
                name=rng.choice(["etl", "eval", f"j{i}"]),
                **extra,
            )
        )
    failures = tuple(
        (
            float(rng.randrange(0, 1500, 10)),
            f"n{rng.randint(1, nodes)}",
            float(rng.randrange(10, 800, 10)),
        )
        for _ in range(rng.choice([0, 0, 1, 2]))
    )
    cloud = None
    notices: tuple[tuple[float, int], ...] = ()
    policies = PRIORITIES
    if rng.random() < 0.5:
        spot = rng.random() < 0.5
        cloud = Cloud(
            max_nodes=rng.randint(1, 3),
            spot=spot,
            idle_s=float(rng.choice([30, 60, 300])),
            head=rng.random() < 0.5,
        )
        policies = (
            BURST_AND_PRIORITIES
            if rng.random() < 0.7
            else BUDGET + PRIORITIES.split("preemption:")[0]
        )
        if spot and rng.random() < 0.6:
            notices = ((float(rng.randrange(50, 1000, 10)), rng.randint(0, 2)),)
    scenario = Scenario(
        name,
        tuple(jobs),
        nodes=nodes,
        policies=policies,
        cloud=cloud,
        failures=failures,
        notices=notices,
        checkpoint_s=float(rng.choice([50, 100, 250])),
    )
    if cloud is not None and rng.random() < 0.4:  # drawn last: a seed's draws above stay
        unknown_s = rng.choice([30, 120, 600])
        policies += f"forecast: {{unknown_runtime_s: {unknown_s}s}}\n"
    return replace(scenario, policies=policies, until_s=30_000.0)
