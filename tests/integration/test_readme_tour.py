"""The README's one-minute tour, run as written from its first line to its last (``init``
to ``down``) with the installed meshctl: the commands it shows work, on a mesh of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import readme_tour

pytestmark = pytest.mark.integration

TOUR_TIMEOUT_S = 420  # a local Ray cluster on a loaded 2-core machine, then a job


def test_the_readme_tour_works_as_written(tmp_path: Path) -> None:
    home = tmp_path / "home"  # a folder without a `ray` directory: Ray starts from here
    try:
        done = readme_tour.run(readme_tour.tour(), tmp_path, home, TOUR_TIMEOUT_S)
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
        assert "hello from the mesh" in done.stdout
        assert "onprem/gpu-rack1: unhealthy (GPU XID 79)" in done.stdout
        assert "onprem/gpu-rack1: healthy" in done.stdout
    finally:  # what a failed line left up: only what this tour's `up` started
        readme_tour.run("meshctl down --force", tmp_path, home, TOUR_TIMEOUT_S)
