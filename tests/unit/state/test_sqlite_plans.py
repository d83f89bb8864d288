"""SQLite answers a filter through its column's index, however long the history: a filter of
many values goes in statements short enough for the planner to search the index, never to
scan the table (past about 6,600 values of an ``IN`` list it scans the whole table)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from meshctl.state import AttemptRecord, JobRecord, NodeRecord, SqliteStore
from meshctl.state.kinds import Filter, check_filters
from meshctl.state.sqlite_dialect import _MOST_VALUES

pytestmark = pytest.mark.unit


class Tracing(SqliteStore):
    """A store that keeps the query plan of each select it runs."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.plans: list[str] = []

    def _select(self, kind, where, params, only=None):  # type: ignore[no-untyped-def]
        table = {AttemptRecord: "attempts", JobRecord: "jobs", NodeRecord: "nodes"}[kind]
        plan = f"EXPLAIN QUERY PLAN SELECT * FROM {table} {where}"
        found = self._dialect.run(lambda conn: conn.execute(plan, params).fetchall(), write=False)
        self.plans.append(" ".join(str(row[-1]) for row in found))
        return super()._select(kind, where, params, only)


@pytest.mark.parametrize(
    ("kind", "filters", "index"),
    [
        pytest.param(
            AttemptRecord,
            {"job_id": [f"j{i}" for i in range(20_000)]},
            "attempts_job_id",
            id="attempts of many jobs",
        ),
        pytest.param(
            JobRecord,
            {"id": [f"j{i}" for i in range(20_000)]},
            "sqlite_autoindex_jobs_1",
            id="many jobs by key",
        ),
        pytest.param(JobRecord, {"state": ["pending", "running"]}, "jobs_state", id="by state"),
        pytest.param(JobRecord, {"name": "train-007"}, "jobs_name", id="by name"),
    ],
)
def test_a_filter_of_many_values_searches_its_index(
    tmp_path: Path, kind: type[JobRecord] | type[AttemptRecord], filters: dict[str, Filter],
    index: str,
) -> None:  # fmt: skip
    store = Tracing(tmp_path / "state.db")
    check_filters(kind, filters)
    store.versions(kind, **filters)
    store.list(kind, **filters)
    assert store.plans
    for plan in store.plans:
        assert f"SEARCH {'attempts' if kind is AttemptRecord else 'jobs'} USING" in plan, plan
        assert index in plan, plan


def test_the_statements_stay_under_where_the_planner_turns_to_a_scan(tmp_path: Path) -> None:
    SqliteStore(tmp_path / "state.db").close()
    with sqlite3.connect(tmp_path / "state.db") as conn:
        marks = ", ".join("?" for _ in range(_MOST_VALUES))
        sql = f"SELECT id FROM attempts WHERE job_id IN ({marks}) ORDER BY id LIMIT -1"
        plan = conn.execute(f"EXPLAIN QUERY PLAN {sql}", ["j"] * _MOST_VALUES).fetchall()
    assert "USING INDEX attempts_job_id" in str(plan)
