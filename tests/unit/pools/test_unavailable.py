"""Which errors of a Ray pool say it cannot take a request now (the job waits) and which
refuse the request itself (counted: five fail the job)."""

from __future__ import annotations

import pytest
import requests

from meshctl.pools.ray import PoolError, PoolUnavailable, unavailable

pytestmark = pytest.mark.unit

NOW: dict[str, BaseException] = {
    "no job agent yet": RuntimeError(
        "Request failed with status code 500: No available agent to submit job, please try "
        "again later."
    ),
    "a gateway error": RuntimeError("Request failed with status code 502: Bad Gateway"),
    "connection refused": requests.exceptions.ConnectionError("Connection refused"),
    "a read timeout": requests.exceptions.ReadTimeout("timed out"),
    "a socket timeout": TimeoutError("timed out"),
    "no answer within the deadline": PoolUnavailable("onprem: no answer within 60 s"),
}
REFUSED: dict[str, BaseException] = {
    "an invalid runtime_env": RuntimeError(
        "Request failed with status code 400: runtime_env is invalid"
    ),
    "a rejected token": RuntimeError("Request failed with status code 401: Unauthorized"),
    "a submission id taken": RuntimeError(
        "Request failed with status code 400: Job with submission_id x already exists."
    ),
    "a pool error": PoolError("dashboard at http://x refused the token (HTTP 401)"),
    "an error in meshctl": ValueError("bad value"),
}


@pytest.mark.parametrize("err", NOW.values(), ids=NOW.keys())
def test_the_pool_cannot_take_it_now(err: BaseException) -> None:
    assert unavailable(err)


@pytest.mark.parametrize("err", REFUSED.values(), ids=REFUSED.keys())
def test_the_request_is_refused(err: BaseException) -> None:
    assert not unavailable(err)
