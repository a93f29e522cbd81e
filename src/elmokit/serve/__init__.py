"""The embedding service: ``elmokit serve`` (FastAPI + uvicorn) over one representation.

    from elmokit.serve import ServeConfig, create_app, serve
    app = create_app(Embedder.load("default"), ServeConfig(max_queue=64))
    serve(app, host="127.0.0.1", port=8080)

Pieces, one per file: ``config`` (ServeConfig: limits and batching), ``batcher`` (the worker thread
that gathers concurrent requests into one ``embed`` call), ``app`` (the routes), ``errors`` (JSON
errors in TEI and OpenAI style), ``metrics`` (Prometheus), ``server`` (uvicorn and the graceful stop).
Needs the ``serve`` extra: ``pip install 'elmokit[serve]'``. See docs/serve.md.
"""

from elmokit.serve.batcher import Batcher, QueueFull, ShuttingDown
from elmokit.serve.config import ServeConfig

__all__ = ["Batcher", "QueueFull", "ServeConfig", "ShuttingDown", "create_app", "serve"]


def __getattr__(name: str):
    # The web pieces import fastapi/uvicorn; load them only when asked for.
    if name == "create_app":
        from elmokit.serve.app import create_app

        return create_app
    if name == "serve":
        from elmokit.serve.server import serve

        return serve
    raise AttributeError(f"module 'elmokit.serve' has no attribute {name!r}")
