"""Worker-side helper for sweepd, the hyperparameter sweep daemon.

Usage::

    import sweepd_worker

    def objective(trial):          # trial.params, trial.number, trial.id
        for step in range(10):
            loss = ...
            trial.report(loss, step)   # Optuna's order: value, step
            if trial.should_prune():
                raise sweepd_worker.TrialPruned()
        return loss

    sweepd_worker.serve(objective)

sweepd starts a worker process with an inherited, connected Unix stream
socket whose descriptor number is in ``SWEEPD_FD`` (the *channel*) and the
mode in ``SWEEPD_MODE``:

* ``persistent``: the worker sends ``{"type":"ready",...}``, then runs one
  trial per ``{"type":"trial",...}`` message until sweepd sends
  ``{"type":"shutdown"}`` or closes the channel.
* ``oneshot``: one process per trial; the trial comes from ``SWEEPD_TRIAL_ID``,
  ``SWEEPD_TRIAL_NUMBER`` and ``SWEEPD_PARAMS`` (or ``--name=value``
  arguments) and the result is written to ``SWEEPD_RESULT_FILE``.

Messages are UTF-8 JSON objects, one per ``\\n``-terminated line (at most
1 MiB); non-finite floats travel as the strings ``"nan"``, ``"inf"`` and
``"-inf"``.  ``report(value, step)`` (Optuna's argument order; a call that
can only be the old order ``report(step, value)`` is refused with a
TypeError) sends ``{"type":"report"}`` and blocks until sweepd answers with
``{"type":"prune"}``.  Outcomes are ``result``,
``pruned`` or ``error`` messages.  stdout and stderr stay free for the
user's own output.

The full protocol, for writing workers in other languages, is in
``docs/protocol.md`` in the sweepd repository.

This module uses only the standard library and supports CPython 3.8+.
"""

import gc
import json
import math
import operator
import os
import socket
import sys
import threading
import traceback

__version__ = "0.2.0"

__all__ = ["serve", "release_caches", "Trial", "TrialPruned", "PROTOCOL_VERSION", "__version__"]

#: The protocol version this helper speaks.
PROTOCOL_VERSION = 1

#: Longest line (including the trailing newline) either side may send.
MAX_LINE_BYTES = 1 << 20

# Caps on the free-text fields we send, so a message always fits in a line.
_MAX_MESSAGE_BYTES = 64 * 1024
_MAX_TRACEBACK_BYTES = 512 * 1024
_MAX_REPR_BYTES = 4 * 1024
_MAX_EXC_TYPE_BYTES = 1024


class TrialPruned(Exception):
    """Raise from the objective to stop the current trial as pruned.

    Any exception class named ``TrialPruned`` (for instance
    ``optuna.TrialPruned``) is treated the same way.
    """


# --------------------------------------------------------------------------
# Small helpers


def _warn(text):
    try:
        sys.stderr.write("sweepd_worker: %s\n" % (text,))
        sys.stderr.flush()
    except Exception:
        pass


def _flush_std_streams():
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            pass


def _exit_quietly():
    """sweepd is gone (EOF or broken pipe): leave at once, exit status 0."""
    _flush_std_streams()
    os._exit(0)


def _clean_str(text):
    """Make ``text`` encodable as UTF-8 (lone surrogates become U+FFFD)."""
    if not isinstance(text, str):
        text = str(text)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8", "replace")


def _truncate(text, max_bytes, keep_tail=False):
    """Cut ``text`` to at most ``max_bytes`` UTF-8 bytes, marking the cut."""
    text = _clean_str(text)
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    marker = "\n...[truncated by sweepd_worker]...\n"
    room = max(max_bytes - len(marker.encode("utf-8")), 0)
    if keep_tail:
        head = data[: room // 2].decode("utf-8", "ignore")
        tail = data[len(data) - (room - room // 2):].decode("utf-8", "ignore")
        return head + marker + tail
    return data[:room].decode("utf-8", "ignore") + marker


def _wire_float(f):
    """A float in wire form: a JSON number, or "nan" / "inf" / "-inf"."""
    if math.isnan(f):
        return "nan"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    return f


def _encode_report_value(value):
    # Optuna's check and message: anything float() accepts.
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise TypeError(
            "The `value` argument is of type '%s' but supposed to be a float." % (type(value),)
        )
    return _wire_float(f)


def _encode_result_value(value):
    """Wire form of an objective's return value.

    bool is sent as-is (it is not a number); anything float() accepts is
    sent as a number (or "nan"/"inf"/"-inf"); anything else as its repr.
    """
    if isinstance(value, bool):
        return value
    try:
        f = float(value)
    except Exception:
        return _truncate(_safe_repr(value), _MAX_REPR_BYTES)
    return _wire_float(f)


def _result_file_text(value):
    """What oneshot mode writes to SWEEPD_RESULT_FILE for ``value``."""
    if isinstance(value, bool):
        return repr(value)
    try:
        f = float(value)
    except Exception:
        return _truncate(_safe_repr(value), _MAX_REPR_BYTES)
    return repr(f)


def _safe_repr(value):
    try:
        return repr(value)
    except Exception:
        return "<unrepresentable %s>" % (type(value).__name__,)


def _integral(x):
    """``x`` as an int if it is an integer (an int, or a float with no fraction), else None."""
    if isinstance(x, (bool, str, bytes)):
        return None
    try:
        return operator.index(x)
    except Exception:
        pass
    try:
        f = float(x)
    except Exception:
        return None
    if math.isfinite(f) and f.is_integer():
        return int(f)
    return None


def _non_integral_number(x):
    """True if ``x`` is a number with a fraction (or nan/inf): it cannot be a step."""
    if isinstance(x, (bool, str, bytes)) or _integral(x) is not None:
        return False
    try:
        float(x)
    except Exception:
        return False
    return True


def _short_repr(x):
    return _truncate(_safe_repr(x), 200)


def _report_args(args, kwargs):
    """(value, step) from report()'s arguments, refusing the old order report(step, value)."""
    names = ("value", "step")
    if len(args) > 2:
        raise TypeError(
            "report() takes 3 positional arguments but %d were given" % (len(args) + 1,)
        )
    bound = dict(zip(names, args))
    for key, val in kwargs.items():
        if key not in names:
            raise TypeError("report() got an unexpected keyword argument %r" % (key,))
        if key in bound:
            raise TypeError("report() got multiple values for argument %r" % (key,))
        bound[key] = val
    missing = [n for n in names if n not in bound]
    if missing:
        raise TypeError(
            "report() missing %d required positional argument%s: %s"
            % (len(missing), "s" if len(missing) > 1 else "",
               " and ".join("'%s'" % (n,) for n in missing))
        )
    value, step = bound["value"], bound["step"]
    if len(args) == 2 and _integral(value) is not None and _non_integral_number(step):
        raise TypeError(
            "Trial.report(%s, %s): sweepd follows Optuna's report(value, step) now, and this "
            "call can only be the old order report(step, value) (a step is an integer). "
            "Swap the arguments: trial.report(%s, %s)"
            % (_short_repr(value), _short_repr(step), _short_repr(step), _short_repr(value))
        )
    return value, step


def _as_step(step):
    # Optuna's checks and messages; unlike Optuna (int(step)), a step with a fraction is refused
    # rather than truncated, and so is a bool.
    as_int = _integral(step)
    if as_int is None:
        raise TypeError(
            "The `step` argument is of type '%s' but supposed to be an int (got %s)."
            % (type(step), _short_repr(step))
        )
    if as_int < 0:
        raise ValueError("`step=%r` must be non-negative." % (as_int,))
    return as_int


def _exc_type_name(exc):
    cls = type(exc)
    qualname = getattr(cls, "__qualname__", cls.__name__)
    module = getattr(cls, "__module__", None)
    if module in (None, "builtins"):
        return qualname
    return "%s.%s" % (module, qualname)


def _is_pruned(exc):
    if isinstance(exc, TrialPruned):
        return True
    return any(cls.__name__ == "TrialPruned" for cls in type(exc).__mro__)


def _dumps(msg):
    data = json.dumps(
        msg, allow_nan=False, ensure_ascii=False, separators=(",", ":")
    ).encode("utf-8") + b"\n"
    if len(data) > MAX_LINE_BYTES:
        raise ValueError(
            "sweepd_worker: message of %d bytes exceeds the %d-byte line limit"
            % (len(data), MAX_LINE_BYTES)
        )
    return data


# --------------------------------------------------------------------------
# The channel


class _Channel(object):
    """The socket to sweepd: line-delimited JSON both ways."""

    def __init__(self, fd):
        try:
            sock = socket.socket(fileno=fd)
        except OSError as exc:
            raise RuntimeError(
                "sweepd_worker: SWEEPD_FD=%d is not a usable socket (%s); "
                "this script must be started by sweepd" % (fd, exc)
            )
        # Programs the objective launches must not inherit the channel.
        sock.set_inheritable(False)
        self._sock = sock
        self._rfile = sock.makefile("rb")
        self._wlock = threading.Lock()
        # Held by whoever is reading; report() holds it from send to answer.
        self._rlock = threading.RLock()

    def send(self, msg):
        data = _dumps(msg)
        try:
            with self._wlock:
                self._sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            _exit_quietly()
        except OSError as exc:
            _warn("channel write failed (%s); exiting" % (exc,))
            _exit_quietly()

    def recv(self):
        """The next message (a dict); None when sweepd has closed the channel."""
        with self._rlock:
            while True:
                try:
                    line = self._rfile.readline(MAX_LINE_BYTES)
                except (ConnectionResetError, BrokenPipeError):
                    return None
                if not line:
                    return None
                if not line.endswith(b"\n"):
                    if len(line) < MAX_LINE_BYTES:
                        return None  # EOF in the middle of a line
                    # Over-long line: skip the rest of it.
                    while line and not line.endswith(b"\n"):
                        try:
                            line = self._rfile.readline(MAX_LINE_BYTES)
                        except (ConnectionResetError, BrokenPipeError):
                            return None
                    if not line:
                        return None
                    _warn("ignoring an over-long message from sweepd")
                    continue
                try:
                    msg = json.loads(line.decode("utf-8"))
                except ValueError:
                    _warn("ignoring a malformed message from sweepd: %r" % (line[:200],))
                    continue
                if not isinstance(msg, dict):
                    _warn("ignoring a non-object message from sweepd: %r" % (line[:200],))
                    continue
                return msg

    def request_prune(self, trial_id, step, value):
        """Send a report and wait for sweepd's prune answer."""
        with self._rlock:
            self.send(
                {"type": "report", "trial_id": trial_id, "step": step, "value": value}
            )
            while True:
                msg = self.recv()
                if msg is None:
                    _exit_quietly()
                kind = msg.get("type")
                if kind == "prune" and msg.get("trial_id") == trial_id:
                    return msg.get("prune") is True
                if kind == "shutdown":
                    _flush_std_streams()
                    sys.exit(0)
                if kind == "trial":
                    _warn("ignoring a trial message received while a trial is running")
                # Anything else (stale prune answers, unknown types): ignore.


def _open_channel(required):
    raw = os.environ.get("SWEEPD_FD")
    if raw is None or raw.strip() == "":
        if required:
            raise RuntimeError(
                "sweepd_worker.serve(): SWEEPD_FD is not set; this script must be "
                "started by sweepd (see docs/protocol.md)"
            )
        return None
    try:
        fd = int(raw)
    except ValueError:
        raise RuntimeError("sweepd_worker: SWEEPD_FD=%r is not a number" % (raw,))
    chan = _Channel(fd)
    # The descriptor is close-on-exec, so the number means nothing to child
    # programs; don't let them believe they are sweepd workers.
    os.environ.pop("SWEEPD_FD", None)
    return chan


# --------------------------------------------------------------------------
# Trials


class Trial(object):
    """One trial handed to the objective.

    Attributes:
        params: dict of parameter name -> value (float, int, or the
            categorical choice itself).
        number: the trial's number within the study (0, 1, 2, ...).
        id: the trial's id (Optuna's trial_id).
    """

    def __init__(self, trial_id, number, params, channel):
        self.id = trial_id
        self.number = number
        self.params = params
        self._channel = channel
        self._should_prune = False
        self._finished = False

    def report(self, *args, **kwargs):
        """Optuna's ``report(value, step)``: an intermediate objective value at ``step``.

        ``value`` is a float (or anything float() accepts), ``step`` a non-negative integer.
        Blocks until sweepd has decided whether the trial should be pruned; returns that
        decision (also what :meth:`should_prune` says). A call that can only be the old order
        ``report(step, value)`` (an integer, then a number with a fraction) is a TypeError.
        """
        value, step = _report_args(args, kwargs)
        if self._finished:
            raise RuntimeError("Trial.report() called after the trial finished")
        wire_value = _encode_report_value(value)
        step = _as_step(step)
        if self._channel is None:
            self._should_prune = False
        else:
            self._should_prune = self._channel.request_prune(self.id, step, wire_value)
        return self._should_prune

    def should_prune(self):
        """sweepd's answer to the last report() (False before any report)."""
        return self._should_prune

    def __repr__(self):
        return "Trial(id=%r, number=%r, params=%r)" % (self.id, self.number, self.params)


def _run_objective(objective, trial):
    """Run the objective: ("ok", value) | ("pruned", None) | ("error", (exc, tb))."""
    try:
        value = objective(trial)
    except Exception as exc:
        if _is_pruned(exc):
            return "pruned", None
        tb = traceback.format_exc()
        _flush_std_streams()
        try:
            sys.stderr.write(tb)
            sys.stderr.flush()
        except Exception:
            pass
        return "error", (exc, tb)
    finally:
        trial._finished = True
    return "ok", value


def _error_message(trial_id, exc, tb):
    try:
        text = str(exc)
    except Exception:
        text = "<unprintable %s>" % (type(exc).__name__,)
    return {
        "type": "error",
        "trial_id": trial_id,
        "exc_type": _truncate(_exc_type_name(exc), _MAX_EXC_TYPE_BYTES),
        "message": _truncate(text, _MAX_MESSAGE_BYTES),
        "traceback": _truncate(tb, _MAX_TRACEBACK_BYTES, keep_tail=True),
    }


def _ready_message():
    return {"type": "ready", "pid": os.getpid(), "protocol": PROTOCOL_VERSION}


# --------------------------------------------------------------------------
# Modes


# --------------------------------------------------------------------------
# Device memory between trials


def _cuda_torch():
    """PyTorch, if the objective imported it and initialized CUDA (never imported here)."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            return torch
    except Exception:
        pass
    return None


def _reset_framework_peaks():
    torch = _cuda_torch()
    if torch is not None:
        try:
            torch.cuda.reset_peak_memory_stats()
        except Exception:
            pass


def _framework_memory():
    """The framework's own peak figures for the trial that just ended, where it is imported
    and they are cheap to ask: {"framework": ..., "peak_allocated": bytes, "peak_reserved":
    bytes}, or None. sweepd measures memory with NVML; these only say what the framework saw."""
    torch = _cuda_torch()
    if torch is None:
        return None
    try:
        return {
            "framework": "torch",
            "peak_allocated": int(torch.cuda.max_memory_allocated()),
            "peak_reserved": int(torch.cuda.max_memory_reserved()),
        }
    except Exception:
        return None


def release_caches():
    """Give the device memory a finished trial left cached back to the driver.

    A persistent worker waits between trials holding its CUDA context; PyTorch's caching
    allocator would also keep every block the trial freed, so an idle worker would hold a
    trial's peak and sweepd could not admit the next trial into that memory. Called between
    trials by serve() in persistent mode: garbage collection (tensors in reference cycles),
    then torch.cuda.empty_cache() and TensorFlow's clear_session() where those are imported
    (nothing is imported here). JAX keeps freed memory in its own pool whatever is called;
    sweepd sets XLA_PYTHON_CLIENT_PREALLOCATE=false so that the pool grows only as needed.
    """
    gc.collect()
    torch = _cuda_torch()
    if torch is not None:
        try:
            torch.cuda.empty_cache()
        except Exception as exc:
            _warn("torch.cuda.empty_cache() failed: %s" % (exc,))
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        try:
            tf.keras.backend.clear_session()
        except Exception:
            pass


def _persistent_trial(objective, chan, trial_id, number, params):
    # A function of its own so that the trial, its value and any exception
    # (with the frames it holds) are released before waiting for the next one.
    trial = Trial(trial_id, number, params, chan)
    _reset_framework_peaks()
    outcome, payload = _run_objective(objective, trial)
    _flush_std_streams()
    memory = _framework_memory()
    msg = _outcome_message(trial_id, outcome, payload)
    if memory is not None:
        msg["memory"] = memory
    # The trial's objects (an exception's frames included) go before the caches are emptied,
    # and the caches before sweepd hears the trial ended: it may admit the next trial into this
    # memory at once.
    del trial, payload
    release_caches()
    chan.send(msg)


def _outcome_message(trial_id, outcome, payload):
    if outcome == "ok":
        return {"type": "result", "trial_id": trial_id,
                "value": _encode_result_value(payload)}
    if outcome == "pruned":
        return {"type": "pruned", "trial_id": trial_id}
    exc, tb = payload
    return _error_message(trial_id, exc, tb)


def _serve_persistent(objective):
    chan = _open_channel(required=True)
    chan.send(_ready_message())
    while True:
        msg = chan.recv()
        if msg is None:
            _exit_quietly()
        kind = msg.get("type")
        if kind == "trial":
            trial_id = msg.get("trial_id")
            params = msg.get("params")
            if not isinstance(params, dict):
                params = {}
            _persistent_trial(objective, chan, trial_id, msg.get("number"), params)
        elif kind == "shutdown":
            _flush_std_streams()
            sys.exit(0)
        # "prune" outside a report, or unknown types: ignore.


def _parse_argv_params(argv):
    """``--name=value`` arguments: numbers and true/false decoded, else raw."""

    def reject(_constant):
        raise ValueError("not a plain number")

    params = {}
    for arg in argv:
        if not arg.startswith("--") or "=" not in arg:
            continue
        name, raw = arg[2:].split("=", 1)
        if not name:
            continue
        value = raw
        try:
            decoded = json.loads(raw, parse_constant=reject)
        except ValueError:
            decoded = None
        if isinstance(decoded, (bool, int, float)):
            value = decoded
        params[name] = value
    return params


def _env_int(name):
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise RuntimeError("sweepd_worker: %s=%r is not an integer" % (name, raw))


def _serve_oneshot(objective):
    trial_id = _env_int("SWEEPD_TRIAL_ID")
    number = _env_int("SWEEPD_TRIAL_NUMBER")
    raw_params = os.environ.get("SWEEPD_PARAMS")
    if raw_params is not None and raw_params.strip() != "":
        try:
            params = json.loads(raw_params)
        except ValueError as exc:
            raise RuntimeError("sweepd_worker: SWEEPD_PARAMS is not valid JSON: %s" % (exc,))
        if not isinstance(params, dict):
            raise RuntimeError("sweepd_worker: SWEEPD_PARAMS is not a JSON object")
    else:
        params = _parse_argv_params(sys.argv[1:])
    result_file = os.environ.get("SWEEPD_RESULT_FILE")

    chan = _open_channel(required=False)
    if chan is not None:
        chan.send(_ready_message())

    trial = Trial(trial_id, number, params, chan)
    outcome, payload = _run_objective(objective, trial)
    _flush_std_streams()

    if outcome == "ok":
        if result_file:
            try:
                with open(result_file, "w") as f:
                    f.write(_result_file_text(payload))
            except OSError as exc:
                tb = traceback.format_exc()
                _warn("could not write SWEEPD_RESULT_FILE: %s" % (exc,))
                if chan is not None:
                    chan.send(_error_message(trial_id, exc, tb))
                sys.exit(1)
        if chan is not None:
            chan.send(
                {"type": "result", "trial_id": trial_id,
                 "value": _encode_result_value(payload)}
            )
        sys.exit(0)
    if outcome == "pruned":
        if chan is not None:
            chan.send({"type": "pruned", "trial_id": trial_id})
        sys.exit(0)
    exc, tb = payload
    if chan is not None:
        chan.send(_error_message(trial_id, exc, tb))
    sys.exit(1)


def serve(objective):
    """Run ``objective(trial)`` for the trials sweepd hands this process.

    In persistent mode this serves trials until sweepd says shutdown (exit
    status 0) or goes away (exit status 0).  In oneshot mode it runs the one
    trial described by the environment and exits: 0 on success or pruned, 1
    if the objective raised.  This function does not return.

    Raises RuntimeError if the process was not started by sweepd.
    """
    mode = os.environ.get("SWEEPD_MODE")
    if not mode:
        raise RuntimeError(
            "sweepd_worker.serve(): SWEEPD_MODE is not set; this script must be "
            "started by sweepd (see docs/protocol.md)"
        )
    protocol = os.environ.get("SWEEPD_PROTOCOL")
    if protocol and protocol.strip() != str(PROTOCOL_VERSION):
        _warn(
            "sweepd speaks protocol %s, this helper (version %s) speaks %d"
            % (protocol, __version__, PROTOCOL_VERSION)
        )
    if mode == "persistent":
        _serve_persistent(objective)
    elif mode == "oneshot":
        _serve_oneshot(objective)
    else:
        raise RuntimeError(
            "sweepd_worker.serve(): unknown SWEEPD_MODE %r (expected 'persistent' "
            "or 'oneshot'); this script must be started by sweepd" % (mode,)
        )
