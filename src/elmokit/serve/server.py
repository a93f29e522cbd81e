"""Running the app under uvicorn, with a graceful stop and guards against slow clients.

On SIGTERM or Ctrl-C, uvicorn stops accepting connections and waits for the requests in flight;
the app is told at once (``app.state.stopping``), gives the accepted requests ``shutdown_timeout_s``
to finish and answers those still waiting then with 503 JSON (never uvicorn's text/plain 500), so
uvicorn's own grace period (a little longer) never has to cut a request. ``serve`` then returns
the signal's name instead of dying by it; ``app.state.stopping.cut`` says how many requests were cut.

Slow clients: a connection must deliver a request's head within ``read_timeout_s`` of opening (or
of its previous answer), else it is closed; the body's deadline is the app's (408). A head larger
than 16 KB is refused (uvicorn's keep-alive timeout closes idle connections).

HTTP parsing: httptools (llhttp, in C) where it is installed, else h11 (pure Python, about a tenth of
a small request's time on the server); uvicorn picks uvloop for the event loop where it is installed.
Both protocols get the same head deadline and head size limit.

The listening socket is created as TCP explicitly (``IPPROTO_TCP``): asyncio sets TCP_NODELAY on
accepted connections only when the socket says it is TCP, and without it a keep-alive client waits
for Nagle's algorithm and delayed ACKs (about 40 ms a request).
"""

from __future__ import annotations

import signal
import socket
import threading

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

try:
    import httptools  # noqa: F401 - uvicorn's C parser: the fast protocol below
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - the serve extra installs it
    HttpToolsProtocol = None

from elmokit.serve.config import ServeConfig

# uvicorn's grace period exceeds the app's by this much, so the app's 503s are written first.
GRACE_MARGIN_S = 2.0
# A request's head (request line and headers) may hold at most this many bytes.
MAX_HEAD_BYTES = 16 * 1024


class _HeadDeadline:
    """A deadline for a request head, shared by both protocols: armed when a connection opens or a response
    ends, disarmed when the head is complete; on expiry the connection closes if it is still waiting for one."""

    read_timeout_s = 10.0

    def _waiting_for_head(self) -> bool:
        raise NotImplementedError

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(self.read_timeout_s, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if getattr(self, "_head_timer", None) is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._waiting_for_head() and not self.transport.is_closing():
            self.logger.info("closing a connection that sent no complete request head within %g s (--read-timeout-s)",
                             self.read_timeout_s)
            self.transport.close()


class _TimedH11Protocol(_HeadDeadline, H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head does not arrive in time."""

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._head_timer = None
        self._arm_head_timer()

    def _waiting_for_head(self) -> bool:
        return self.conn.their_state is h11.IDLE

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:  # a head has arrived: the app takes over (body deadline)
            self._disarm_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_head_timer()

    def connection_lost(self, exc) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)


if HttpToolsProtocol is not None:
    class _TimedHttpToolsProtocol(_HeadDeadline, HttpToolsProtocol):
        """uvicorn's httptools protocol with the h11 one's guards: a head must arrive within
        ``read_timeout_s`` and hold at most MAX_HEAD_BYTES (uvicorn's httptools protocol has no limit)."""

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._head_timer = None
            self._in_head = True  # the bytes arriving now belong to a request's head
            self._head_bytes = 0
            self._heads = 0  # request heads completed on this connection
            self._arm_head_timer()

        def _waiting_for_head(self) -> bool:
            return self._in_head

        def data_received(self, data: bytes) -> None:
            counting, heads = self._in_head, self._heads
            super().data_received(data)
            if counting and self._heads == heads and not self.transport.is_closing():  # the head is still incomplete
                self._head_bytes += len(data)
                if self._head_bytes > MAX_HEAD_BYTES:
                    self._refuse_head()

        def _refuse_head(self) -> None:
            message = f"the request head is larger than {MAX_HEAD_BYTES} bytes".encode("ascii")
            self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; "
                                 b"charset=utf-8\r\nconnection: close\r\ncontent-length: "
                                 + str(len(message)).encode("ascii") + b"\r\n\r\n" + message)
            self.transport.close()

        def on_headers_complete(self) -> None:
            self._in_head, self._head_bytes = False, 0
            self._heads += 1
            self._disarm_head_timer()  # the app takes over (body deadline)
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._in_head = True  # what comes next is the next request's head
            super().on_message_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self._in_head:
                self._arm_head_timer()

        def connection_lost(self, exc) -> None:
            self._disarm_head_timer()
            super().connection_lost(exc)
else:  # pragma: no cover
    _TimedHttpToolsProtocol = None


class _Server(uvicorn.Server):
    """uvicorn's server, telling the app the moment shutdown begins."""

    async def shutdown(self, sockets=None) -> None:
        stopping = getattr(getattr(self.config.app, "state", None), "stopping", None)
        if stopping is not None:
            stopping.begin()
        await super().shutdown(sockets=sockets)


def uvicorn_server(app, *, host: str = "127.0.0.1", port: int = 8080, config: ServeConfig | None = None,
                   log_level: str = "info", access_log: bool = False, http: str = "auto") -> uvicorn.Server:
    """A uvicorn server for ``app`` (not yet running): ``server.run()`` blocks, ``server.should_exit = True`` stops it.

    ``http``: "httptools", "h11", or "auto" (httptools where installed)."""
    config = config or ServeConfig()
    if http == "auto":
        http = "httptools" if _TimedHttpToolsProtocol is not None else "h11"
    if http not in ("httptools", "h11") or (http == "httptools" and _TimedHttpToolsProtocol is None):
        raise ValueError(f"http={http!r}: choose 'auto', 'h11' or 'httptools' (needs the httptools package)")
    base = _TimedHttpToolsProtocol if http == "httptools" else _TimedH11Protocol
    protocol = type(base.__name__.lstrip("_"), (base,), {"read_timeout_s": config.read_timeout_s})
    return _Server(uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=access_log,
                                  lifespan="on", timeout_graceful_shutdown=config.shutdown_timeout_s + GRACE_MARGIN_S,
                                  server_header=False, http=protocol, h11_max_incomplete_event_size=MAX_HEAD_BYTES))


def bind(host: str = "127.0.0.1", port: int = 8080) -> socket.socket:
    """A TCP socket bound to ``host:port`` (port 0: a free one, read back with ``getsockname``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def serve(app, *, host: str = "127.0.0.1", port: int = 8080, config: ServeConfig | None = None,
          log_level: str = "info", access_log: bool = False, sock: socket.socket | None = None) -> str | None:
    """Serve ``app`` until SIGTERM/SIGINT; returns the name of the signal that stopped it (None if none did).

    ``sock``: an already bound socket to serve on (``host`` and ``port`` are then only for the log)."""
    server = uvicorn_server(app, host=host, port=port, config=config, log_level=log_level, access_log=access_log)
    received: list[int] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        # uvicorn restores these after its graceful shutdown and raises the signal again to them:
        # record it instead of dying by it (or, for SIGINT, raising KeyboardInterrupt).
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda signum, frame: received.append(signum))
    try:
        server.run(sockets=[sock] if sock is not None else None)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return signal.Signals(received[0]).name if received else None
