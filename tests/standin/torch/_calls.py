"""The stand-in's call log: ``FAKE_TORCH_CALLS=PATH`` appends one JSON line per public call.

Only the outermost call is written (a call the stand-in makes of its own API is not the code
under test's); an argument that is not JSON goes as its ``repr``.
"""

import functools
import json
import os
import threading

_depth = threading.local()


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return repr(value)


def _write(name, args, kwargs):
    path = os.environ.get("FAKE_TORCH_CALLS")
    if not path:
        return
    line = json.dumps({"call": name, "args": _plain(list(args)),
                       "kwargs": {k: _plain(v) for k, v in kwargs.items()}})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def recorded(name):
    """Decorates a public function of the stand-in, written to the log as ``name``."""

    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            depth = getattr(_depth, "n", 0)
            if depth == 0:
                _write(name, args, kwargs)
            _depth.n = depth + 1
            try:
                return fn(*args, **kwargs)
            finally:
                _depth.n = depth

        return call

    return wrap
