"""Argument checks shared by the evaluations: an error names the argument and the value, and
never surfaces from C (an ``OverflowError``) or from ``int('a')``."""
from __future__ import annotations

import numbers
from typing import Any

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
