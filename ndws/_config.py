"""Build and runtime facts: `show_config`."""
from __future__ import annotations

import platform
import sys
from typing import Any

import numpy as np

from ndws import _core

__all__ = ["show_config"]

__version__ = "0.1.0"


def _facts() -> dict[str, Any]:
    build = _core._build_info()
    return {
        "ndws": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "numpy": np.__version__,
        "numpy headers (build)": build["numpy_headers"],
        "cython (build)": build["cython"],
        "compiler flags": build["cflags"],
        "openmp": "on" if build["openmp"] else "off",
        "threads": build["max_threads"],
        "alignment (bytes)": _core.ALIGNMENT,
        "max dimensions": _core.MAXDIMS,
    }


def show_config(mode: str = "stdout") -> dict[str, Any] | None:
    """Report versions, the build (OpenMP on/off, flags) and the thread count.

    Parameters
    ----------
    mode : {"stdout", "dicts"}
        Print the report, or return it as a dict.
    """
    facts = _facts()
    if mode == "dicts":
        return facts
    if mode != "stdout":
        raise ValueError(f"mode: expected 'stdout' or 'dicts', got {mode!r}")
    width = max(len(k) for k in facts)
    for key, value in facts.items():
        print(f"{key:<{width}} : {value}")
    return None
