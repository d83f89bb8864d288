"""The README stays a front page (at most 150 lines; the reference is docs/CLI.md and the
guide docs/GUIDE.md), and the part of its tour that needs no cluster works as written (the
whole tour: tests/integration/test_readme_tour.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import readme_tour
from tests.conftest import ROOT

pytestmark = pytest.mark.unit

MAX_LINES = 150


def test_the_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md: {len(lines)} lines, at most {MAX_LINES}"


def test_the_tour_brings_the_mesh_up_and_down() -> None:
    lines = readme_tour.tour().splitlines()
    assert any(line.startswith(readme_tour.UP) for line in lines)
    assert lines[-1].startswith("meshctl down")


def test_the_tour_before_up_works_as_written(tmp_path: Path) -> None:
    script = readme_tour.before_up(readme_tour.tour())
    done = readme_tour.run(script, tmp_path, tmp_path / "home", timeout_s=120)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "25 passed, 0 failed" in done.stdout  # the scaffold's policy tests
    assert "aws-burst" in done.stdout or "gcp-burst" in done.stdout  # the planned burst
