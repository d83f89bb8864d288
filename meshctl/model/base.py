"""Shared pieces of every meshctl file: the strict base model, names, metadata and unit types.

The file models are pydantic models: one definition gives validation with precise errors,
immutability and the JSON Schema that `meshctl schema` publishes. pydantic does no I/O, so the
models stay in the pure core (docs/ARCHITECTURE.md says why this is the one third-party package
the core may use besides CEL).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from meshctl import units

API_VERSION: Final = "meshctl/v1"

NAME_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
LABEL_KEY_PATTERN: Final = r"^([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"


class Model(BaseModel):
    """Strict, immutable: an unknown field is an error, never silently ignored."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, str_strip_whitespace=True, defer_build=True
    )


Name = Annotated[
    str,
    Field(
        pattern=NAME_PATTERN,
        description="lower-case letters, digits and '-', at most 63 characters (a DNS label)",
    ),
]
LabelKey = Annotated[str, Field(pattern=LABEL_KEY_PATTERN)]
Labels = dict[LabelKey, str]


class Metadata(Model):
    name: Name
    labels: Labels = Field(default_factory=dict)
    description: str = ""


def _require_header(schema: dict[str, Any]) -> None:
    required = schema.setdefault("required", [])
    if isinstance(required, list):
        required[:0] = [key for key in ("apiVersion", "kind") if key not in required]


class DocumentModel(Model):
    """A whole file: ``apiVersion``, ``kind`` (each subclass narrows it to its own name),
    ``metadata`` and a ``spec``; ``apiVersion`` and ``kind`` must be spelled out in it."""

    model_config = ConfigDict(json_schema_extra=_require_header)

    apiVersion: Literal["meshctl/v1"] = API_VERSION
    kind: str
    metadata: Metadata


def _checked(parse: Callable[[object], float], upper: float, what: str) -> BeforeValidator:
    """Accept a number or a human form such as ``"80GiB"``; reject what exceeds ``upper``."""

    def validate(value: object) -> float:
        return units.bounded(parse(value), upper, what)

    return BeforeValidator(validate)


def _schema(upper: float, example: str, what: str) -> WithJsonSchema:
    return WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0, "maximum": upper},
                {"type": "string", "examples": [example]},
            ],
            "description": f"{what}, e.g. {example}",
        }
    )


_MEM, _GPU_MEM = units.MAX_MEMORY_GIB, units.MAX_GPU_MEMORY_GIB
MemoryGiB = Annotated[
    float,
    _checked(units.parse_memory_gib, _MEM, "memory in GiB"),
    _schema(_MEM, "80GiB", "memory in GiB"),
]
GpuMemoryGiB = Annotated[
    float,
    _checked(units.parse_memory_gib, _GPU_MEM, "memory per GPU in GiB"),
    _schema(_GPU_MEM, "80GiB", "memory per GPU in GiB"),
]
NicGbps = Annotated[
    float,
    _checked(units.parse_bandwidth_gbps, units.MAX_NIC_GBPS, "bandwidth in Gbps"),
    _schema(units.MAX_NIC_GBPS, "400Gbps", "bandwidth in Gbps"),
]
Cpus = Annotated[
    float,
    _checked(units.parse_cpus, units.MAX_CPUS, "CPU cores"),
    _schema(units.MAX_CPUS, "500m", "CPU cores"),
]
Gpus = Annotated[
    float,
    _checked(units.parse_gpus, units.MAX_GPUS_PER_NODE, "GPUs per node"),
    _schema(units.MAX_GPUS_PER_NODE, "0.25", "GPUs per node, whole or a fraction of one"),
]
DurationS = Annotated[
    float,
    _checked(units.parse_duration_s, units.MAX_DURATION_S, "a duration in seconds"),
    _schema(units.MAX_DURATION_S, "10m", "a duration in seconds"),
]
DurationMinutes = Annotated[
    float,
    _checked(units.parse_duration_min, units.MAX_DURATION_S / 60, "a duration in minutes"),
    _schema(units.MAX_DURATION_S / 60, "10m", "a duration in minutes (a number), or with a unit"),
]
UsdPerHour = Annotated[
    float,
    _checked(units.parse_usd, units.MAX_USD_PER_HOUR, "US dollars per hour"),
    _schema(units.MAX_USD_PER_HOUR, "12.5", "US dollars per hour"),
]
UsdPerGiB = Annotated[
    float,
    _checked(units.parse_usd, units.MAX_USD_PER_GIB, "US dollars per GiB"),
    _schema(units.MAX_USD_PER_GIB, "0.09", "US dollars per GiB moved"),
]
Usd = Annotated[
    float,
    _checked(units.parse_usd, units.MAX_USD, "US dollars"),
    _schema(units.MAX_USD, "$20000", "US dollars"),
]
Percent = Annotated[
    float,
    _checked(units.parse_percent, 100.0, "a percentage"),
    _schema(100.0, "15%", "a percentage"),
]
MemoryGiBTotal = Annotated[
    float,
    _checked(units.parse_memory_gib, units.MAX_MEMORY_GIB_TOTAL, "memory in GiB"),
    _schema(units.MAX_MEMORY_GIB_TOTAL, "640GiB", "memory in GiB, summed over many GPUs"),
]
Count = Annotated[int, Field(ge=1, le=units.MAX_NODES)]
