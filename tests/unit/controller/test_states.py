"""The job-state table is the rule: controller/README.md shows exactly ``TRANSITIONS``, and it
allows what it says. (That every transition the controller makes in the differential
scenarios is one it allows is checked with them: tests/unit/lifecycle/test_differential.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from meshctl.controller.deciding.states import ALLOWED, TRANSITIONS
from meshctl.state.records import JobState

pytestmark = pytest.mark.unit

README = Path(__file__).resolve().parents[3] / "meshctl" / "controller" / "README.md"


def test_the_readme_table_is_the_code_table() -> None:
    text = README.read_text()
    table = text[text.index("| from | to | when |") :].split("\n\n")[0].splitlines()[2:]
    rows = [tuple(cell.strip() for cell in row.strip("|").split(" | ")) for row in table]
    assert rows == list(TRANSITIONS)


def test_the_table_allows_what_it_says() -> None:
    assert (None, JobState.PENDING) in ALLOWED
    assert (JobState.RUNNING, JobState.PREEMPTED) in ALLOWED
    assert (JobState.REQUEUED, JobState.CANCELLED) in ALLOWED  # "any unfinished"
    assert (JobState.SUCCEEDED, JobState.RUNNING) not in ALLOWED
    assert (JobState.PENDING, JobState.RUNNING) not in ALLOWED  # never without admission
