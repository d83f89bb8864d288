"""``meshctl schema KIND``: the JSON Schema of a meshctl file, for editors and CI."""

from __future__ import annotations

from typing import Annotated

import typer

from meshctl.cli.render import Output
from meshctl.errors import InvalidRequestError

_KIND_NAMES = ("Mesh", "Job", "Policy", "PolicyTest", "MeshState", "Catalog")


def schema(
    kind: Annotated[str, typer.Argument(help=f"One of {', '.join(_KIND_NAMES)}.")],
    output: Annotated[
        Output, typer.Option("--output", "-o", help="json or yaml.", case_sensitive=False)
    ] = Output.json,
) -> None:
    """Print the JSON Schema of a file kind, for editors' YAML plugins.

    Kinds: Mesh, Job, Policy, PolicyTest, MeshState, Catalog. JSON by default,
    -o yaml for YAML.

    Examples:
      meshctl schema Job > job.schema.json
      meshctl schema Mesh -o yaml
    """
    from meshctl.cli import render
    from meshctl.model import API_VERSION, KINDS

    if output is Output.table:  # a JSON Schema is a document, not rows
        raise InvalidRequestError("--output: a schema is printed as json or yaml, got table")
    model = next((m for name, m in KINDS.items() if name.lower() == kind.lower()), None)
    if model is None:
        raise InvalidRequestError(f"kind: expected one of {', '.join(sorted(KINDS))}, got {kind!r}")
    document = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:meshctl:{API_VERSION}:{model.__name__}",
        **model.model_json_schema(),
    }
    render.emit_data(document, output)
