"""Running the app under uvicorn, with a graceful stop.

On SIGTERM or Ctrl-C, uvicorn stops accepting connections, waits (up to ``shutdown_timeout_s``)
for the requests in flight, then runs the app's lifespan shutdown, where the batcher finishes every
request it accepted. ``serve`` then returns the signal's name instead of dying by it, so the
command can say what happened and exit 0.
"""

from __future__ import annotations

import signal
import socket
import threading

import uvicorn

from elmokit.serve.config import ServeConfig


def uvicorn_server(app, *, host: str = "127.0.0.1", port: int = 8080, config: ServeConfig | None = None,
                   log_level: str = "info", access_log: bool = False) -> uvicorn.Server:
    """A uvicorn server for ``app`` (not yet running): ``server.run()`` blocks, ``server.should_exit = True`` stops it."""
    config = config or ServeConfig()
    return uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=access_log,
                                         lifespan="on", timeout_graceful_shutdown=config.shutdown_timeout_s,
                                         server_header=False))


def bind(host: str = "127.0.0.1", port: int = 8080) -> socket.socket:
    """A socket bound to ``host:port`` (port 0: a free one, read back with ``getsockname``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
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
