"""Argument checks shared by the evaluations: an error names the argument and the value, and
never surfaces from C (an ``OverflowError``) or from ``int('a')``."""
from __future__ import annotations

import json
import numbers
from typing import Any

import numpy as np

#: the largest count or index the counting kernels take (a C int)
MAX_INT = 2**31 - 1


def int_arg(value: Any, name: str, minimum: int, maximum: int = MAX_INT) -> int:
    """`value` as an int in [minimum, maximum]: TypeError for anything that is not an integer
    (bools included), ValueError outside the range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r:.40}")
    if not minimum <= value <= maximum:
        raise ValueError(f"{name} must be in [{minimum}, {maximum}], got {value!r}")
    return int(value)


def index_arg(value: Any, name: str, n: int, what: str) -> int:
    """`value` as an index in [0, n) of `what` ("class", "column"), or a clear error."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r:.40}")
    if not 0 <= value < n:
        raise ValueError(f"{name}={value!r} is not a {what} index in [0, {n})")
    return int(value)


# -- from_dict / from_json: state that comes from a file ----------------------------------------

def parse_json(text: Any, owner: str) -> Any:
    """`text` parsed as JSON; a ValueError naming `owner` for anything else (deep nesting
    included)."""
    if not isinstance(text, (str, bytes, bytearray)):
        raise TypeError(f"{owner}.from_json: text must be a str, got {type(text).__name__}")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{owner}.from_json: not JSON text ({type(exc).__name__}: "
                         f"{exc})") from None


def fields(d: Any, owner: str, tag: tuple[str, str], names: tuple[str, ...]) -> dict:
    """`d` as a dict of exactly `tag` (key, value) and `names`, or a ValueError naming what
    is missing or unexpected."""
    key, value = tag
    if not isinstance(d, dict) or d.get(key) != value:
        got = d.get(key) if isinstance(d, dict) else d
        article = "an" if value[0] in "AEIOU" else "a"
        raise ValueError(f"{owner}.from_dict: not {article} {value} dict ({key}={got!r:.40})")
    missing = set(names) - set(d)
    unknown = set(d) - set(names) - {key}
    if missing or unknown:
        raise ValueError(f"{owner}.from_dict: missing fields {sorted(missing)}, unexpected "
                         f"fields {sorted(map(str, unknown))}")
    return d


def count_arg(value: Any, name: str) -> int:
    """A stored counter: an int in [0, 2**63)."""
    if type(value) is not int or not 0 <= value < 2**63:
        raise ValueError(f"{name} must be an int in [0, 2**63), got {value!r:.40}")
    return value


def table_arg(value: Any, name: str, shape: tuple[int, int], kind: type | tuple) -> np.ndarray:
    """A stored table: nested lists of `shape` whose entries are of `kind` (bools refused),
    checked element by element before an array is made."""
    rows, cols = shape
    if not isinstance(value, list) or len(value) != rows or not all(
            isinstance(r, list) and len(r) == cols for r in value):
        raise ValueError(f"{name} must be {rows} lists of {cols} entries")
    for r in value:
        for v in r:
            if isinstance(v, bool) or not isinstance(v, kind) or (
                    kind is int and not 0 <= v < 2**63):
                what = "a count in [0, 2**63)" if kind is int else "a number"
                raise ValueError(f"{name} holds {v!r:.40}, not {what}")
    return np.array(value, dtype=np.int64 if kind is int else np.float64).reshape(rows, cols)
