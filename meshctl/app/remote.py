"""The client's side of an API: which API server to talk to, and talking to it; and the
home's local API, served beside a running controller (``LocalApi``, ``meshctl.server.local``).

``MESHCTL_SERVER`` and ``MESHCTL_TOKEN`` name the server and the token; else what ``meshctl
login`` saved in ``$MESHCTL_HOME/credentials.json`` (0600). With neither, every command works
locally, on the state store in the home, as it always has. ``MESHCTL_CA_FILE``: the
certificate authority of a server whose certificate is not signed by a public one.

The server's answers are the CLI's own ``-o json`` shapes, so a remote command renders them as
a local one does. A 4xx answer is the request's fault: its one line, exit 2; a server that is
down or fails is exit 1. A request that changes something (``post``: ``meshctl submit``) goes
over ``http.client`` and gets its warnings back too (``Warning`` headers). The standard library
only, imported lazily where it is heavy: ``meshctl submit``'s client imports this module.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from meshctl.errors import CommandError, InvalidRequestError, MeshctlError

if TYPE_CHECKING:
    import http.client
    import ssl
    import urllib.error

CREDENTIALS = "credentials.json"
TIMEOUT_S = 60.0


class Remote(NamedTuple):  # not a dataclass (nor the two below): the submit client imports them
    """An API server and the token to call it with."""

    url: str
    token: str

    def call(
        self, method: str, path: str, body: Any = None, timeout_s: float = TIMEOUT_S, **query: Any
    ) -> Any:
        """The JSON answer of ``method path``; errors as exit 2 (4xx) or exit 1."""
        import urllib.error
        import urllib.request

        params = {k: v for k, v in query.items() if v is not None}
        url = self.url.rstrip("/") + path + (f"?{urllib.parse.urlencode(params)}" if params else "")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s, context=_tls()) as answer:
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as err:
            raise _refusal(self.url, err) from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            if data is not None and isinstance(reason, BrokenPipeError | ConnectionResetError):
                raise CommandError(
                    f"server {self.url}: it closed the connection while the request "
                    f"({len(data) / 2**20:.1f} MiB) was sent: over its --max-upload?"
                ) from None
            raise CommandError(f"server {self.url}: cannot reach it: {reason}") from None

    def post(self, path: str, body: Any, timeout_s: float = TIMEOUT_S) -> Answered:
        """``POST path`` with a JSON body over ``http.client``: the answer and its warnings
        (``Warning`` headers); errors as ``call``'s."""
        import http.client

        parsed = urllib.parse.urlparse(self.url)
        connection = (
            http.client.HTTPSConnection(parsed.netloc, timeout=timeout_s, context=_tls())
            if parsed.scheme == "https"
            else http.client.HTTPConnection(parsed.netloc, timeout=timeout_s)
        )
        data = json.dumps(body).encode()
        try:
            status, said, warned = exchange(connection, path, data, self.token)
        except OSError as err:
            if isinstance(err, BrokenPipeError | ConnectionResetError):
                raise CommandError(
                    f"server {self.url}: it closed the connection while the request "
                    f"({len(data) / 2**20:.1f} MiB) was sent: over its --max-upload?"
                ) from None
            raise CommandError(f"server {self.url}: cannot reach it: {err}") from None
        if status >= 400:
            raise refused(status, said, f"server {self.url}")
        return Answered(said, warned)


class Answered(NamedTuple):
    """An API's answer to a request that changes something: its document and its warnings."""

    document: Any
    warnings: list[str]


API_SOCKET = "api.sock"  # in the home's run folder (``controller/rundir.py``)
_SUN_PATH = 100  # AF_UNIX paths are at most 107 bytes: longer ones go through /proc


def api_socket(home: Path) -> Path:
    """Where the home serves its local API while its controller runs (``server/local.py``)."""
    return home / "run" / API_SOCKET


@contextlib.contextmanager
def reachable(path: Path) -> Iterator[str]:
    """A name for ``path`` that ``bind`` and ``connect`` take: the path itself, or for one
    too long for a socket address, the same file through an open descriptor of its folder."""
    if len(os.fsencode(path)) < _SUN_PATH:
        yield str(path)
        return
    folder = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{folder}/{path.name}"
    finally:
        os.close(folder)


class LocalApi(NamedTuple):
    """The home's local API (``meshctl.server.local``): the API server's routes on a Unix
    socket in the home's run folder, private to its owner, who is known by the socket's peer
    credentials (no token)."""

    socket: Path

    def post(self, path: str, body: Any, timeout_s: float = TIMEOUT_S) -> Answered | None:
        """``POST path``: the answer, or None when nothing listens on the socket (no
        controller runs, or one was killed and left it); errors as a local command's."""
        return self._ask("POST", path, json.dumps(body).encode(), timeout_s)

    def get(self, path: str, timeout_s: float = TIMEOUT_S, **query: Any) -> Answered | None:
        """``GET path?query``: the answer, or None when nothing listens on the socket (as
        ``post``); errors as ``post``'s."""
        params = {k: v for k, v in query.items() if v is not None}
        target = path + (f"?{urllib.parse.urlencode(params)}" if params else "")
        return self._ask("GET", target, None, timeout_s)

    def _ask(self, method: str, path: str, data: bytes | None, timeout_s: float) -> Answered | None:
        if not self.socket.exists():
            return None
        connection = _unix_connection(self.socket, timeout_s)
        try:
            connection.connect()
        except OSError:
            return None
        try:
            status, said, warned = exchange(connection, path, data, None, method)
        except OSError as err:
            raise CommandError(f"local API {self.socket}: {err}") from None
        finally:
            connection.close()
        if status >= 400:
            raise refused(
                status, said, None if status in (422, 503) else f"local API {self.socket}"
            )
        return Answered(said, warned)


def _unix_connection(path: Path, timeout_s: float) -> http.client.HTTPConnection:
    import http.client
    import socket

    class Connection(http.client.HTTPConnection):
        def connect(self) -> None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout_s)
            try:
                with reachable(path) as address:
                    sock.connect(address)
            except OSError:
                sock.close()
                raise
            self.sock = sock

    return Connection("localhost", timeout=timeout_s)


def exchange(
    connection: http.client.HTTPConnection,
    path: str,
    data: bytes | None,
    token: str | None,
    method: str = "POST",
) -> tuple[int, Any, list[str]]:
    """Send ``data`` (JSON; None: no body) to ``path``: the answer's status, document and
    warnings."""
    headers = {"Accept": "application/json"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    connection.request(method, path, data, headers)
    answer = connection.getresponse()
    raw = answer.read()
    try:
        said = json.loads(raw or b"null")
    except ValueError:
        said = {"error": raw.decode(errors="replace").strip() or answer.reason}
    return answer.status, said, [read_warning(v) for v in answer.headers.get_all("Warning") or []]


def refused(status: int, said: Any, where: str | None) -> MeshctlError:
    """The error an API's refusal is: a job file's problems (each with its file and line); a
    4xx is the request's fault (exit 2); else the API failed (exit 1). ``where``: the API, said
    first (None: the message alone, as the command run in process says it)."""
    from meshctl.problems import InvalidFileError, Problem

    said = said if isinstance(said, dict) else {}
    message = str(said.get("error") or f"HTTP {status}")
    problems = said.get("problems")
    if status == 422 and isinstance(problems, list) and problems:
        return InvalidFileError([Problem(p["file"], p["line"], p["field"] or "", p["message"])
                                 for p in problems])  # fmt: skip
    if status == 401 and where is not None:
        return InvalidRequestError(f"{where}: {message}")
    if 400 <= status < 500:
        return InvalidRequestError(message)
    return CommandError(message if where is None else f"{where}: HTTP {status}: {message}")


def warning_header(line: str) -> str:
    """A warning as an HTTP ``Warning`` header's value: ``299 - "text"``, the text a JSON
    string (ASCII: a header holds no other)."""
    return f"299 - {json.dumps(line)}"


def read_warning(value: str) -> str:
    """The text of a ``Warning`` header's value (``warning_header``); another server's
    value as it is."""
    quoted = value.split(" ", 2)[-1]
    try:
        found = json.loads(quoted)
    except ValueError:
        return value
    return found if isinstance(found, str) else value


def job_path(ref: str, *rest: str) -> str:
    """``/v1/jobs/REF[/REST...]``, the reference quoted whole (an id, a name, a prefix)."""
    return resource_path("jobs", ref, *rest)


def resource_path(collection: str, ref: str, *rest: str) -> str:
    """``/v1/COLLECTION/REF[/REST...]``, the reference quoted whole."""
    return "/".join([f"/v1/{collection}", urllib.parse.quote(ref, safe=""), *rest])


def _tls() -> ssl.SSLContext | None:
    import ssl

    cafile = os.environ.get("MESHCTL_CA_FILE")
    return ssl.create_default_context(cafile=cafile) if cafile else None


def _refusal(url: str, err: urllib.error.HTTPError) -> Exception:
    try:
        said = json.loads(err.read()).get("error") or err.reason
    except (ValueError, AttributeError, OSError):
        said = err.reason
    if err.code == 401:
        return InvalidRequestError(f"server {url}: {said}")
    if 400 <= err.code < 500:
        return InvalidRequestError(f"{said}")
    return CommandError(f"server {url}: HTTP {err.code}: {said}")


def remote(home: Path) -> Remote | None:
    """The server this CLI talks to, or None: local."""
    url, token = os.environ.get("MESHCTL_SERVER", ""), os.environ.get("MESHCTL_TOKEN", "")
    if url or token:
        if not (url and token):
            missing = "MESHCTL_TOKEN" if url else "MESHCTL_SERVER"
            raise InvalidRequestError(f"{missing}: set it too, or unset both to work locally")
        return Remote(_checked_url("MESHCTL_SERVER", url), token)
    saved = home / CREDENTIALS
    try:
        raw = json.loads(saved.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise InvalidRequestError(f"{saved}: unreadable ({err}); meshctl login again") from None
    if not isinstance(raw, dict) or not raw.get("server") or not raw.get("token"):
        raise InvalidRequestError(f"{saved}: expected server and token; meshctl login again")
    return Remote(str(raw["server"]), str(raw["token"]))


def _checked_url(field: str, url: str) -> str:
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise InvalidRequestError(f"{field}: expected http(s)://HOST:PORT, got {url!r}")
    return url.rstrip("/")


def login(home: Path, url: str, token: str) -> dict[str, Any]:
    """Check the token against the server, then save both (0600); who the token is."""
    from meshctl.state.private import private_home, write_private

    found = Remote(_checked_url("URL", url), token)
    who: dict[str, Any] = found.call("GET", "/v1/whoami")
    private_home(home)
    write_private(home / CREDENTIALS, json.dumps({"server": found.url, "token": token}))
    return who


def logout(home: Path) -> bool:
    """Forget the saved server and token; whether there were any."""
    try:
        (home / CREDENTIALS).unlink()
    except FileNotFoundError:
        return False
    return True


def pack(folder: Path, ignored: Sequence[str], left_out: Sequence[Path] = ()) -> str:
    """A folder as the body's ``working_dir``: base64 of a gzipped tar of its contents, less
    what matches ``ignored`` (the patterns a local submission leaves out too) and the folders
    ``left_out`` (``packing.archive``)."""
    from meshctl.host.packing import archive

    return base64.b64encode(archive(folder, ignored, left_out)).decode()
