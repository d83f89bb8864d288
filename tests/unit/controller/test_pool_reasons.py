"""Why a Ray pool cannot be used, as its client words it: the controller's observation and the
one-off check (``meshctl pools check``, ``up``) say the same thing, whatever went wrong. The
cluster here is a small HTTP server on this machine answering one status to everything."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from meshctl.pools.ray import RayPoolClient

pytestmark = pytest.mark.unit


class Answer(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:  # the name http.server calls
        self.send_response(self.status)
        self.end_headers()

    def log_message(self, *_: object) -> None:  # quiet
        pass


@pytest.fixture
def dashboard(request: pytest.FixtureRequest) -> Iterator[str]:
    """http://127.0.0.1:PORT of a server answering ``request.param`` to every GET."""
    handler = type("Fixed", (Answer,), {"status": request.param})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("dashboard", "why"),
    [
        pytest.param(
            401,
            "{at} refused the token (HTTP 401); check the pool's auth settings",
            id="a refused token",
        ),
        pytest.param(404, "{at}: _NotFound: ", id="not a Ray dashboard: its own error"),
    ],
    indirect=["dashboard"],
)
def test_the_observation_and_the_check_give_one_reason(dashboard: str, why: str) -> None:
    client = RayPoolClient("lab", dashboard, "token", timeout_s=5.0)
    expected = why.format(at=f"dashboard at {dashboard}")
    seen = client.observe()
    assert (seen.reachable, seen.error) == (False, expected)
    assert client.check() == expected
