"""Argument checks of the public Python API: each turns a value of the wrong type or range into an InputError
that names the argument and says what was expected, before the value reaches numpy, the tokenizer or the
C++ bindings (where it would surface as a TypeError, ValueError, OverflowError or AttributeError).

`what` is the name the message gives, usually "method: argument" (e.g. "session: max_context").
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import re
import reprlib

import numpy as np

from ._core import InputError

SEED_LIMIT = 2**64          # seeds are unsigned 64-bit: [0, 2**64)
TOKEN_ID_LIMIT = 2**32      # the tokenizer's ids are u32
C_INT_MAX = 2**31 - 1       # the largest count the C++ bindings take as an int
_SURROGATE = re.compile("[\ud800-\udfff]")
_SHORT = reprlib.Repr()  # a huge value costs no huge repr in a message
for _name, _limit in (("maxlevel", 2), ("maxstring", 40), ("maxother", 40), ("maxlong", 40), ("maxlist", 4),
                      ("maxtuple", 4), ("maxdict", 4), ("maxset", 4), ("maxfrozenset", 4), ("maxdeque", 4),
                      ("maxarray", 4)):
    setattr(_SHORT, _name, _limit)


def short(value) -> str:
    """value's repr cut short (escaped: never a lone surrogate, which a message could not carry as UTF-8)."""
    try:
        return _SHORT.repr(value)
    except Exception:  # noqa: BLE001 - a hostile __repr__ must not replace the InputError
        return "<unprintable>"


def shown(value) -> str:
    """A bad value as a message shows it: its short repr and its type."""
    return f"{short(value)} ({type(value).__name__})"


def is_int(value) -> bool:
    """An integer (Python or numpy), booleans excluded."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_real(value) -> bool:
    """A finite real number as a float holds it (ints included, booleans, NaN, ±inf and ints past the float
    range not)."""
    if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, (bool, np.bool_)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int no float can hold
        return False


def _bounds(lo, hi, lo_open: bool = False, hi_open: bool = False) -> str:
    if lo is not None and hi is not None:
        return f" in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
    if lo is not None:
        return f" {'>' if lo_open else '>='} {lo}"
    if hi is not None:
        return f" {'<' if hi_open else '<='} {hi}"
    return ""


def integer(value, what: str, lo: int | None = None, hi: int | None = None) -> int:
    """value as an int, in [lo, hi] where given."""
    if not is_int(value) or (lo is not None and value < lo) or (hi is not None and value > hi):
        raise InputError(f"{what} must be an integer{_bounds(lo, hi)}, got {shown(value)}")
    return int(value)


def real(value, what: str, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
         hi_open: bool = False) -> float:
    """value as a finite float, within the bounds where given (lo_open / hi_open: the bound excluded)."""
    ok = is_real(value)
    if ok and lo is not None:
        ok = value > lo if lo_open else value >= lo
    if ok and hi is not None:
        ok = value < hi if hi_open else value <= hi
    if not ok:
        bounds = _bounds(lo, hi, lo_open, hi_open)
        expected = f"{bounds.strip()} (a finite number)" if bounds else "a finite number"
        raise InputError(f"{what} must be {expected}, got {shown(value)}")
    return float(value)


def boolean(value, what: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise InputError(f"{what} must be True or False, got {shown(value)}")
    return bool(value)


def one_of(value, what: str, choices: tuple):
    """The choice value equals (strings to strings, integers to integers: 64.0 is not 64, [4] is not 4)."""
    for choice in choices:
        if choice is None and value is None:
            return None
        if isinstance(choice, str) and isinstance(value, str) and value == choice:
            return choice
        if is_int(choice) and is_int(value) and value == choice:
            return choice
    listed = [repr(c) for c in choices]
    raise InputError(f"{what} must be {', '.join(listed[:-1])} or {listed[-1]}, got {shown(value)}")


def optional_list(value, what: str) -> list:
    """None as [], a list or tuple as a list."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise InputError(f"{what} must be a list (or None), got {shown(value)}")
    return list(value)


def path(value, what: str, error: type = InputError) -> str:
    """A file-system path (str, bytes or os.PathLike) as a str the C++ side can take (UTF-8, no NUL); `error`
    (InputError by default) names `what` otherwise."""
    if not isinstance(value, (str, bytes, os.PathLike)):
        raise error(f"{what} must be a path (str or os.PathLike), got {shown(value)}")
    try:
        p = os.fsdecode(value)
    except TypeError as e:  # an os.PathLike whose __fspath__ returns neither str nor bytes
        raise error(f"{what} must be a path (str or os.PathLike): {e}") from None
    if not p:
        raise error(f"{what} is empty")
    if "\0" in p:
        raise error(f"{what} holds a NUL character: {shown(p)}")
    if has_lone_surrogate(p):
        raise error(f"{what} is not valid UTF-8 (markbase opens UTF-8 paths): {shown(p)}")
    return p


def text(value, what: str) -> str:
    """A str that UTF-8 can encode (no lone surrogate), as the tokenizer needs."""
    if not isinstance(value, str):
        raise InputError(f"{what} must be a string, got {shown(value)}")
    _encodable(value, what)
    return value


def optional_text(value, what: str) -> str | None:
    return None if value is None else text(value, what)


def has_lone_surrogate(s: str) -> bool:
    """True when s holds a lone surrogate, which has no UTF-8 encoding."""
    return not s.isascii() and _SURROGATE.search(s) is not None  # isascii is O(1) in CPython


def _encodable(s: str, what: str) -> None:
    m = None if s.isascii() else _SURROGATE.search(s)
    if m:
        raise InputError(f"{what} holds a lone surrogate (U+{ord(m.group()):04X}) at index {m.start()}: text must "
                         f"be valid Unicode (a lone surrogate has no UTF-8 encoding)")


def reject_surrogates(value, where: str) -> None:
    """InputError naming where (e.g. "messages[0].content[1].text") when a string anywhere in value, a nest
    of lists, tuples and dicts (keys included), holds a lone surrogate. Walked without recursion."""
    stack = [(value, (where, None))]  # (item, its location as a (label, parent location) chain)
    seen: set[int] = set()
    while stack:
        item, at = stack.pop()
        if isinstance(item, str):
            if has_lone_surrogate(item):  # (the location is built only for the bad string)
                _encodable(item, _location(at))
            continue
        if not isinstance(item, (list, tuple, dict)) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, dict):
            children = []
            for key, child in item.items():
                label = f".{key}" if isinstance(key, str) and key.isidentifier() else f"[{short(key)}]"
                if isinstance(key, str):
                    children.append((key, (f"{label} (a key)", at)))
                children.append((child, (label, at)))
        else:
            children = [(child, (f"[{i}]", at)) for i, child in enumerate(item)]
        stack.extend(reversed(children))  # first child on top: the first bad string in reading order


def _location(at) -> str:
    parts = []
    while at is not None:
        label, at = at
        parts.append(label)
    return "".join(reversed(parts))


def array(value, what: str, kinds: str | None = None, expected: str = "an array of numbers") -> np.ndarray:
    """np.asarray(value), with ragged nests and unconvertible items an InputError saying what was expected;
    kinds: the dtype kinds allowed ("i" signed, "u" unsigned, "f" float, "b" bool), None for any but object
    and strings."""
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError, OverflowError) as e:
        raise InputError(f"{what} must be {expected}, not a ragged or mixed nest ({e})") from None
    if arr.dtype.kind in "OUSV" or (kinds is not None and arr.dtype.kind not in kinds):
        raise InputError(f"{what} must be {expected}, got dtype {arr.dtype}")
    return arr


def seed(value, what: str = "seed") -> int:
    """A sampling seed: an integer in [0, 2**64)."""
    if not is_int(value) or not 0 <= value < SEED_LIMIT:
        raise InputError(f"{what} must be an integer in [0, 2**64), got {shown(value)}")
    return int(value)


def nth_seed(base: int, i: int) -> int:
    """The seed of the i-th of several sequences started from one seed (wrapping past 2**64 - 1 to 0)."""
    return (base + i) % SEED_LIMIT


def keywords(given: dict, accepted, what: str) -> None:
    """InputError naming the first keyword of `given` that is not in `accepted`."""
    unknown = [k for k in given if k not in accepted]
    if unknown:
        raise InputError(f"{what}: unknown keyword argument {unknown[0]!r} (accepted: {', '.join(sorted(accepted))})")


def checked_call(fn):
    """Makes a call that does not fit fn's signature (an unknown keyword, a missing or extra argument) an
    InputError naming it instead of Python's TypeError. Costs nothing on calls that bind: the signature
    is consulted only when the call raised a TypeError."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TypeError:
            try:
                signature.bind(*args, **kwargs)
            except TypeError as e:
                raise InputError(f"{fn.__qualname__}: {e}") from None
            raise  # raised inside fn: not an argument mismatch

    return call
