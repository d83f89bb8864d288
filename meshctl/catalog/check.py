"""Cross-file checks: every cloud node type a mesh names must be in its provider's catalog,
priced in the pool's region (a pool's ``head_node_type`` among the catalog's head types);
every accelerator a mesh's on-prem nodes or a catalog's types have must be one the
accelerator registry knows, under its own vendor; every model a job names must be one the
catalogs or the mesh's own nodes have, and its vendor one the registry knows. ``H100-SXM`` is
an error with "did you mean 'H100'?" instead of a job that waits forever for a GPU nobody has.

Models compare without regard to case, as the scheduler matches them.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from pathlib import Path

from meshctl.catalog import fungible
from meshctl.files import Loaded
from meshctl.model import Accelerators, Catalog, Job, Mesh, PolicyTest
from meshctl.model.catalog import InstanceType
from meshctl.model.job import Resources
from meshctl.model.mesh import Accelerator, CloudPoolBase, LocalPool, RayPool
from meshctl.problems import Loc, Problem, dotted


def mesh_node_types(loaded: Loaded, catalogs: Mapping[str, Catalog]) -> list[Problem]:
    mesh = loaded.document
    if not isinstance(mesh, Mesh):
        return []
    problems: list[Problem] = []
    for i, pool in enumerate(mesh.spec.pools):
        catalog = catalogs.get(pool.provider)
        if not isinstance(pool, CloudPoolBase) or catalog is None:
            continue
        for j, node_type in enumerate(pool.node_types):
            loc = ("spec", "pools", i, "node_types", j, "name")
            message = _node_type_problem(node_type.name, pool.region, catalog)
            if message:
                field = f"spec.pools[{i}].node_types[{j}].name"
                problems.append(Problem(loaded.path, loaded.line_of(*loc), field, message))
        if pool.head_node_type:
            message = _head_type_problem(pool.head_node_type, pool.region, catalog)
            if message:
                line = loaded.line_of("spec", "pools", i, "head_node_type")
                field = f"spec.pools[{i}].head_node_type"
                problems.append(Problem(loaded.path, line, field, message))
    return problems


def _head_type_problem(name: str, region: str, catalog: Catalog) -> str | None:
    provider = catalog.spec.provider
    found = catalog.head_type(name)
    if found is None:
        names = [t.name for t in catalog.spec.head_types]
        listed = f"one of: {', '.join(names) or 'none'}"
        close = difflib.get_close_matches(name, names, n=1)
        if catalog.instance_type(name) is not None:
            got, hint = f"{name!r}, a GPU type (the head takes no work)", listed
        else:
            got, hint = repr(name), f"did you mean {close[0]!r}?" if close else listed
        return f"expected a head type of the {provider} catalog (a CPU type), got {got}; {hint}"
    if region not in found.prices:
        priced = ", ".join(sorted(found.prices)) or "no region"
        return f"{name} has no price for {region} in the {provider} catalog (priced in: {priced})"
    return None


def _node_type_problem(name: str, region: str, catalog: Catalog) -> str | None:
    provider = catalog.spec.provider
    found = catalog.instance_type(name)
    if found is None:
        names = [t.name for t in catalog.spec.instance_types]
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "; see `meshctl providers list`"
        return f"expected an instance type of the {provider} catalog, got {name!r}{hint}"
    if region not in found.prices:
        priced = ", ".join(sorted(found.prices)) or "no region"
        return f"{name} has no price for {region} in the {provider} catalog (priced in: {priced})"
    return None


# --- accelerator models ------------------------------------------------------------------------


def catalog_models(catalogs: Mapping[str, Catalog]) -> dict[str, str]:
    """Every accelerator model the catalogs sell, by its lower-case name."""
    return {
        t.accelerator.model.lower(): t.accelerator.model
        for catalog in catalogs.values()
        for t in catalog.spec.instance_types
    }


def mesh_models(mesh: Mesh) -> dict[str, str]:
    """The accelerator models of a mesh's on-prem nodes, by lower-case name."""
    return {
        group.accelerator.model.lower(): group.accelerator.model
        for pool in mesh.spec.pools
        if isinstance(pool, LocalPool | RayPool)
        for group in pool.nodes
        if group.accelerator is not None
    }


def _model_problem(model: str, known: Mapping[str, str], what: str) -> str | None:
    if model.lower() in known:
        return None
    names = sorted(set(known.values()))
    close = difflib.get_close_matches(model.lower(), list(known), n=1, cutoff=0.5)
    hint = f"; did you mean {known[close[0]]!r}?" if close else f" ({', '.join(names)})"
    return f"expected an accelerator model {what}, got {model!r}{hint}"


def registry_models(registry: Accelerators) -> dict[str, str]:
    """Every model the accelerator registry knows, by its lower-case name."""
    return {m.model.lower(): m.model for m in registry.spec.models}


def accelerator_problem(accelerator: Accelerator, registry: Accelerators) -> tuple[str, str] | None:
    """(field, message) when the registry does not know the accelerator's model, or knows it
    under another vendor; None when it is one the registry knows."""
    known = registry.spec.model(accelerator.model)
    if known is None:
        what = "the accelerator registry knows"
        message = _model_problem(accelerator.model, registry_models(registry), what)
        return ("model", message or "")
    if known.vendor != accelerator.vendor:
        said = f"expected {known.vendor!r}, the vendor of {known.model} in the accelerator registry"
        return ("vendor", f"{said}, got {accelerator.vendor!r}")
    return None


def _not_launchable(kind: InstanceType, registry: Accelerators) -> str | None:
    """Why meshctl cannot launch instances of this type: its accelerator comes in slices,
    made through the vendor's own API (Cloud TPU: tpu.googleapis.com), not the compute API
    meshctl's provider calls (instances.insert); None if it can."""
    vendor = registry.spec.vendor(kind.accelerator.vendor)
    if vendor is None or vendor.topology != "slice":
        return None
    return (
        f"expected a node type launched as a compute instance: {kind.name} is a"
        f" {kind.accelerator.model} slice, made through its own API (the Cloud TPU API),"
        " which meshctl does not call yet; the simulator models it (docs/ACCELERATORS.md)"
    )


def mesh_accelerators(
    loaded: Loaded,
    registry: Accelerators,
    catalogs: Mapping[str, Catalog] | None = None,
    launching: bool = True,
) -> list[Problem]:
    """On-prem node groups whose accelerator the registry does not know (or knows under
    another vendor), and, ``launching`` (not the simulator), a cloud pool's node types
    (``catalogs``) the provider's compute API cannot launch (a Cloud TPU slice)."""
    mesh = loaded.document
    if not isinstance(mesh, Mesh):
        return []
    problems = []
    for i, pool in enumerate(mesh.spec.pools):
        if isinstance(pool, CloudPoolBase):
            catalog = (catalogs or {}).get(pool.provider) if launching else None
            for j, node_type in enumerate(pool.node_types):
                found_type = catalog.instance_type(node_type.name) if catalog else None
                said = _not_launchable(found_type, registry) if found_type else None
                if said:
                    loc = ("spec", "pools", i, "node_types", j, "name")
                    line = loaded.line_of(*loc)
                    problems.append(Problem(loaded.path, line, dotted(loc), said))
            continue
        for j, group in enumerate(pool.nodes):
            if group.accelerator is None:
                continue
            found = accelerator_problem(group.accelerator, registry)
            if found:
                field, message = found
                at = ("spec", "pools", i, "nodes", j, "accelerator", field)
                problems.append(Problem(loaded.path, loaded.line_of(*at), dotted(at), message))
    return problems


def catalog_accelerators(loaded: Loaded, registry: Accelerators) -> list[Problem]:
    """A catalog's instance types whose accelerator the registry does not know."""
    catalog = loaded.document
    if not isinstance(catalog, Catalog):
        return []
    problems = []
    for i, kind in enumerate(catalog.spec.instance_types):
        found = accelerator_problem(kind.accelerator, registry)
        if found:
            loc = ("spec", "instance_types", i, "accelerator", found[0])
            problems.append(Problem(loaded.path, loaded.line_of(*loc), dotted(loc), found[1]))
    return problems


def _vendor_problem(vendor: str | None, registry: Accelerators | None) -> str | None:
    if vendor is None or registry is None or registry.spec.vendor(vendor) is not None:
        return None
    listed = ", ".join(v.name for v in registry.spec.vendors)
    return f"expected a vendor of the accelerator registry ({listed}), got {vendor!r}"


def resources_accelerators(
    path: str,
    resources: Resources,
    line_of: Callable[..., int],
    at: Loc,
    known: Mapping[str, str],
    registry: Accelerators | None = None,
) -> list[Problem]:
    """The models of a job's ``accelerator.any_of`` (under ``at``) that ``known`` lacks, and
    a vendor the ``registry`` does not list."""
    problems = []
    selector = resources.accelerator
    said = _vendor_problem(selector.vendor if selector else None, registry)
    if said:
        loc = (*at, "resources", "accelerator", "vendor")
        problems.append(Problem(path, line_of(*loc), dotted(loc), said))
    for k, model in enumerate(selector.any_of if selector else ()):
        message = _model_problem(model, known, "the catalogs or the mesh's nodes have")
        if message:
            loc = (*at, "resources", "accelerator", "any_of", k)
            problems.append(Problem(path, line_of(*loc), dotted(loc), message))
    return problems


def case_accelerators(
    path: str, test: PolicyTest, line_of: Callable[..., int], known: Mapping[str, str]
) -> list[Problem]:
    """The models the jobs and victims of a policy test's cases ask for that ``known`` lacks."""
    problems = []
    for i, case in enumerate(test.spec.cases):
        for role, spec in (("job", case.job), ("victim", case.victim)):
            if spec is not None:
                at = ("spec", "cases", i, role)
                problems += resources_accelerators(path, spec.resources, line_of, at, known)
    return problems


def job_models(catalogs: Mapping[str, Catalog], mesh: Mesh | None) -> dict[str, str]:
    """What a job may ask for: the catalogs' models and the mesh's own nodes'."""
    return catalog_models(catalogs) | (mesh_models(mesh) if mesh is not None else {})


def job_accelerators(
    loaded: Loaded,
    catalogs: Mapping[str, Catalog],
    mesh: Mesh | None,
    registry: Accelerators | None = None,
) -> list[Problem]:
    """A job file's accelerator models that neither the catalogs nor the mesh know, a vendor
    the registry does not list, a fungible class with no factor and a TPU slice the job does
    not fill (``meshctl.catalog.fungible``)."""
    job = loaded.document
    if not isinstance(job, Job):
        return []
    known = job_models(catalogs, mesh)
    resources = job.spec.resources
    problems = resources_accelerators(
        loaded.path, resources, loaded.line_of, ("spec",), known, registry
    )
    if registry is None or problems:
        return problems
    found = fungible.options(job.spec, registry.spec, known)[1]
    for loc, message in found + fungible.slices(job.spec, registry.spec):
        at = ("spec", *loc)
        problems.append(Problem(loaded.path, loaded.line_of(*at), dotted(at), message))
    return problems


def export_problems(loaded: Loaded, working_dir: Path) -> list[Problem]:
    """A train job asking for an export (``train.export``) of a loop whose function never
    returns a value: there would be no model to export."""
    from meshctl.workload.train.loops import returns_value

    job = loaded.document
    train = job.spec.train if isinstance(job, Job) else None
    if train is None or train.export is None:
        return []
    if returns_value(working_dir, train.loop) is not False:
        return []
    loc = ("spec", "train", "export")
    message = (
        f"expected a loop that returns its model ({{'model': module, 'example': inputs}}) for"
        f" export {train.export}, got {train.loop}, which never returns a value"
    )
    return [Problem(loaded.path, loaded.line_of(*loc), dotted(loc), message)]
