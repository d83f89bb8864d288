"""Every quantity of every file kind takes the same forms: a number in the unit its name
says, or a quantity with a unit (``idle_minutes: 5m`` as ``grace_s: 2m`` does).

The fields are found by walking the models, so a field added later with a unit in its name is
checked without editing this table; the table says what each unit's two forms give.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from meshctl.model import KINDS

pytestmark = pytest.mark.unit

# (what a field's name says, a pattern its name matches): a number in that unit, what it gives,
# and a quantity with a unit, what it gives
FORMS: list[tuple[str, str, object, float, str, float]] = [
    ("seconds", r".*_s|interval|hang_timeout", 90, 90.0, "2m", 120.0),
    ("minutes", r".*_minutes", 5, 5.0, "90s", 1.5),
    ("USD per GiB", r".*usd_per_gib", 0.09, 0.09, "$0.12", 0.12),  # before GiB: a price
    ("GiB", r".*_gib(_.*)?", 2, 2.0, "512MiB", 0.5),
    ("Gbps", r".*_gbps", 100, 100.0, "1Tbps", 1000.0),
    ("USD per hour", r".*usd_per(_gpu)?_hour", 2.5, 2.5, "$2.5", 2.5),
    ("USD", r".*usd_(per_)?month", 100, 100.0, "$100", 100.0),
    ("percent", r".*_pct", 15, 15.0, "15%", 15.0),
    ("CPUs", r"v?cpus", 2, 2.0, "500m", 0.5),
]


def _models(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _models(arg)


def quantity_fields() -> Iterator[tuple[str, str, FieldInfo, tuple[Any, ...]]]:
    """(model, field, its info, its unit's forms) for every field with a unit in its name."""
    seen: set[type[BaseModel]] = set()
    todo = list(KINDS.values())
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, info in model.model_fields.items():
            todo += list(_models(info.annotation))
            form = next((f for f in FORMS if re.fullmatch(f[1], name)), None)
            if form is not None:
                yield model.__name__, name, info, form


FIELDS = sorted(quantity_fields(), key=lambda f: (f[0], f[1]))


def adapter(info: FieldInfo) -> TypeAdapter[Any]:
    if not info.metadata:
        return TypeAdapter(info.annotation)
    return TypeAdapter(Annotated[info.annotation, *info.metadata])  # type: ignore[name-defined]


@pytest.mark.parametrize(
    ("info", "form"),
    [pytest.param(f[2], f[3], id=f"{f[0]}.{f[1]} ({f[3][0]})") for f in FIELDS],
)
def test_a_quantity_takes_a_number_in_its_unit_or_a_unit(info: FieldInfo, form: tuple) -> None:
    _, _, number, as_number, text, as_text = form
    check = adapter(info)
    assert check.validate_python(number) == pytest.approx(as_number)
    assert check.validate_python(text) == pytest.approx(as_text)
    with pytest.raises(ValidationError, match="expected"):
        check.validate_python("12 parsecs")


def test_the_walk_finds_the_quantities_people_write() -> None:
    found = {f"{model}.{name}" for model, name, _, _ in FIELDS}
    assert found >= {
        "AwsPool.idle_minutes",
        "GcpPool.idle_minutes",
        "CostModel.discount_pct",
        "CostModel.usd_per_gpu_hour",
        "Budget.usd_per_month",
        "Budget.soft_pct",
        "TeamQuota.gpu_memory_gib",
        "PoolState.spend_usd_month",
        "TeamState.gpu_memory_gib_in_use",
        "Expect.max_usd_per_hour",
        "PreemptionRule.grace_s",
        "Checkpoint.interval",
        "Train.hang_timeout",
        "Limits.max_runtime_s",
        "Resources.memory_gib",
        "NodeGroup.nic_gbps",
        "InstanceType.vcpus",
        "RegionPrice.spot_usd_per_hour",
        "CostModel.egress_usd_per_gib",
        "Egress.internet_usd_per_gib",
    }
