"""The simulator (pure core): a virtual clock over an event heap that drives the very same
scheduler and policy engine the controller uses, over real or synthetic workloads.

    result = simulate(mesh, jobs, config, policies)      # engine.py
    report = build_report(result, ...)                   # report.py

workload.py turns trace jobs into classed jobs (window, arrival scaling, replication,
seeded classes, a synthetic generator); network.py slows multi-node jobs by how their
placement spreads over the fabric; failures.py holds node failure presets, repair times and
the checkpoint model (its Young/Daly interval is ``meshctl.lifecycle.checkpointing``'s, shared with
``meshctl.workload.train``). No I/O and no clock here: the shell (``meshctl.sim.run``) reads traces
and files and writes reports and charts.
"""
