"""Another node's agent as a source of a cached dataset: its manifest of an entry, and the
entry's files, over HTTP with the cluster's token (``meshctl.agent.server`` serves them)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

DATA_PATH = "/v1/data"  # GET /v1/data/<key>: the manifest; /v1/data/<key>/files/<path>: a file
CHUNK = 8 * 1024 * 1024


class PeerError(Exception):
    """The peer cannot give the entry: it does not hold it, or it stopped answering."""


class Peer:
    def __init__(self, base_url: str, token: str, timeout_s: float = 30.0) -> None:
        """``base_url``: the agent's ``http://host:port``."""
        self.base_url, self.token, self.timeout_s = base_url.rstrip("/"), token, timeout_s

    def _open(self, path: str) -> Any:
        url = self.base_url + urllib.parse.quote(path)
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token}"})
        try:
            return urllib.request.urlopen(request, timeout=self.timeout_s)
        except urllib.error.HTTPError as err:
            raise PeerError(f"{self.base_url}: HTTP {err.code} for {path}") from err
        except (urllib.error.URLError, OSError) as err:
            why = getattr(err, "reason", None) or err
            raise PeerError(f"{self.base_url}: {why}") from err

    def manifest(self, key: str) -> dict[str, Any]:
        """The peer's manifest of a complete entry; PeerError when it holds none."""
        with self._open(f"{DATA_PATH}/{key}") as answer:
            found: dict[str, Any] = json.loads(answer.read())
        if not found.get("complete"):
            raise PeerError(f"{self.base_url}: {key} is not complete there")
        return found

    def read(self, key: str, relative: str) -> Iterator[bytes]:
        try:
            with self._open(f"{DATA_PATH}/{key}/files/{relative}") as answer:
                while chunk := answer.read(CHUNK):
                    yield chunk
        except (OSError, urllib.error.URLError) as err:  # cut off mid-file
            raise PeerError(f"{self.base_url}: {key}/{relative}: {err}") from err
