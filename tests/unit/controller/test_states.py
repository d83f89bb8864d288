"""The job-state table is the rule: controller/README.md shows exactly ``TRANSITIONS``, every
transition the controller makes in the differential scenarios is one the table allows, and
the loop says so when one is not."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from meshctl.controller.states import ALLOWED, TRANSITIONS
from meshctl.differential import run
from meshctl.differential.table import TABLE
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


@pytest.mark.parametrize("scenario", TABLE, ids=[s.name for s in TABLE])
def test_every_transition_the_controller_makes_is_in_the_table(scenario, caplog) -> None:
    with caplog.at_level(logging.ERROR, logger="meshctl.controller"):
        run(scenario)
    refused = [r.getMessage() for r in caplog.records if "job-state table" in r.getMessage()]
    assert refused == []
