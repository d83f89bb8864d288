"""The cloud emulators, one of each per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.emulators.aws import MotoServer
from tests.emulators.gce import GceEmulator


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    """moto_server behind the fault-injecting proxy; ``moto.endpoint`` for boto3."""
    with MotoServer() as server:
        yield server


@pytest.fixture(scope="module")
def gce() -> Iterator[GceEmulator]:
    with GceEmulator() as server:
        yield server
