"""A TCP forwarder with an off switch: put between a client and a server (a Ray dashboard, a
cloud API's emulator), it forwards bytes both ways until cut; cut, it closes its listening
socket and every connection it carries, so the client finds nothing listening (connection
refused), as while the server restarts or the network between is down; mended, it listens on
the same port again.

    with Switch("http://127.0.0.1:8265") as switch:   # switch.address: give it to the client
        switch.cut()        # the server is away
        switch.mend()       # and back
        switch.retarget("http://127.0.0.1:8300")      # the server came back on another port
"""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit

CHUNK = 65536


class Switch:
    def __init__(self, target: str) -> None:
        self.retarget(target)
        self.port = 0
        self.address = ""
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()

    def retarget(self, target: str) -> None:
        """Forward new connections to ``target`` (a URL or host:port) from now on."""
        url = urlsplit(target if "//" in target else f"tcp://{target}")
        self.target = (url.hostname or "127.0.0.1", int(url.port or 80))

    def __enter__(self) -> Switch:
        self._listen()
        self.address = f"http://127.0.0.1:{self.port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.cut()

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            carried, self._open = self._open, set()
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for sock in carried:
            _close(sock)

    def mend(self) -> None:
        if self._listener is None:
            self._listen()

    def _listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self.port = listener.getsockname()[1]
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                server = socket.create_connection(self.target, timeout=10)
                server.settimeout(None)
            except OSError:
                _close(client)  # the server itself is down: so is the connection
                continue
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    _close(client)
                    _close(server)
                    return
                self._open |= {client, server}
            for one, other in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(one, other), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(CHUNK):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open -= {source, sink}
            _close(source)
            _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
