"""moto_server on a free loopback port, with a small proxy in front that injects the faults
moto cannot: a stock-out (``InsufficientInstanceCapacity``) or a quota error in one zone,
credentials EC2 refuses (``AuthFailure``, HTTP 401, for requests signed with a given access key
id: moto itself accepts any), and the two-minute spot interruption notice (moto keeps no spot
request for a spot instance launched by RunInstances, so the proxy answers
``DescribeSpotInstanceRequests`` itself, with the noticed instances' requests
``marked-for-termination``).

    with MotoServer() as aws:          # aws.endpoint is the proxy, for boto3's endpoint_url
        aws.stock_out("us-east-1a")
        aws.spot_notice("i-0123")
        aws.refuse("AKIDREFUSED")     # requests signed with this key id: AuthFailure
        aws.throttle()                 # every EC2 call: RequestLimitExceeded (HTTP 503)

It also answers Service Quotas' ``GetServiceQuota`` for the EC2 vCPU quotas a test sets
(``aws.set_quota("L-DB2E81BA", 64)``): moto serves VPC quotas only. A quota not set goes to
moto, which answers ``NoSuchResourceException`` as it does for any EC2 quota.

Everything else goes to the real moto_server unchanged. The injected error is EC2's XML error
document with HTTP 400 (real EC2 answers a stock-out with a 5xx that botocore first retries;
400 keeps the tests fast and the error the same).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from meshctl.host.ports import free_port

ERROR = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
    "<Message>{message}</Message></Error></Errors><RequestID>meshctl-test</RequestID></Response>"
)
SPOT_REQUESTS = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<DescribeSpotInstanceRequestsResponse '
    'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>meshctl-test</requestId>'
    "<spotInstanceRequestSet>{items}</spotInstanceRequestSet></DescribeSpotInstanceRequestsResponse>"
)
SPOT_REQUEST = (
    "<item><spotInstanceRequestId>sir-{n:08d}</spotInstanceRequestId><state>active</state>"
    "<status><code>marked-for-termination</code><message>Your Spot Instance has been marked for "
    "termination because of no Spot capacity available.</message></status>"
    "<instanceId>{instance}</instanceId><type>one-time</type></item>"
)
AUTH_FAILURE = "AWS was not able to validate the provided access credentials"
THROTTLED = "Request limit exceeded."
SIGNED_BY = re.compile(r"Credential=([^/,\s]+)/")


class MotoServer:
    def __init__(self) -> None:
        self.port = free_port()
        self.moto = f"http://127.0.0.1:{self.port}"
        self.faults: dict[str, tuple[str, str]] = {}  # zone -> (code, message)
        self.noticed: list[str] = []  # spot instances given their interruption notice
        self.refused: set[str] = set()  # access key ids whose requests EC2 refuses
        self.quotas: dict[str, float] = {}  # EC2 quota code -> value (vCPUs)
        self.throttling = False  # every EC2 call answered RequestLimitExceeded
        self.s3_reads: list[tuple[str, int]] = []  # S3 objects read: (path, bytes sent)
        self.proc: subprocess.Popen[bytes] | None = None
        self.proxy: ThreadingHTTPServer | None = None
        self.endpoint = ""

    def stock_out(self, zone: str) -> None:
        self.faults[zone] = (
            "InsufficientInstanceCapacity",
            f"We currently do not have sufficient capacity in the Availability Zone ({zone}).",
        )

    def over_quota(self, zone: str) -> None:
        self.faults[zone] = (
            "VcpuLimitExceeded",
            "You have requested more vCPU capacity than your current vCPU limit allows.",
        )

    def spot_notice(self, instance_id: str) -> None:
        """AWS gives the spot instance its two-minute notice (it keeps running)."""
        self.noticed.append(instance_id)

    def refuse(self, access_key_id: str) -> None:
        """Requests signed with this access key id are refused as EC2 refuses unknown or
        revoked credentials: HTTP 401, ``AuthFailure``."""
        self.refused.add(access_key_id)

    def throttle(self, on: bool = True) -> None:
        """Every EC2 call is answered as EC2 answers a caller over its request rate (HTTP 503,
        ``RequestLimitExceeded``) until called with ``False``."""
        self.throttling = on

    def set_quota(self, code: str, value: float) -> None:
        """Service Quotas answers this EC2 quota (a vCPU count) from now on."""
        self.quotas[code] = value

    def quota(self, body: bytes) -> bytes | None:
        """The answer to GetServiceQuota for an EC2 quota set here; None: ask moto."""
        asked = json.loads(body or b"{}")
        code = asked.get("QuotaCode", "")
        if asked.get("ServiceCode") != "ec2" or code not in self.quotas:
            return None
        quota = {"ServiceCode": "ec2", "QuotaCode": code, "QuotaName": code,
                 "Value": self.quotas[code], "Unit": "None", "Adjustable": True}  # fmt: skip
        return json.dumps({"Quota": quota}).encode()

    def start(self) -> MotoServer:
        moto_server = str(Path(sys.executable).with_name("moto_server"))
        self.proc = subprocess.Popen(
            [moto_server, "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(self.moto + "/moto-api/", timeout=1)
                break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.1)
        self.proxy = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        threading.Thread(target=self.proxy.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.proxy.server_address[1]}"
        return self

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.shutdown()
            self.proxy.server_close()
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def spot_requests(self, form: dict[str, list[str]]) -> str:
        """The answer to DescribeSpotInstanceRequests: the noticed instances, narrowed by an
        ``instance-id`` filter when there is one."""
        wanted: set[str] | None = None
        for key, values in form.items():
            if key.startswith("Filter.") and key.endswith(".Name") and values == ["instance-id"]:
                prefix = key.removesuffix("Name") + "Value."
                wanted = {v for k, vs in form.items() if k.startswith(prefix) for v in vs}
        items = "".join(
            SPOT_REQUEST.format(n=n, instance=instance)
            for n, instance in enumerate(self.noticed)
            if wanted is None or instance in wanted
        )
        return SPOT_REQUESTS.format(items=items)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Forward(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._forward(b"")

            def do_HEAD(self) -> None:
                self._forward(b"")

            def do_PUT(self) -> None:
                self._forward(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

            def do_DELETE(self) -> None:
                self._forward(b"")

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                signed = SIGNED_BY.search(self.headers.get("Authorization", ""))
                if signed and signed.group(1) in server.refused:
                    error = ERROR.format(code="AuthFailure", message=AUTH_FAILURE)
                    self._send(401, error.encode())
                    return
                if server.throttling and b"Action=" in body:  # EC2's query API; not S3
                    self._send(503, ERROR.format(code="RequestLimitExceeded",
                                                 message=THROTTLED).encode())  # fmt: skip
                    return
                target = self.headers.get("X-Amz-Target", "")
                if target.endswith(".GetServiceQuota") and (answer := server.quota(body)):
                    self._send(200, answer, "application/x-amz-json-1.1")
                    return
                form = urllib.parse.parse_qs(body.decode(errors="replace"))
                if form.get("Action") == ["RunInstances"]:
                    zone = (form.get("Placement.AvailabilityZone") or [""])[0]
                    if zone in server.faults:
                        code, message = server.faults[zone]
                        self._send(400, ERROR.format(code=code, message=message).encode())
                        return
                if form.get("Action") == ["DescribeSpotInstanceRequests"]:
                    self._send(200, server.spot_requests(form).encode())
                    return
                self._forward(body)

            def _forward(self, body: bytes) -> None:
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                request = urllib.request.Request(
                    server.moto + self.path, data=body or None, headers=headers, method=self.command
                )
                try:
                    with urllib.request.urlopen(request, timeout=30) as reply:
                        payload = reply.read()
                        if self.command == "GET" and _s3_object(self.path):
                            server.s3_reads.append((self.path, len(payload)))
                        kept = {k.title(): v for k, v in reply.headers.items() if k.lower() in KEPT}
                        ctype = reply.headers.get("Content-Type")
                        self._send(reply.status, payload, ctype, kept)
                except urllib.error.HTTPError as err:
                    self._send(err.code, err.read(), err.headers.get("Content-Type"))

            def _send(
                self,
                status: int,
                payload: bytes,
                ctype: str | None = "text/xml",
                headers: dict[str, str] | None = None,
            ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype or "text/xml")
                headers = dict(headers or {})
                length = headers.pop("Content-Length", None) if self.command == "HEAD" else None
                headers.pop("Content-Length", None)
                self.send_header("Content-Length", length or str(len(payload)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

        return Forward


# what an S3 client reads from the answer's headers (a HEAD's size, an object's version)
KEPT = {"content-length", "etag", "last-modified", "content-range", "accept-ranges"}


def _s3_object(path: str) -> bool:
    """Whether a GET reads an S3 object (path-style ``/bucket/key``, no listing query)."""
    bare, _, query = path.partition("?")
    return bare.count("/") >= 2 and not bare.endswith("/") and "list-type" not in query
