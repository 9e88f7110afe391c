"""Build of ndws' Cython extensions. Metadata lives in pyproject.toml.

Environment switches:
  NDWS_NO_OPENMP=1      build without OpenMP even where the compiler supports it
  NDWS_CYTHON_DEBUG=1   turn Cython's bounds/wraparound/initialization checks back on
  NDWS_MARCH_NATIVE=1   add -march=native (opt-in: the wheel then only runs on this CPU type)
"""
import os
import shutil
import sys
import tempfile

import numpy
from Cython.Build import cythonize
import Cython
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

DEBUG = os.environ.get("NDWS_CYTHON_DEBUG") == "1"

# Cython directives, set once for every module.
DIRECTIVES = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    "cdivision": not DEBUG,
    "embedsignature": True,
    "binding": True,
}

OPENMP_PROBE = r"""
#include <omp.h>
int main(void) {
    int n = 0;
    #pragma omp parallel reduction(+:n)
    n += 1;
    return n > 0 ? 0 : 1;
}
"""


def _c_string(value):
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class BuildExt(build_ext):
    """Adds -O3 and, when a tiny OpenMP program compiles and links, -fopenmp."""

    def _openmp_flags(self):
        if os.environ.get("NDWS_NO_OPENMP") == "1":
            return None
        if self.compiler.compiler_type == "msvc":
            candidates = [(["/openmp"], [])]
        else:
            candidates = [(["-fopenmp"], ["-fopenmp"])]
        for cflags, lflags in candidates:
            tmp = tempfile.mkdtemp(prefix="ndws-omp-")
            try:
                src = os.path.join(tmp, "probe.c")
                with open(src, "w") as f:
                    f.write(OPENMP_PROBE)
                objs = self.compiler.compile([src], output_dir=tmp, extra_postargs=cflags)
                self.compiler.link_executable(objs, "probe", output_dir=tmp,
                                              extra_postargs=lflags)
                return cflags, lflags
            except Exception:  # any compile/link failure means: no OpenMP here
                continue
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        return None

    def build_extensions(self):
        omp = self._openmp_flags()
        if self.compiler.compiler_type == "msvc":
            cflags = ["/O2"]
        else:
            cflags = ["-O3"]
            if os.environ.get("NDWS_MARCH_NATIVE") == "1":
                cflags.append("-march=native")
        lflags = []
        if omp is not None:
            cflags += omp[0]
            lflags += omp[1]
        info = " ".join(cflags)
        print(f"ndws: OpenMP {'enabled' if omp else 'disabled'}; cflags: {info}")
        for ext in self.extensions:
            ext.extra_compile_args = list(ext.extra_compile_args or []) + cflags
            ext.extra_link_args = list(ext.extra_link_args or []) + lflags
            ext.define_macros = list(ext.define_macros or []) + [
                ("NDWS_BUILD_CFLAGS", _c_string(info)),
            ]
        super().build_extensions()


def extension(name):
    return Extension(
        name,
        [name.replace(".", os.sep) + ".pyx"],
        include_dirs=[numpy.get_include()],
        define_macros=[
            ("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"),
            ("NDWS_BUILD_CYTHON_VERSION", _c_string(Cython.__version__)),
            ("NDWS_BUILD_NUMPY_VERSION", _c_string(numpy.__version__)),
        ],
    )


setup(
    ext_modules=cythonize(
        [extension("ndws._core")],
        compiler_directives=DIRECTIVES,
        annotate=False,
    ),
    cmdclass={"build_ext": BuildExt},
)
