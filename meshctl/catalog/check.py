"""Cross-file checks: every cloud node type a mesh names must be in its provider's catalog,
priced in the pool's region."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from meshctl.files import Loaded
from meshctl.model import Catalog, Mesh
from meshctl.model.mesh import CloudPoolBase
from meshctl.problems import Problem


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
    return problems


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
