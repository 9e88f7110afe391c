"""Build and runtime facts: `show_config`."""
from __future__ import annotations

import platform
import sys
from typing import Any

import numpy as np

from ndws import _core

__all__ = ["show_config"]

__version__ = "0.1.0"


def _gemm_kernel(linalg: Any) -> str:
    info = linalg._gemm_info()
    f32, f64 = info["float32"], info["float64"]
    return (f"{info['isa']} (micro-kernel float32 {f32['mr']}x{f32['nr']}, "
            f"float64 {f64['mr']}x{f64['nr']})")


def _facts() -> dict[str, Any]:
    from ndws import _linalg   # lazily: ndws/__init__ imports this module before _linalg

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
        "address sanitizer": "on" if build["sanitized"] else "off",
        "threads": build["max_threads"],
        "gemm kernel": _gemm_kernel(_linalg),
        "gemm kernels this cpu can run": ", ".join(_linalg.available_isas()),
        "alignment (bytes)": _core.ALIGNMENT,
        "max dimensions": _core.MAXDIMS,
    }


def show_config(mode: str = "stdout") -> dict[str, Any] | None:
    """Report versions, the build (OpenMP on/off, flags), the kernel thread count and the GEMM
    kernel chosen for this CPU (see docs/kernels.md).

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
