"""Data that ships with meshctl: provider catalogs, and the examples and policies ``init`` copies.

In a wheel they live inside the package (``meshctl/_data/<name>``, put there by the build, see
pyproject.toml); in a source checkout they are the top-level folders of the same name.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Literal

DataName = Literal["providers", "examples", "policies"]
_CHECKOUT = Path(__file__).resolve().parents[2]  # meshctl/files/shipped.py: the checkout


def data_dir(name: DataName) -> Traversable:
    bundled = resources.files("meshctl").joinpath("_data", name)
    if bundled.is_dir():
        return bundled
    return _CHECKOUT / name
