"""Worker-side helper for sweepd, the hyperparameter sweep daemon.

An Optuna objective runs unchanged; only the last line of the script changes::

    import optuna
    import sweepd_worker

    def objective(trial):
        lr = trial.suggest_float("lr", 1e-5, 1e-1, log=True)
        n_layers = trial.suggest_int("n_layers", 1, 3)
        units = [trial.suggest_int("n_units_l%d" % i, 4, 128, log=True)
                 for i in range(n_layers)]
        for step in range(10):
            loss = ...
            trial.report(loss, step)               # Optuna's order: value, step
            if trial.should_prune():
                raise optuna.TrialPruned()         # or sweepd_worker.TrialPruned
        return loss

    # was: study.optimize(objective, n_trials=100); the budget is in the TOML now
    sweepd_worker.serve(objective)

The ``trial`` speaks Optuna's trial API: ``suggest_float``, ``suggest_int``,
``suggest_categorical`` (and the deprecated ``suggest_uniform``,
``suggest_loguniform``, ``suggest_discrete_uniform``), ``report(value, step)``,
``should_prune()``, ``set_user_attr()``, ``user_attrs``, Optuna 5's
``set_constraint(key, value)`` and ``constraints``, ``number``,
``params``, ``distributions`` and ``datetime_start``, plus sweepd's ``id``
(Optuna's trial_id), and for resuming: a read-only ``system_attrs`` (a retry's
``failed_trial`` and ``retry_history``, as Optuna's ``RetryFailedTrialCallback`` reads
them), ``study`` (name and directions) and ``checkpoint_dir`` (one directory per
trial, shared by its retries).  Any exception class named ``TrialPruned`` (for
instance ``optuna.TrialPruned``) ends the trial as pruned.

Where the values come from depends on the protocol the daemon speaks
(``SWEEPD_PROTOCOL``):

* protocol 2 (define-by-run): the first ``suggest_*`` of a name in a trial
  asks sweepd, which samples it (or answers with the value it sampled up
  front from ``[params]``) and refuses a distribution that conflicts with
  the study's earlier use of the name, as Optuna does (ValueError).
* protocol 1 (an older sweepd): ``suggest_*`` returns the value sweepd
  sampled up front from the study's ``[params]`` (a ValueError if it lies
  outside the distribution asked for); any other name is a RuntimeError.

Asking again for a name in the same trial returns the same value without
asking sweepd.  ``trial.params`` also works as before: the values sampled up
front plus those suggested so far.  ``report(step, value)``, the argument
order of sweepd's helper before protocol 2, is refused with a TypeError when
the call can only mean that order (an integer, then a non-integral number).

sweepd starts a worker process with an inherited, connected Unix stream
socket whose descriptor number is in ``SWEEPD_FD`` (the *channel*) and the
mode in ``SWEEPD_MODE``:

* ``persistent``: the worker sends ``{"type":"ready",...}``, then runs one
  trial per ``{"type":"trial",...}`` message until sweepd sends
  ``{"type":"shutdown"}`` or closes the channel.
* ``oneshot``: one process per trial; the trial comes from ``SWEEPD_TRIAL_ID``,
  ``SWEEPD_TRIAL_NUMBER`` and ``SWEEPD_PARAMS`` (or ``--name=value``
  arguments) and the result is written to ``SWEEPD_RESULT_FILE``.  Suggests
  go over the channel when there is one.

Messages are UTF-8 JSON objects, one per ``\\n``-terminated line (at most
1 MiB); non-finite floats travel as the strings ``"nan"``, ``"inf"`` and
``"-inf"``.  ``report()`` sends ``{"type":"report"}`` and blocks until
sweepd answers with ``{"type":"prune"}``; ``suggest_*`` sends
``{"type":"suggest"}`` and blocks until sweepd answers with
``{"type":"param"}``; ``set_user_attr()`` sends ``{"type":"user_attr"}``,
``set_constraint()`` ``{"type":"constraint"}``.
Outcomes are ``result``, ``pruned`` or ``error`` messages.  stdout and
stderr stay free for the user's own output.

A GPU trial runs under the memory cap sweepd admitted it with (``memory_cap``
in the trial message, ``SWEEPD_MEMORY_CAP`` in the environment), enforced
with the framework's own limit by ``sweepd_memory``; ``trial.memory_cap``
has it for a worker without one.

The full protocol, for writing workers in other languages, is in
``docs/protocol.md`` in the sweepd repository.

This module uses only the standard library and supports CPython 3.8+.  Its
distribution classes are stand-ins for Optuna's, with the same names,
attributes, equality and repr (they compare equal to Optuna's own); Optuna
is never imported.
"""

import collections.abc
import copy
import datetime
import decimal
import json
import math
import operator
import os
import select
import socket
import sys
import threading
import traceback
import warnings

import sweepd_memory
from sweepd_memory import _warn, release_caches

__version__ = "0.2.0"

__all__ = [
    "serve", "release_caches", "Trial", "StudyInfo", "TrialPruned",
    "FloatDistribution", "IntDistribution", "CategoricalDistribution", "distribution_to_json",
    "PROTOCOL_VERSION", "__version__",
]

#: The newest protocol version this helper speaks (it also speaks every older one).
PROTOCOL_VERSION = 2

#: Longest line (including the trailing newline) either side may send.
MAX_LINE_BYTES = 1 << 20

#: What sweepd refuses of a user attribute or a report, as both its databases must store it
#: (Optuna's VARCHAR(512) key, PostgreSQL's 32-bit step), and as its JSON reads it.
MAX_KEY_CHARS = 512
MAX_STEP = 2 ** 31 - 1
_RESERVED_PREFIX = "sweepd:"
_MAX_VALUE_DEPTH = 126
_INT_RANGE = (-(2 ** 63), 2 ** 64 - 1)

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


def _number(x):
    """``x`` as a float if it is a number (not a bool, not a string), else None."""
    if isinstance(x, (bool, str, bytes)):
        return None
    try:
        return float(x)
    except Exception:
        return None


def _several_values(value):
    """The values of an objective that returned one per objective: a list or tuple (as Optuna
    takes a Sequence) of numbers, as floats. None for anything else, which is sent as one
    value (a sequence holding something else is a non-number, as before)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, collections.abc.Sequence):
        return None
    numbers = [_number(v) for v in value]
    if any(n is None for n in numbers):
        return None
    return numbers


def _encode_result_value(value):
    """Wire form of an objective's return value.

    bool is sent as-is (it is not a number); anything float() accepts is
    sent as a number (or "nan"/"inf"/"-inf"); anything else as its repr.
    A list or tuple of numbers (one per objective) is sent as an array of them.
    """
    several = _several_values(value)
    if several is not None:
        return [_wire_float(f) for f in several]
    if isinstance(value, bool):
        return value
    try:
        f = float(value)
    except Exception:
        return _truncate(_safe_repr(value), _MAX_REPR_BYTES)
    return _wire_float(f)


def _result_file_text(value):
    """What oneshot mode writes to SWEEPD_RESULT_FILE for ``value``: a number, or a JSON
    array for several objectives."""
    if _several_values(value) is not None:
        return json.dumps(_encode_result_value(value))
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
    if as_int > MAX_STEP:
        raise ValueError(
            "`step=%r` is too large: a step is at most %d (the INTEGER column of Optuna's "
            "trial_intermediate_values)" % (as_int, MAX_STEP)
        )
    return as_int


def _check_user_attr_key(key):
    # sweepd's rule (study::rules::user_attr_key): what PostgreSQL cannot store is refused on
    # SQLite too, and sweepd's own keys are its own.
    if "\0" in key:
        raise ValueError("a user attribute key may not contain NUL bytes (PostgreSQL cannot "
                         "store them)")
    if len(key) > MAX_KEY_CHARS:
        raise ValueError("a user attribute key is at most %d characters (Optuna's "
                         "VARCHAR(512)), got %d" % (MAX_KEY_CHARS, len(key)))
    if key.startswith(_RESERVED_PREFIX):
        raise ValueError("user attribute keys starting with %r are reserved for sweepd"
                         % (_RESERVED_PREFIX,))


def _check_constraint_key(key):
    # sweepd's rule (study::rules::constraint): the attribute's name, "constraints:" and the
    # key, stored as any other.
    name = "constraints:" + key
    if "\0" in key:
        raise ValueError("a constraint key may not contain NUL bytes (PostgreSQL cannot "
                         "store them)")
    if len(name) > MAX_KEY_CHARS:
        raise ValueError("a constraint's attribute name (%r and its key) is at most %d "
                         "characters (Optuna's VARCHAR(512)), got %d"
                         % ("constraints:", MAX_KEY_CHARS, len(name)))


def _check_carried(value, key):
    """A user attribute's value as sweepd reads it: nested at most _MAX_VALUE_DEPTH deep, and
    integers within 64 bits (beyond, they would come back as floats)."""
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (dict, list, tuple)):
            if depth + 1 > _MAX_VALUE_DEPTH:
                raise ValueError(
                    "Trial.set_user_attr(%r, ...): the value is nested too deep: sweepd reads "
                    "at most %d levels of lists and dicts" % (key, _MAX_VALUE_DEPTH)
                )
            items = v.values() if isinstance(v, dict) else v
            stack.extend((item, depth + 1) for item in items)
        elif isinstance(v, int) and not isinstance(v, bool):
            if not _INT_RANGE[0] <= v <= _INT_RANGE[1]:
                raise ValueError(
                    "Trial.set_user_attr(%r, ...): the integer %d is beyond what sweepd keeps "
                    "exactly (-2**63 to 2**64-1)" % (key, v)
                )


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
# Distributions: stand-ins for Optuna's, with the same checks and messages


def _warn_user(message, category=UserWarning):
    """warnings.warn, attributed to the first caller outside this module (the objective)."""
    frame = sys._getframe(1)
    level = 2
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)


def _is_distribution(x):
    return isinstance(x, _BaseDistribution) or any(
        cls.__name__ == "BaseDistribution" for cls in type(x).__mro__
    )


def _choice_equal(a, b):
    """Optuna's _categorical_choice_equal: ==, with NaN equal to NaN."""
    def is_nan(v):
        return isinstance(v, float) and math.isnan(v)
    return a == b or (is_nan(a) and is_nan(b))


class _BaseDistribution(object):
    """Like optuna.distributions.BaseDistribution: equality, hash and repr by attributes."""

    def _asdict(self):
        return dict(self.__dict__)

    def __eq__(self, other):
        if not _is_distribution(other):
            return NotImplemented
        if type(other).__name__ != type(self).__name__:
            return False
        return self.__dict__ == other.__dict__

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self):
        return hash((type(self).__name__,) + tuple(sorted(self.__dict__.items())))

    def __repr__(self):
        kwargs = ", ".join("%s=%s" % (k, v) for k, v in sorted(self._asdict().items()))
        return "%s(%s)" % (type(self).__name__, kwargs)

    def to_external_repr(self, param_value_in_internal_repr):
        return param_value_in_internal_repr

    def _numeric_internal_repr(self, value):
        try:
            internal = float(value)
        except (ValueError, TypeError):
            raise ValueError(
                "'%s' is not a valid type. float-castable value is expected." % (value,)
            )
        if math.isnan(internal):
            raise ValueError("`%s` is invalid value." % (value,))
        if self.log and internal <= 0.0:
            raise ValueError("`%s` is invalid value for the case log=True." % (value,))
        return internal


def _check_finite(**values):
    for key in sorted(values):
        v = values[key]
        if v is not None and not math.isfinite(v):
            raise ValueError(
                "sweepd cannot sample from a range with a non-finite bound or step, but got "
                "(%s)." % (", ".join("%s=%r" % (k, values[k]) for k in sorted(values)),)
            )


def _adjust_discrete_uniform_high(low, high, step):
    d_high = decimal.Decimal(str(high))
    d_low = decimal.Decimal(str(low))
    d_step = decimal.Decimal(str(step))
    d_r = d_high - d_low
    if d_r % d_step != decimal.Decimal("0"):
        old_high = high
        high = float((d_r // d_step) * d_step + d_low)
        _warn_user(
            "The distribution is specified by [%s, %s] and step=%r, but the range is not "
            "divisible by `step`. It will be replaced with [%s, %s]."
            % (low, old_high, step, low, high)
        )
    return high


def _adjust_int_uniform_high(low, high, step):
    r = high - low
    if r % step != 0:
        old_high = high
        high = r // step * step + low
        _warn_user(
            "The distribution is specified by [%s, %s] and step=%r, but the range is not "
            "divisible by `step`. It will be replaced with [%s, %s]."
            % (low, old_high, step, low, high)
        )
    return high


class FloatDistribution(_BaseDistribution):
    """optuna.distributions.FloatDistribution: floats in [low, high], maybe log or stepped.

    Same checks, messages, attributes (``step``, ``low``, ``high``, ``log``, in Optuna's
    order), equality and repr. sweepd also refuses non-finite bounds, and ``log`` is a bool.
    """

    def __init__(self, low, high, log=False, step=None):
        if log and step is not None:
            raise ValueError("The parameter `step` is not supported when `log` is true.")
        if low > high:
            raise ValueError("`low <= high` must hold, but got (low=%r, high=%r)." % (low, high))
        if log and low <= 0.0:
            raise ValueError(
                "`low > 0` must hold for `log=True`, but got (low=%r, high=%r)." % (low, high)
            )
        if step is not None and step <= 0:
            raise ValueError("`step > 0` must hold, but got step=%r." % (step,))
        _check_finite(low=float(low), high=float(high),
                      step=None if step is None else float(step))
        self.step = None
        if step is not None:
            high = _adjust_discrete_uniform_high(low, high, step)
            self.step = float(step)
        self.low = float(low)
        self.high = float(high)
        self.log = bool(log)

    def single(self):
        if self.step is None:
            return self.low == self.high
        if self.low == self.high:
            return True
        high = decimal.Decimal(str(self.high))
        low = decimal.Decimal(str(self.low))
        step = decimal.Decimal(str(self.step))
        return (high - low) < step

    def _contains(self, param_value_in_internal_repr):
        value = param_value_in_internal_repr
        if self.step is None:
            return self.low <= value <= self.high
        k = (value - self.low) / self.step
        return self.low <= value <= self.high and abs(k - round(k)) < 1.0e-8

    def to_internal_repr(self, param_value_in_external_repr):
        return self._numeric_internal_repr(param_value_in_external_repr)


class IntDistribution(_BaseDistribution):
    """optuna.distributions.IntDistribution: integers in [low, high], maybe log or stepped.

    Same checks, messages, attributes (``log``, ``step``, ``low``, ``high``, in Optuna's
    order), equality and repr. ``log`` is a bool.
    """

    def __init__(self, low, high, log=False, step=1):
        if log and step != 1:
            raise ValueError(
                "Samplers and other components in Optuna only accept step is 1 "
                "when `log` argument is True."
            )
        if low > high:
            raise ValueError("`low <= high` must hold, but got (low=%r, high=%r)." % (low, high))
        if log and low < 1:
            raise ValueError(
                "`low >= 1` must hold for `log=True`, but got (low=%r, high=%r)." % (low, high)
            )
        if step <= 0:
            raise ValueError("`step > 0` must hold, but got step=%r." % (step,))
        self.log = bool(log)
        self.step = int(step)
        self.low = int(low)
        self.high = _adjust_int_uniform_high(self.low, int(high), self.step)

    def to_external_repr(self, param_value_in_internal_repr):
        return int(param_value_in_internal_repr)

    def to_internal_repr(self, param_value_in_external_repr):
        return self._numeric_internal_repr(param_value_in_external_repr)

    def single(self):
        if self.log:
            return self.low == self.high
        if self.low == self.high:
            return True
        return (self.high - self.low) < self.step

    def _contains(self, param_value_in_internal_repr):
        value = param_value_in_internal_repr
        return self.low <= value <= self.high and (value - self.low) % self.step == 0


_CHOICE_TYPES = (bool, int, float, str)


class CategoricalDistribution(_BaseDistribution):
    """optuna.distributions.CategoricalDistribution: one of ``choices``.

    Same attribute (``choices``, a tuple), equality and repr. Where Optuna only warns about a
    choice that is not None, bool, int, float or str (persistent storages cannot hold it),
    sweepd refuses it with that message, and refuses a NaN or infinite choice too.
    """

    def __init__(self, choices):
        if len(choices) == 0:
            raise ValueError("The `choices` must contain one or more elements.")
        for choice in choices:
            if choice is not None and not isinstance(choice, _CHOICE_TYPES):
                raise ValueError(
                    "Choices for a categorical distribution should be a tuple of None, bool, "
                    "int, float and str for persistent storage but contains %s which is of "
                    "type %s." % (choice, type(choice).__name__)
                )
            if isinstance(choice, float) and not math.isfinite(choice):
                raise ValueError(
                    "sweepd cannot carry the categorical choice %r: choices must be finite."
                    % (choice,)
                )
        self.choices = tuple(choices)

    def index_of(self, value):
        """The index of ``value`` among the choices, or None.

        A choice of the same type is preferred, so that True and 1 (or 1 and 1.0) are told
        apart where both are choices; otherwise Optuna's equality.
        """
        for index, choice in enumerate(self.choices):
            if type(choice) is type(value) and _choice_equal(choice, value):
                return index
        for index, choice in enumerate(self.choices):
            if isinstance(choice, bool) != isinstance(value, bool):
                continue
            if _choice_equal(choice, value):
                return index
        return None

    def to_external_repr(self, param_value_in_internal_repr):
        return self.choices[int(param_value_in_internal_repr)]

    def to_internal_repr(self, param_value_in_external_repr):
        index = self.index_of(param_value_in_external_repr)
        if index is None:
            raise ValueError("'%s' not in %s." % (param_value_in_external_repr, self.choices))
        return index

    def single(self):
        return len(self.choices) == 1

    def _contains(self, param_value_in_internal_repr):
        index = int(param_value_in_internal_repr)
        return 0 <= index < len(self.choices)

    def __eq__(self, other):
        if not _is_distribution(other):
            return NotImplemented
        if type(other).__name__ != type(self).__name__:
            return False
        if self.__dict__.keys() != other.__dict__.keys():
            return False
        if len(self.choices) != len(other.choices):
            return False
        return all(_choice_equal(a, b) for a, b in zip(self.choices, other.choices))

    __hash__ = _BaseDistribution.__hash__


def _distribution_json(dist):
    """The object optuna.distributions.distribution_to_json writes for ``dist``."""
    return {"name": type(dist).__name__, "attributes": dist._asdict()}


def distribution_to_json(dist):
    """Like optuna.distributions.distribution_to_json: the same JSON text for the same
    distribution."""
    return json.dumps(_distribution_json(dist))


def check_distribution_compatibility(dist_old, dist_new):
    """optuna.distributions.check_distribution_compatibility, with its messages."""
    if type(dist_old).__name__ != type(dist_new).__name__:
        raise ValueError("Cannot set different distribution kind to the same parameter name.")
    if isinstance(dist_old, (FloatDistribution, IntDistribution)):
        if dist_old.log != dist_new.log:
            raise ValueError("Cannot set different log configuration to the same parameter name.")
    if not isinstance(dist_old, CategoricalDistribution):
        return
    if dist_old != dist_new:
        raise ValueError("CategoricalDistribution does not support dynamic value space.")


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

    def request(self, msg, is_answer):
        """Send ``msg`` and wait for the message ``is_answer`` accepts; return that message.

        Stale or unknown messages that arrive meanwhile are ignored; ``shutdown`` exits 0
        and end of file exits quietly.
        """
        with self._rlock:
            self.send(msg)
            while True:
                answer = self.recv()
                if answer is None:
                    _exit_quietly()
                if is_answer(answer):
                    return answer
                kind = answer.get("type")
                if kind == "shutdown":
                    _flush_std_streams()
                    sys.exit(0)
                if kind == "trial":
                    _warn("ignoring a trial message received while a trial is running")
                _note_refusal(answer)
                # Anything else (stale answers, unknown types): ignore.

    def request_prune(self, trial_id, step, value):
        """Send a report and wait for sweepd's prune answer."""
        answer = self.request(
            {"type": "report", "trial_id": trial_id, "step": step, "value": value},
            lambda m: m.get("type") == "prune" and m.get("trial_id") == trial_id,
        )
        if isinstance(answer.get("error"), str):
            # A study with several objectives: Optuna raises the same.
            raise NotImplementedError(answer["error"])
        return answer.get("prune") is True

    def request_param(self, trial_id, name, distribution):
        """Send a suggest (protocol 2) and wait for sweepd's param answer."""
        return self.request(
            {"type": "suggest", "trial_id": trial_id, "name": name,
             "distribution": _distribution_json(distribution)},
            lambda m: (m.get("type") == "param" and m.get("trial_id") == trial_id
                       and m.get("name") == name),
        )


def _note_refusal(msg):
    """sweepd refused a user attribute or a constraint (neither has an answer to wait for):
    say so on stderr."""
    what = {"user_attr_refused": "user attribute", "constraint_refused": "constraint"}
    if msg.get("type") in what:
        _warn("sweepd refused %s %r: %s"
              % (what[msg["type"]], _clean_str(str(msg.get("key")))[:100],
                 _clean_str(str(msg.get("error")))))


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
    _watch_for_sweepd_gone(fd)
    return chan


def _watch_for_sweepd_gone(fd):
    """Exit at once when sweepd's end of the channel closes, even mid-trial.

    The main thread reads the channel only between trials and at reports, so a
    trial that runs for an hour without reporting would otherwise keep its GPU
    memory for that hour after sweepd died (kill -9, the OOM killer), with no
    one to take its result. A thread waits for the hang-up without reading (the
    main thread's messages stay where they are). Where poll() cannot watch the
    descriptor (not Linux), only the main thread's reads notice.

    The wait is a second at a time: a poll under way holds the socket open, and
    a worker that closes its own channel must close it for sweepd to see (it
    is then treated as dead). The watch ends when the descriptor no longer
    names the channel.
    """
    rdhup = getattr(select, "POLLRDHUP", 0)
    hangup = rdhup | select.POLLHUP | select.POLLERR
    try:
        channel = os.fstat(fd)
        poller = select.poll()
        poller.register(fd, rdhup)
    except (AttributeError, OSError, ValueError):
        return

    def still_the_channel():
        try:
            st = os.fstat(fd)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == (channel.st_dev, channel.st_ino)

    def watch():
        while True:
            try:
                events = poller.poll(1000)
            except OSError:
                return
            # A closed descriptor (POLLNVAL) or another file under its number ends the
            # watch here.
            if not still_the_channel():
                return
            if any(ev & hangup for _, ev in events):
                _exit_quietly()

    threading.Thread(target=watch, name="sweepd-channel-watch", daemon=True).start()


# --------------------------------------------------------------------------
# Trials


class _ReadOnly(collections.abc.Mapping):
    """A mapping the objective can read but not change (Optuna's ``system_attrs`` are a copy;
    here a change would be lost, so it is refused)."""

    def __init__(self, data):
        self._data = copy.deepcopy(data)

    def __getitem__(self, key):
        return copy.deepcopy(self._data[key])

    def __iter__(self):
        return iter(self._data)

    def __len__(self):
        return len(self._data)

    def __repr__(self):
        return repr(self._data)


class StudyInfo(object):
    """``trial.study``: what a worker knows of its study (read-only): ``study_name``,
    ``directions`` and, for a single objective, ``direction`` (``"minimize"`` or
    ``"maximize"``, as strings: Optuna is never imported) and ``best_value`` (the best value
    of the study's COMPLETE trials when sweepd handed the trial over)."""

    __slots__ = ("_name", "_directions", "_best_value")

    def __init__(self, info):
        name = info.get("name")
        directions = info.get("directions")
        best = info.get("best_value")
        object.__setattr__(self, "_name", name if isinstance(name, str) else None)
        object.__setattr__(self, "_directions",
                           tuple(d for d in directions if isinstance(d, str))
                           if isinstance(directions, list) else ())
        object.__setattr__(self, "_best_value",
                           float(best) if isinstance(best, (int, float))
                           and not isinstance(best, bool) else None)

    def __setattr__(self, name, value):
        raise AttributeError("trial.study is read-only in a sweepd worker")

    @property
    def study_name(self):
        return self._name

    @property
    def directions(self):
        return list(self._directions)

    @property
    def direction(self):
        if len(self._directions) != 1:
            raise RuntimeError("a multi-objective study has no single direction; use directions")
        return self._directions[0]

    @property
    def best_value(self):
        """As Optuna's ``study.best_value``: ValueError while no trial is complete,
        RuntimeError for a study with several objectives."""
        if len(self._directions) > 1:
            raise RuntimeError("a single best value cannot be retrieved from a multi-objective "
                               "study; read its Pareto front with `sweepd best` or Optuna")
        if self._best_value is None:
            raise ValueError("Record does not exist: no trial of the study is complete yet")
        return self._best_value

    def __repr__(self):
        return "StudyInfo(study_name=%r, directions=%r)" % (self._name, list(self._directions))


class Trial(object):
    """One trial handed to the objective, with Optuna's trial API.

    Attributes:
        number: the trial's number within the study (0, 1, 2, ...).
        id: the trial's id (Optuna's trial_id).
        datetime_start: a naive local ``datetime.datetime``: when the trial started, as sweepd
            says in the trial message (``datetime_start``), else when this process got it.
        memory_cap: the bytes the trial's framework allocator may hold on its device (sweepd's
            cap: ``memory_cap`` of the trial message, or ``SWEEPD_MEMORY_CAP``), or None. The
            helper enforces it with PyTorch and TensorFlow; a worker without one reads it here.
        checkpoint_dir: the trial's checkpoint directory (``checkpoint_dir`` of the trial
            message, or ``SWEEPD_CHECKPOINT_DIR``), or None: one per original trial, shared
            by its retries, so what an attempt saves there the next one finds.
        system_attrs: read-only; on a retry, Optuna's ``failed_trial`` and ``retry_history``
            (what ``optuna.storages.RetryFailedTrialCallback.retry_history(trial)`` reads).
        study: read-only; the study as a worker knows it: ``study_name``, ``directions``
            (``"minimize"``/``"maximize"``) and ``direction`` (a single-objective study's).

    Properties (copies, as in Optuna): ``params`` (name -> value: float, int, or the
    categorical choice itself; the values sweepd sampled up front plus those suggested so
    far), ``distributions`` (name -> distribution, for the names suggested so far),
    ``user_attrs``.
    """

    memory_cap = None
    checkpoint_dir = None

    def __init__(self, trial_id, number, params, channel, protocol=PROTOCOL_VERSION,
                 datetime_start=None, system_attrs=None, study=None):
        self._system_attrs = _ReadOnly(system_attrs if isinstance(system_attrs, dict) else {})
        self._study = StudyInfo(study if isinstance(study, dict) else {})
        self.id = trial_id
        self.number = number
        self.datetime_start = (
            datetime_start if datetime_start is not None else datetime.datetime.now()
        )
        self._presampled = dict(params) if params else {}
        self._params = dict(self._presampled)
        self._distributions = {}
        self._user_attrs = {}
        self._channel = channel
        self._protocol = protocol
        self._should_prune = False
        self._finished = False
        self._warned_user_attrs = False
        self._constraints = {}
        self._warned_constraints = False

    # -- attributes ---------------------------------------------------------

    @property
    def params(self):
        return dict(self._params)

    @property
    def distributions(self):
        return dict(self._distributions)

    @property
    def user_attrs(self):
        return copy.deepcopy(self._user_attrs)

    @property
    def system_attrs(self):
        return self._system_attrs

    @property
    def study(self):
        return self._study

    def _check_running(self, what):
        if self._finished:
            raise RuntimeError("Trial.%s() called after the trial finished" % (what,))

    # -- suggest ------------------------------------------------------------

    def suggest_float(self, name, low, high, *, step=None, log=False):
        """Optuna's ``suggest_float``: a float in [low, high] (log scale, or in steps)."""
        return self._suggest("suggest_float", name, FloatDistribution(low, high, log=log, step=step))

    def suggest_int(self, name, low, high, *, step=1, log=False):
        """Optuna's ``suggest_int``: an int in [low, high] (log scale, or in steps)."""
        return int(self._suggest("suggest_int", name,
                                 IntDistribution(low, high, log=log, step=step)))

    def suggest_categorical(self, name, choices):
        """Optuna's ``suggest_categorical``: one of ``choices`` (None, bool, int, float, str)."""
        return self._suggest("suggest_categorical", name, CategoricalDistribution(choices))

    def suggest_uniform(self, name, low, high):
        """Deprecated in Optuna 3.0: ``suggest_float(name, low, high)``."""
        _deprecated("suggest_uniform", "suggest_float")
        return self._suggest("suggest_uniform", name, FloatDistribution(low, high))

    def suggest_loguniform(self, name, low, high):
        """Deprecated in Optuna 3.0: ``suggest_float(name, low, high, log=True)``."""
        _deprecated("suggest_loguniform", "suggest_float(..., log=True)")
        return self._suggest("suggest_loguniform", name, FloatDistribution(low, high, log=True))

    def suggest_discrete_uniform(self, name, low, high, q):
        """Deprecated in Optuna 3.0: ``suggest_float(name, low, high, step=q)``."""
        _deprecated("suggest_discrete_uniform", "suggest_float(..., step=...)")
        return self._suggest("suggest_discrete_uniform", name,
                             FloatDistribution(low, high, step=q))

    def _suggest(self, method, name, dist):
        self._check_running(method)
        if not isinstance(name, str):
            raise TypeError("Trial.%s(): the parameter name must be a str, got %s"
                            % (method, _short_repr(name)))
        old = self._distributions.get(name)
        if old is not None:
            # Asked before in this trial: Optuna's rules, and the first value.
            if old != dist:
                check_distribution_compatibility(old, dist)
                _warn_user(
                    'Inconsistent parameter values for distribution with name "%s"! '
                    "This might be a configuration mistake. "
                    "Optuna allows to call the same distribution with the same "
                    "name more than once in a trial. "
                    "When the parameter values are inconsistent optuna only "
                    "uses the values of the first call and ignores all following. "
                    "Using these values: %s" % (name, old._asdict()),
                    RuntimeWarning,
                )
            return self._params[name]
        if self._channel is not None and self._protocol >= 2:
            value = self._ask(method, name, dist)
        elif name in self._presampled:
            value = self._presampled_value(method, name, dist)
        elif self._channel is not None:
            raise RuntimeError(
                "Trial.%s(%r): this sweepd speaks protocol 1, which samples only the "
                "parameters of the study's [params]: define your search space in [params] "
                "(%r is not there), or run a sweepd that speaks protocol 2"
                % (method, name, name)
            )
        else:
            raise RuntimeError(
                "Trial.%s(%r): %r is not among this trial's params, and this worker has no "
                "channel to sweepd (SWEEPD_FD is not set) to ask for it: define %r in the "
                "study's [params]" % (method, name, name, name)
            )
        self._distributions[name] = dist
        self._params[name] = value
        return value

    def _ask(self, method, name, dist):
        """Protocol 2: sweepd samples the value (or refuses the distribution)."""
        answer = self._channel.request_param(self.id, name, dist)
        error = answer.get("error")
        if error is not None:
            raise ValueError(_clean_str(error))
        if "value" not in answer:
            raise RuntimeError(
                "Trial.%s(%r): sweepd's answer has neither a value nor an error: %s"
                % (method, name, _short_repr(answer))
            )
        value = _param_from_wire(dist, answer["value"])
        if value is _BAD_VALUE:
            raise RuntimeError(
                "Trial.%s(%r): sweepd answered %s, which is not a value of %r"
                % (method, name, _short_repr(answer["value"]), dist)
            )
        return value

    def _presampled_value(self, method, name, dist):
        """Protocol 1 (or no channel): the value sweepd sampled from [params], checked."""
        raw = self._presampled[name]
        if isinstance(dist, CategoricalDistribution):
            index = dist.index_of(raw)
            if index is not None:
                return dist.choices[index]
        elif isinstance(raw, (int, float)) and not isinstance(raw, bool):
            if (isinstance(raw, int) or math.isfinite(raw)) and dist._contains(float(raw)):
                return int(raw) if isinstance(dist, IntDistribution) else float(raw)
        raise ValueError(
            "Trial.%s(%r): this trial's value %s, sampled by sweepd from the study's "
            "[params], is not in %r: make the objective's search space and [params] agree"
            % (method, name, _short_repr(raw), dist)
        )

    # -- report and prune ---------------------------------------------------

    def report(self, *args, **kwargs):
        """Optuna's ``report(value, step)``: an intermediate objective value at ``step``.

        ``value`` is a float (or anything float() accepts), ``step`` a non-negative integer.
        Blocks until sweepd has decided whether the trial should be pruned; returns that
        decision (also what :meth:`should_prune` says). A call that can only be the old order
        ``report(step, value)`` (an integer, then a number with a fraction) is a TypeError.
        """
        value, step = _report_args(args, kwargs)
        self._check_running("report")
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

    # -- user attributes ----------------------------------------------------

    def set_user_attr(self, key, value):
        """Optuna's ``set_user_attr``: a JSON-serializable value, stored with the trial."""
        self._check_running("set_user_attr")
        if not isinstance(key, str):
            raise TypeError("Trial.set_user_attr(): the key must be a str, got %s"
                            % (_short_repr(key),))
        _check_user_attr_key(key)
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise TypeError(
                "Trial.set_user_attr(%r, ...): the value must be JSON-serializable "
                "(and finite): %s" % (key, exc)
            )
        _check_carried(value, key)
        if self._channel is not None and self._protocol >= 2:
            self._channel.send(
                {"type": "user_attr", "trial_id": self.id, "key": key, "value": value}
            )
        elif not self._warned_user_attrs:
            self._warned_user_attrs = True
            _warn("this sweepd %s: user attributes stay in this process and are not stored"
                  % ("speaks protocol 1" if self._channel is not None else
                     "channel is not open (SWEEPD_FD is not set)",))
        self._user_attrs[key] = copy.deepcopy(value)

    # -- constraints (Optuna 5) ----------------------------------------------

    @property
    def constraints(self):
        """Optuna 5's ``trial.constraints``: the values ``set_constraint`` set, by key."""
        return dict(self._constraints)

    def set_constraint(self, key, value):
        """Optuna 5's ``set_constraint(key, value)``: the trial is feasible when every
        constraint value is 0 or less. sweepd stores it as Optuna does (the system attribute
        ``constraints:<key>``) and its TPE, NSGA-II and GP samplers steer away from infeasible
        trials. A key set again keeps its first value (a warning, as Optuna)."""
        self._check_running("set_constraint")
        if not isinstance(key, str):
            raise TypeError("Trial.set_constraint(): the key must be a str, got %s"
                            % (_short_repr(key),))
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise TypeError("The `value` argument is of type '%s' but supposed to be a float."
                            % (type(value),)) from None
        if math.isnan(value):
            raise ValueError("Attempted to set a constraint for %r, but NaN is not allowed."
                             % (key,))
        _check_constraint_key(key)
        if key in self._constraints:
            _warn_user("The constraint value is ignored because this constraint `key=%r` is "
                       "already set." % (key,))
            return
        if self._channel is not None and self._protocol >= 2:
            self._channel.send({"type": "constraint", "trial_id": self.id, "key": key,
                                "value": _wire_float(value)})
        elif not self._warned_constraints:
            self._warned_constraints = True
            _warn("this sweepd %s: constraints stay in this process and are not stored"
                  % ("speaks protocol 1" if self._channel is not None else
                     "channel is not open (SWEEPD_FD is not set)",))
        self._constraints[key] = value

    def __repr__(self):
        return "Trial(id=%r, number=%r, params=%r)" % (self.id, self.number, self._params)


_BAD_VALUE = object()


def _param_from_wire(dist, value):
    """A param value from sweepd in external form, or _BAD_VALUE if it is not one of dist's."""
    if isinstance(dist, CategoricalDistribution):
        index = dist.index_of(value)
        return _BAD_VALUE if index is None else dist.choices[index]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _BAD_VALUE
    if isinstance(dist, IntDistribution):
        as_int = _integral(value)
        return _BAD_VALUE if as_int is None else as_int
    value = float(value)
    return value if math.isfinite(value) else _BAD_VALUE


def _deprecated(name, instead):
    _warn_user(
        "%s has been deprecated in v3.0.0. This feature will be removed in v6.0.0. "
        "See https://github.com/optuna/optuna/releases/tag/v3.0.0. Use %s instead."
        % (name, instead),
        FutureWarning,
    )


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


def _ready_message(protocol):
    return {"type": "ready", "pid": os.getpid(), "protocol": protocol}


def _negotiate_protocol():
    """The protocol version to speak: the lower of sweepd's (SWEEPD_PROTOCOL) and ours.

    A sweepd that does not say speaks version 1.
    """
    raw = os.environ.get("SWEEPD_PROTOCOL")
    if raw is None or raw.strip() == "":
        return 1
    try:
        theirs = int(raw)
    except ValueError:
        _warn("SWEEPD_PROTOCOL=%r is not a number; speaking protocol 1" % (raw,))
        return 1
    if theirs < 1:
        _warn("SWEEPD_PROTOCOL=%r is not a protocol version; speaking protocol 1" % (raw,))
        return 1
    if theirs > PROTOCOL_VERSION:
        _warn(
            "sweepd speaks protocol %d, this helper (version %s) speaks up to %d; speaking %d"
            % (theirs, __version__, PROTOCOL_VERSION, PROTOCOL_VERSION)
        )
    return min(theirs, PROTOCOL_VERSION)


def _parse_datetime(raw):
    """``datetime_start`` from sweepd (ISO 8601) as a naive local datetime, or None."""
    if not isinstance(raw, str) or not raw:
        return None
    text = raw.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        dt = datetime.datetime.fromisoformat(text)
    except ValueError:
        _warn("ignoring an unreadable datetime_start from sweepd: %r" % (raw[:100],))
        return None
    if dt.tzinfo is not None:
        dt = dt.astimezone().replace(tzinfo=None)
    return dt


# --------------------------------------------------------------------------
# Modes


def _checkpoint_dir(raw):
    """The trial's checkpoint directory, also put in ``SWEEPD_CHECKPOINT_DIR`` for code that
    reads the environment (a persistent worker's changes from trial to trial)."""
    if isinstance(raw, str) and raw:
        os.environ["SWEEPD_CHECKPOINT_DIR"] = raw
        return raw
    os.environ.pop("SWEEPD_CHECKPOINT_DIR", None)
    return None


def _persistent_trial(objective, chan, protocol, trial_id, number, params, started, cap, msg):
    # A function of its own so that the trial, its value and any exception
    # (with the frames it holds) are released before waiting for the next one.
    trial = Trial(trial_id, number, params, chan, protocol, started,
                  system_attrs=msg.get("system_attrs"), study=msg.get("study"))
    trial.memory_cap = cap
    trial.checkpoint_dir = _checkpoint_dir(msg.get("checkpoint_dir"))
    sweepd_memory.MEMORY.start_trial(chan, trial_id, cap)
    outcome, payload = _run_objective(objective, trial)
    sweepd_memory.MEMORY.end_trial()
    _flush_std_streams()
    memory = sweepd_memory.framework_memory()
    if outcome == "error":
        memory = sweepd_memory.MEMORY.error_figures(payload[0], memory)
    msg = _outcome_message(trial_id, outcome, payload)
    if memory is not None:
        msg["memory"] = memory
    # The trial's objects (an exception's frames included) go before the caches are emptied,
    # and the caches before sweepd hears the trial ended: it may admit the next trial into this
    # memory at once.
    del trial, payload
    release_caches()
    if memory is not None:
        reserved = sweepd_memory.framework_reserved()
        if reserved is not None:
            memory["reserved"] = reserved
    chan.send(msg)


def _outcome_message(trial_id, outcome, payload):
    if outcome == "ok":
        return {"type": "result", "trial_id": trial_id,
                "value": _encode_result_value(payload)}
    if outcome == "pruned":
        return {"type": "pruned", "trial_id": trial_id}
    exc, tb = payload
    return _error_message(trial_id, exc, tb)


def _ready_with_memory(protocol):
    """``ready``, with what the framework says of the process where it is initialised."""
    msg = _ready_message(protocol)
    memory = sweepd_memory.MEMORY.ready_memory()
    if memory is not None:
        msg["memory"] = memory
    return msg


def _serve_persistent(objective, protocol):
    chan = _open_channel(required=True)
    chan.send(_ready_with_memory(protocol))
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
            _persistent_trial(objective, chan, protocol, trial_id, msg.get("number"), params,
                              _parse_datetime(msg.get("datetime_start")),
                              sweepd_memory.cap_from_trial(msg), msg)
        elif kind == "shutdown":
            _flush_std_streams()
            sys.exit(0)
        else:
            _note_refusal(msg)
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


def _env_json(name):
    """A JSON object from the environment; None (with a warning if set) otherwise."""
    raw = os.environ.get(name)
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        _warn("ignoring %s: not a JSON object" % (name,))
        return None
    return value


def _env_study():
    """The study as a oneshot worker's environment names it (``SWEEPD_STUDY``,
    ``SWEEPD_DIRECTIONS``, ``SWEEPD_BEST_VALUE``)."""
    directions = os.environ.get("SWEEPD_DIRECTIONS")
    best = None
    try:
        best = float(os.environ["SWEEPD_BEST_VALUE"])
    except (KeyError, ValueError):
        pass
    return {"name": os.environ.get("SWEEPD_STUDY"),
            "directions": directions.split(",") if directions else [], "best_value": best}


def _serve_oneshot(objective, protocol):
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
    cap = sweepd_memory.MEMORY.spawn_cap
    if chan is not None:
        chan.send(_ready_with_memory(protocol))

    trial = Trial(trial_id, number, params, chan, protocol,
                  system_attrs=_env_json("SWEEPD_SYSTEM_ATTRS"), study=_env_study())
    trial.memory_cap = cap
    trial.checkpoint_dir = os.environ.get("SWEEPD_CHECKPOINT_DIR") or None
    sweepd_memory.MEMORY.start_trial(chan, trial_id, cap)
    outcome, payload = _run_objective(objective, trial)
    sweepd_memory.MEMORY.end_trial()
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
        msg = _error_message(trial_id, exc, tb)
        memory = sweepd_memory.MEMORY.error_figures(exc, sweepd_memory.framework_memory())
        if memory is not None:
            msg["memory"] = memory
        chan.send(msg)
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
    protocol = _negotiate_protocol()
    if mode == "persistent":
        _serve_persistent(objective, protocol)
    elif mode == "oneshot":
        _serve_oneshot(objective, protocol)
    else:
        raise RuntimeError(
            "sweepd_worker.serve(): unknown SWEEPD_MODE %r (expected 'persistent' "
            "or 'oneshot'); this script must be started by sweepd" % (mode,)
        )


# The spawn's memory cap (SWEEPD_MEMORY_CAP), applied before the script's first allocation.
sweepd_memory.at_import()
