"""Requests the accelerator registry shapes: a fungible request's options and a TPU job's
slices. Pure: the registry and the models the mesh and catalogs have in, problems out.

A fungible request (``accelerator.equivalents: 8``) asks for eight devices of the registry's
reference model (H100), or as many of another model of its class as its throughput factor
needs: ``ceil(8 / 1.32)`` = 7 MI300X, ``ceil(8 / 0.315)`` = 26 A100 (a node of 8 never fits
that: the scheduler skips it). Its class is ``any_of`` when given, else every model with a
factor that the mesh's nodes or the catalogs have (of ``vendor``, when given). The options go
fastest model first: that is the order the scheduler tries them in.

A TPU job's workers come in whole slices: with ``accelerator.topology`` (4x4), its worker
count must be a multiple of the slice's hosts (the registry's ``slices``), and each host of
the job (a node) holds the slice's chips a host (``gpus``)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from meshctl.model.accelerators import AcceleratorModel, AcceleratorsSpec, chips_of
from meshctl.model.job import AcceleratorOption, JobSpec
from meshctl.problems import Loc

Found = tuple[Loc, str]  # where in the job's spec, and what was expected
ACC: Loc = ("resources", "accelerator")


def options(
    spec: JobSpec, registry: AcceleratorsSpec, known: Mapping[str, str]
) -> tuple[list[AcceleratorOption], list[Found]]:
    """A fungible request's options, fastest model first, or what is wrong with its class;
    none for a request that is not fungible. ``known``: the models the mesh and catalogs
    have, by lower-case name."""
    acc = spec.resources.accelerator
    if acc is None or acc.equivalents is None:
        return [], []
    problems: list[Found] = []
    if acc.any_of:
        models = []
        for k, name in enumerate(acc.any_of):
            found = registry.model(name)
            if found is None:
                continue  # the registry's own check names it
            if found.throughput is None:
                problems.append(((*ACC, "any_of", k), _no_factor(found, registry)))
            models.append(found)
    else:
        models = [
            m
            for m in registry.models
            if m.model.lower() in known and (acc.vendor is None or m.vendor == acc.vendor)
        ]
    rated = [m for m in models if m.throughput is not None]
    if not rated and not problems:
        problems.append(((*ACC, "equivalents"), _no_class(acc.vendor, registry)))
    if problems:
        return [], problems
    per_node = spec.train.workers_per_node if spec.train is not None else 1
    found_options = [
        AcceleratorOption(model=m.model, gpus=_count(acc.equivalents, m, per_node))
        for m in sorted(rated, key=lambda m: (-(m.throughput or 0.0), m.model))
    ]
    return found_options, []


def _count(equivalents: int, model: AcceleratorModel, per_node: int) -> int:
    """Devices of ``model`` worth ``equivalents`` reference devices, in whole workers."""
    assert model.throughput is not None
    devices = math.ceil(equivalents / model.throughput - 1e-9)
    return math.ceil(devices / per_node) * per_node


def _no_factor(model: AcceleratorModel, registry: AcceleratorsSpec) -> str:
    return (
        f"expected models with a throughput factor in the accelerator registry for a fungible"
        f" request (equivalents of {registry.reference}), got {model.model!r}, which has none"
    )


def _no_class(vendor: str | None, registry: AcceleratorsSpec) -> str:
    of = f" of vendor {vendor}" if vendor else ""
    return (
        f"expected a class of models with throughput factors (any_of, or models{of} the mesh"
        f" or catalogs have) for equivalents of {registry.reference}; there is none"
    )


def slices(spec: JobSpec, registry: AcceleratorsSpec) -> list[Found]:
    """What is wrong with a TPU job's slice: a shape its model has not, a worker count that
    is not whole slices, a per-node count that is not the slice's chips a host."""
    acc = spec.resources.accelerator
    if acc is None or acc.topology is None:
        return []
    sliced = [m for m in _asked(spec, registry) if _is_sliced(m, registry)]
    if not sliced:
        return [((*ACC, "topology"), "expected a sliced accelerator (a TPU) for a topology")]
    shaped = [m for m in sliced if acc.topology in m.slices]
    if not shaped:
        shapes = "; ".join(f"{m.model}: {', '.join(m.slices) or 'none'}" for m in sliced)
        said = f"expected a slice shape of the models it may use ({shapes}), got {acc.topology!r}"
        return [((*ACC, "topology"), said)]
    problems: list[Found] = []
    for model in shaped[:1]:  # the first it could run on as this shape: one line a field
        hosts = model.slices[acc.topology]
        slice_of = f"a {acc.topology} {model.model} slice"
        if spec.workers % hosts:
            said = (
                f"expected a worker count that is a multiple of the {hosts} hosts of"
                f" {slice_of}, got {spec.workers}"
            )
            problems.append((("resources", "nodes"), said))
        per_host = chips_of(acc.topology) // hosts
        if spec.resources.gpus != per_host:
            said = f"expected {per_host}, the chips on each host of {slice_of}, got"
            problems.append((("resources", "gpus"), f"{said} {spec.resources.gpus:g}"))
    return problems


def _asked(spec: JobSpec, registry: AcceleratorsSpec) -> list[AcceleratorModel]:
    """The registry's models a job may run on: those it names, else its vendor's."""
    acc = spec.resources.accelerator
    assert acc is not None
    if acc.any_of:
        return [m for m in (registry.model(n) for n in acc.any_of) if m is not None]
    return [m for m in registry.models if acc.vendor is not None and m.vendor == acc.vendor]


def _is_sliced(model: AcceleratorModel, registry: AcceleratorsSpec) -> bool:
    vendor = registry.vendor(model.vendor)
    return vendor is not None and vendor.topology == "slice"
