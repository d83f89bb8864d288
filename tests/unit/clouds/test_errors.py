"""A cloud API that does not answer, or answers a server error, is ``unavailable``: a
transient fault, whatever the request. The launches of its (pool, node type) wait briefly
(``TRANSIENT_S``), as after throttling, not the twenty minutes a refused request waits."""

from __future__ import annotations

import pytest

from meshctl.clouds.aws import AwsCloud
from meshctl.clouds.base import BACKOFF_S, TRANSIENT_S, backoff_s
from meshctl.clouds.gcp import _error as gcp_error

pytestmark = pytest.mark.unit


def _client_error(code: str, status: int) -> Exception:
    from botocore.exceptions import ClientError

    body = {
        "Error": {"Code": code, "Message": code},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(body, "RunInstances")  # type: ignore[arg-type]


def _aws_cases() -> list[tuple[Exception, str]]:
    from botocore.exceptions import (
        ConnectTimeoutError,
        EndpointConnectionError,
        ReadTimeoutError,
    )

    return [
        (
            EndpointConnectionError(endpoint_url="https://ec2.us-east-1.amazonaws.com/"),
            "unavailable",
        ),
        (ConnectTimeoutError(endpoint_url="https://ec2.us-east-1.amazonaws.com/"), "unavailable"),
        (ReadTimeoutError(endpoint_url="https://ec2.us-east-1.amazonaws.com/"), "unavailable"),
        (_client_error("InternalError", 500), "unavailable"),
        (_client_error("Unavailable", 503), "unavailable"),
        (_client_error("SomethingNew", 502), "unavailable"),  # a 5xx whatever its code
        (_client_error("RequestLimitExceeded", 503), "throttled"),
        (_client_error("InsufficientInstanceCapacity", 500), "capacity"),
        (_client_error("AuthFailure", 401), "auth"),
        (_client_error("InvalidAMIID.NotFound", 400), "invalid"),
        (_client_error("SomethingNew", 400), "other"),
    ]


@pytest.mark.parametrize(
    "case",
    range(11),
    ids=["no connection", "connect timeout", "read timeout", "InternalError", "Unavailable",
         "another 5xx", "throttled (503)", "capacity (500)", "auth", "invalid", "other 4xx"],
)  # fmt: skip
def test_aws_errors_say_what_kind_of_fault_they_are(case: int) -> None:
    err, kind = _aws_cases()[case]
    assert AwsCloud._error(err, "us-east-1a").kind == kind


def _gcp_cases() -> list[tuple[Exception, str]]:
    import requests
    from google.api_core import exceptions
    from google.auth.exceptions import TransportError

    return [
        (exceptions.ServiceUnavailable("backend unavailable"), "unavailable"),
        (exceptions.InternalServerError("internal error"), "unavailable"),
        (exceptions.GatewayTimeout("deadline"), "unavailable"),
        (requests.ConnectionError("Connection refused"), "unavailable"),
        (requests.Timeout("read timed out"), "unavailable"),
        (TransportError("token endpoint unreachable"), "unavailable"),
        (exceptions.TooManyRequests("rateLimitExceeded"), "throttled"),
        (exceptions.BadRequest("bad machine type"), "invalid"),
    ]


@pytest.mark.parametrize(
    "case",
    range(8),
    ids=["503", "500", "504", "no connection", "timeout", "token refresh unreachable",
         "throttled", "invalid"],
)  # fmt: skip
def test_gcp_errors_say_what_kind_of_fault_they_are(case: int) -> None:
    err, kind = _gcp_cases()[case]
    assert gcp_error(err, "us-central1-a").kind == kind


@pytest.mark.parametrize(
    ("kinds", "wait_s"),
    [
        ({"unavailable"}, TRANSIENT_S),
        ({"capacity"}, BACKOFF_S),
        ({"capacity", "unavailable"}, BACKOFF_S),  # one zone out of stock, the next silent
        ({"throttled"}, TRANSIENT_S),  # over the request rate: slow down, not stop
        ({"throttled", "unavailable"}, TRANSIENT_S),
        ({"throttled", "capacity"}, BACKOFF_S),
        ({"invalid"}, 4 * BACKOFF_S),
        ({"unavailable", "other"}, 4 * BACKOFF_S),
    ],
    ids=["the API did not answer", "a stock-out", "a stock-out, then no answer", "throttled",
         "throttled, then no answer", "throttled, then a stock-out", "a refused request",
         "no answer and a refusal"],
)  # fmt: skip
def test_a_launch_that_found_the_api_away_is_tried_again_soon(
    kinds: set[str], wait_s: float
) -> None:
    assert backoff_s(kinds) == wait_s
