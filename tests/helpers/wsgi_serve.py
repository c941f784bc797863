"""``python -m tests.helpers.wsgi_serve MODULE:APP PORT``: serve a WSGI application on loopback.

For the real Keystone and the Keystone-backed Placement of ``tests/helpers/keystone_server.py``:
a threaded ``wsgiref`` server (one thread per connection, kept alive), one request in the
application at a time (both run on SQLite: one writer, as ``placement-serve`` has it), and
an empty command line for the application (Keystone parses ``sys.argv`` with oslo.config
when it loads).
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def one_at_a_time(app: Callable[..., Iterable[bytes]]) -> Callable[..., list[bytes]]:
    """``app`` behind a lock, its answer read whole inside it."""
    lock = threading.Lock()

    def serial(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with lock:
            result = app(environ, start_response)
            try:
                return list(result)
            finally:
                if hasattr(result, "close"):
                    result.close()

    return serial


def main() -> None:
    target, port = sys.argv[1], int(sys.argv[2])
    sys.argv = sys.argv[:1]
    module, _, name = target.partition(":")
    app = one_at_a_time(getattr(importlib.import_module(module), name))
    make_server("127.0.0.1", port, app, server_class=_Server, handler_class=_Quiet).serve_forever()


if __name__ == "__main__":
    main()
