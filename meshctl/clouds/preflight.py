"""``meshctl pools check``: what a cloud pool needs before its first launch, checked against the
provider without launching anything.

Each provider's preflight (``aws_preflight``, ``gcp_preflight``) returns one ``Check`` per
question, in the order an operator fixes them: credentials, region and zones, the image, the
network, the ports the controller and the nodes need, the instance types, the GPU quota. A
check that fails says what was found and the fix. A check that cannot be judged because the
endpoint is an emulator that does not serve that API (moto serves no EC2 quotas) is
``skip``; against a real account the same is a failure.

The settings a real account needs (``CloudPoolBase.real_account_gaps``) come first, one
failing check per missing field: they are mesh.yaml's to fix before anything else.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from meshctl.model.mesh import RAY_DASHBOARD_PORT, RAY_GCS_PORT, CloudPoolBase

Result = Literal["pass", "fail", "skip"]
DASHBOARD_PORT, GCS_PORT = RAY_DASHBOARD_PORT, RAY_GCS_PORT  # on the head


@dataclass(frozen=True, slots=True)
class Check:
    name: str  # "credentials", "zones", "image", ...
    result: Result
    detail: str  # what was found
    fix: str = ""  # what to do, when it failed

    @property
    def ok(self) -> bool:
        return self.result != "fail"


def passed(name: str, detail: str) -> Check:
    return Check(name, "pass", detail)


def failed(name: str, detail: str, fix: str) -> Check:
    return Check(name, "fail", detail, fix)


def skipped(name: str, detail: str) -> Check:
    return Check(name, "skip", detail)


def head_types(pool: CloudPoolBase) -> set[str]:
    """The pool's head node type, as a set to join its node types with (empty: none set)."""
    return {pool.head_node_type} if pool.head_node_type else set()


def settings(pool: CloudPoolBase) -> list[Check]:
    """One failing check per setting a real account needs and mesh.yaml lacks."""
    return [
        failed(f"setting {name}", "not set", f"set {name} in mesh.yaml: {want}")
        for name, want in pool.real_account_gaps()
    ]


def guarded(name: str, call: Callable[[], Check], explain: Callable[[Exception], str]) -> Check:
    """``call()``, or a failing check whose detail is ``explain(error)``: one check's error
    never hides the others."""
    try:
        return call()
    except Exception as err:
        return failed(name, explain(err), "see the detail; fix it and run pools check again")


def missing_ports(
    open_to: Iterable[tuple[int, int, str]], ports: Sequence[int], source: str
) -> list[int]:
    """The ``ports`` no rule opens to ``source`` (a CIDR); ``open_to`` is (from port, to
    port, CIDR) per rule, TCP or all protocols."""
    want = ipaddress.ip_network(source, strict=False)
    rules = [(low, high, ipaddress.ip_network(cidr, strict=False)) for low, high, cidr in open_to]
    return [
        port
        for port in ports
        if not any(
            low <= port <= high and want.version == net.version and want.subnet_of(net)  # type: ignore[arg-type]
            for low, high, net in rules
        )
    ]


def needed_per_quota(
    wants: Iterable[tuple[str | None, int]],
) -> dict[str, int]:
    """Units (vCPUs, GPUs) needed per quota name, from (quota name, units) per node type;
    node types no quota limits (None) are left out."""
    found: dict[str, int] = {}
    for quota, units in wants:
        if quota is not None:
            found[quota] = found.get(quota, 0) + units
    return found
