"""``meshctl sim sweep``'s work beside its flags: the inputs every run shares, read and
checked once (the files, and each trace's job shapes against the mesh); the cluster to run
on (``--ray``, else the embedded mesh); the runs gathered with a progress bar; the runs that
did not finish, as warnings and exit 1."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from meshctl.errors import InvalidRequestError

if TYPE_CHECKING:
    from meshctl.app.context import AppContext
    from meshctl.sim.run.rayrun import Cluster, Inputs, Task
    from meshctl.sim.run.sweep import Finished, Sweep, Unfinished


def inputs(context: AppContext, mesh_file: Path, sets: dict[str, list[Path]]) -> Inputs:
    """The mesh, catalogs and each set's policy files, read and checked here (bad files: exit
    2 before any run starts), as every task gets them."""
    from meshctl.catalog.check import mesh_accelerators
    from meshctl.cli.policy_cmd import read_policies
    from meshctl.files import load_path
    from meshctl.files.policies import read_mesh
    from meshctl.problems import InvalidFileError
    from meshctl.sim.run.rayrun import Inputs

    simulated = read_mesh(mesh_file)
    catalogs = context.catalog_map()
    problems = mesh_accelerators(
        load_path(mesh_file)[0], context.accelerators(), catalogs, launching=False
    )
    if problems:
        raise InvalidFileError(problems)
    policies = {
        label: tuple(read_policies(context, paths)[0].policies) if paths else None
        for label, paths in sets.items()
    }
    return Inputs(simulated, catalogs, policies)


def fits(shared: Inputs, tasks: list[Task]) -> None:
    """Each trace's window checked against the mesh before any run starts (``sim.run.
    prepare``): what can never fit is said once per trace; none of its jobs: exit 2."""
    from meshctl.cli.render import warnings
    from meshctl.sim.core.fits import warning_lines
    from meshctl.sim.run import prepare

    checked: set[str] = set()
    for task in tasks:
        if task.spec.trace not in checked:  # the seeds and policy sets share its shapes
            checked.add(task.spec.trace)
            ready = prepare(task.spec, shared.mesh, shared.catalogs)
            warnings(warning_lines(ready.fit))


def cluster(context: AppContext, address: str | None) -> Cluster:
    """``--ray ADDRESS``, else the embedded mesh that ``meshctl up`` started (its first local
    pool that is up); neither: exit 2."""
    from meshctl.files.policies import read_mesh
    from meshctl.model.mesh import LocalPool
    from meshctl.sim.run import rayrun

    if address is not None:
        return rayrun.remote(address)
    up = context.up()
    found = None
    if "mesh" in up and Path(up["mesh"]).is_file():
        pools = [p.name for p in read_mesh(Path(up["mesh"])).spec.pools if isinstance(p, LocalPool)]
        found = rayrun.embedded(context.home / "run", pools)
    if found is None:
        raise InvalidRequestError(
            "--ray: no embedded mesh is up here to run the sweep on: run meshctl up, "
            "or pass --ray ADDRESS"
        )
    return found


def gather(
    where: Cluster, tasks: list[Task], shared: Inputs, retries: int
) -> tuple[list[Finished], list[Unfinished]]:
    from meshctl.cli.render import progress_bar
    from meshctl.errors import CommandError
    from meshctl.sim.run.rayrun import SweepError, execute

    with progress_bar(f"sweeping {len(tasks)} runs on {where.name}", len(tasks)) as tick:
        try:
            return execute(where, tasks, shared, retries, lambda done, _: tick(done))
        except SweepError as err:
            raise CommandError(str(err)) from None


def unfinished(sweep: Sweep) -> None:
    """Runs that did not finish: a warning each, then exit 1."""
    from meshctl.cli import render
    from meshctl.errors import CommandError

    if not sweep.unfinished:
        return
    render.warnings(
        f"run {r.key.policies} {r.key.trace} seed {r.key.seed} did not finish after "
        f"{r.attempts} attempt(s): {r.reason}"
        for r in sweep.unfinished
    )
    raise CommandError(f"{len(sweep.unfinished)} of {sweep.runs} runs did not finish")
