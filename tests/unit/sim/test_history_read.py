"""Reading a history's job files (``policydiff.read_history``): each content is read once, and
files alike share the one ``Job``; a file this meshctl cannot read is None, as before."""

from __future__ import annotations

import pytest

from meshctl.app.policydiff import _Reader

pytestmark = pytest.mark.unit


def _file(name: str, gpus: int) -> dict[str, object]:
    spec = {"kind": "batch", "entrypoint": "python x.py", "team": "t", "resources": {"gpus": gpus}}
    return {"apiVersion": "meshctl/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def test_files_alike_share_one_job_and_others_do_not() -> None:
    read = _Reader()
    first = read(_file("a", 2))
    reordered = dict(reversed(list(_file("a", 2).items())))  # the same JSON, keys reordered
    assert first is not None
    assert read(reordered) is first
    other = read(_file("a", 4))
    assert other is not None
    assert other is not first
    assert other.spec.resources.gpus == 4


def test_a_file_it_cannot_read_is_none_every_time() -> None:
    read = _Reader()
    broken = {"apiVersion": "meshctl/v1", "kind": "Job", "spec": {"no": "such field"}}
    assert read(broken) is None
    assert read(dict(broken)) is None
