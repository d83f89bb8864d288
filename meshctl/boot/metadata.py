"""What an instance learns about itself from its cloud's metadata service: its id, zone,
region (or project) and private address; on GCP also an access token for its service
account. AWS is IMDSv2 (a session token first); GCE needs ``Metadata-Flavor: Google``.

The service's address is the cloud's own unless ``MESHCTL_METADATA_URL`` names another: an
emulator running instances on one machine gives each its own."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Literal

DEFAULT = {"aws": "http://169.254.169.254", "gcp": "http://metadata.google.internal"}
WAIT_S = 60.0  # the service may answer only a little after boot


@dataclass(frozen=True, slots=True)
class Identity:
    instance_id: str
    zone: str
    region: str  # AWS: the region; GCP: the zone's region
    address: str  # the private address other nodes reach it at
    project: str = ""  # GCP


class Metadata:
    def __init__(self, provider: Literal["aws", "gcp"], base_url: str | None = None) -> None:
        self.provider = provider
        self.base = base_url or os.environ.get("MESHCTL_METADATA_URL") or DEFAULT[provider]
        self.base = self.base.rstrip("/")

    def identity(self) -> Identity:
        if self.provider == "aws":
            aws = {"X-aws-ec2-metadata-token": self._aws_token()}
            got = [
                self._get(f"/latest/meta-data/{path}", aws)
                for path in ("instance-id", "placement/availability-zone", "placement/region",
                             "local-ipv4")
            ]  # fmt: skip
            return Identity(*got)
        google = {"Metadata-Flavor": "Google"}
        zone = self._get("/computeMetadata/v1/instance/zone", google).rsplit("/", 1)[-1]
        return Identity(
            instance_id=f"{zone}/{self._get('/computeMetadata/v1/instance/name', google)}",
            zone=zone,
            region=zone.rsplit("-", 1)[0],
            address=self._get("/computeMetadata/v1/instance/network-interfaces/0/ip", google),
            project=self._get("/computeMetadata/v1/project/project-id", google),
        )

    def access_token(self) -> str:
        """GCP: an OAuth token of the instance's service account."""
        path = "/computeMetadata/v1/instance/service-accounts/default/token"
        return str(json.loads(self._get(path, {"Metadata-Flavor": "Google"}))["access_token"])

    def _aws_token(self) -> str:
        ttl = {"X-aws-ec2-metadata-token-ttl-seconds": "300"}
        return self._get("/latest/api/token", ttl, method="PUT")

    def _get(self, path: str, headers: dict[str, str], method: str = "GET") -> str:
        deadline = time.monotonic() + WAIT_S
        while True:
            request = urllib.request.Request(self.base + path, headers=headers, method=method)
            try:
                with urllib.request.urlopen(request, timeout=5) as reply:
                    return str(reply.read().decode())
            except urllib.error.HTTPError:
                raise  # it answered: no
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
