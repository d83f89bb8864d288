"""The scaffold's jobs read data the node caches can read: ``meshctl init`` ships the
``serve-pii`` job's tickets and writes their folder's absolute path into the job (it was
``onprem:/data/tickets``, a location no node cache reads, so every prefetch failed)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from meshctl.cli.app import app
from meshctl.data.cache import NodeCache
from meshctl.data.check import checkable
from meshctl.files.shipped import data_dir

pytestmark = pytest.mark.unit


def test_the_scaffolds_data_validates_passes_its_check_and_is_cached(
    cli: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "my mesh: #1"  # a path YAML would misread unquoted
    assert cli.invoke(app, ["init", str(target)]).exit_code == 0
    monkeypatch.chdir(target)
    checked = cli.invoke(app, ["validate", "."])
    assert checked.exit_code == 0, checked.output
    submitted = cli.invoke(app, ["submit", "jobs/serve-pii.yaml", "--dry-run"])
    assert submitted.exit_code == 0, submitted.output
    jobs = [yaml.safe_load(p.read_text()) for p in sorted(target.glob("jobs/*.yaml"))]
    locations = [d["location"] for job in jobs for d in job["spec"].get("data", [])]
    tickets = str(target / "data" / "tickets")
    assert locations == ["s3://corpus/web-v3", tickets]  # batch-embed's: a bucket of yours
    assert all(checkable(location) for location in locations)

    cache = NodeCache(tmp_path / "cache", 2**20, "token")
    entry = cache.ensure(tickets)
    assert (entry.complete, entry.fetched_from) == (True, "source")
    shipped = data_dir("examples").joinpath("data", "tickets", "tickets.jsonl").read_bytes()
    assert (cache.path_for(tickets) / "tickets.jsonl").read_bytes() == shipped
