"""Build of ndws' Cython extensions. Metadata lives in pyproject.toml.

Environment switches:
  NDWS_NO_OPENMP=1      build without OpenMP even where the compiler supports it
  NDWS_CYTHON_DEBUG=1   turn Cython's bounds/wraparound/initialization checks back on
  NDWS_MARCH_NATIVE=1   add -march=native (opt-in: the wheel then only runs on this CPU type)
  NDWS_SANITIZE=1       AddressSanitizer + UndefinedBehaviorSanitizer build, OpenMP kept (see
                        docs/kernels.md, "Sanitizer builds", for running the suite under it)
  NDWS_BUILD_ONLY=a,b   development: build only these modules (e.g. ndws._linalg), so parallel
                        builds of different modules (with separate --build-temp) do not collide
"""
import os
import platform
import shlex
import shutil
import sys
import tempfile

import numpy
from Cython.Build import cythonize
import Cython
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

DEBUG = os.environ.get("NDWS_CYTHON_DEBUG") == "1"
SANITIZE = os.environ.get("NDWS_SANITIZE") == "1"
#: compile and link flags of NDWS_SANITIZE=1 (gcc and clang spell them alike); -O1 keeps the
#: reports' stacks readable at a bearable speed
SANITIZE_FLAGS = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g"]

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


# The GEMM kernel source (ndws/_gemm_kernel.pxi) is compiled once per instruction set, as one
# small module each; ndws._linalg picks one at import by the CPU's features, so a portable build
# still reaches the fast path without -march=native. The baseline module needs no flags (x86-64
# means SSE2; other machines build only this one).
X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86")
GEMM_ISAS = {
    "baseline": {"unix": [], "msvc": []},
    "avx2": {"unix": ["-mavx2", "-mfma"], "msvc": ["/arch:AVX2"]},
    "avx512": {"unix": ["-mavx512f", "-mavx512vl", "-mavx512bw", "-mavx512dq", "-mavx2",
                        "-mfma"], "msvc": ["/arch:AVX512"]},
}
#: flags of one module (GCC/Clang): the updaters' sqrt loops vectorize only without errno (a
#: sqrt that may set errno is a call the vectorizer cannot widen: Adam, RMSProp and AdaGrad ran
#: one element at a time, 18 ns each); the results are the same bits, NaN and inf included
MODULE_FLAGS = {"ndws.nn._updaters": ["-fno-math-errno"]}
ISA_PROBE = "#include <immintrin.h>\nint main(void) { return 0; }\n"


class BuildExt(build_ext):
    """Adds -O3, -fopenmp when a tiny OpenMP program compiles and links, and each GEMM module's
    instruction-set flags (dropping a module whose flags the compiler rejects)."""

    def _compiles(self, source, cflags):
        tmp = tempfile.mkdtemp(prefix="ndws-probe-")
        try:
            src = os.path.join(tmp, "probe.c")
            with open(src, "w") as f:
                f.write(source)
            self.compiler.compile([src], output_dir=tmp, extra_postargs=cflags)
            return True
        except Exception:  # any compile failure means: not supported here
            return False
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _openmp_flags(self):
        if os.environ.get("NDWS_NO_OPENMP") == "1":
            return None
        if self.compiler.compiler_type == "msvc":
            candidates = [(["/openmp"], [])]
        else:
            candidates = [(["-fopenmp"], ["-fopenmp"])]
        # The probe links like the extensions will: with LDFLAGS (distutils only adds them to
        # shared-library links) and the sanitizer runtime, or a sanitized CFLAGS would make the
        # probe fail to link and OpenMP silently switch off.
        probe_cflags = list(SANITIZE_FLAGS) if SANITIZE else []
        probe_lflags = shlex.split(os.environ.get("LDFLAGS", "")) + probe_cflags
        for cflags, lflags in candidates:
            tmp = tempfile.mkdtemp(prefix="ndws-omp-")
            try:
                src = os.path.join(tmp, "probe.c")
                with open(src, "w") as f:
                    f.write(OPENMP_PROBE)
                objs = self.compiler.compile([src], output_dir=tmp,
                                             extra_postargs=probe_cflags + cflags)
                self.compiler.link_executable(objs, "probe", output_dir=tmp,
                                              extra_postargs=probe_lflags + lflags)
                return cflags, lflags
            except Exception:  # any compile/link failure means: no OpenMP here
                continue
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        return None

    def build_extensions(self):
        omp = self._openmp_flags()
        lflags = []
        if self.compiler.compiler_type == "msvc":
            cflags = ["/O2"]
        elif SANITIZE:
            cflags = ["-O1"] + SANITIZE_FLAGS
            lflags = list(SANITIZE_FLAGS)
        else:
            # an optimisation level the user chose in CFLAGS wins (ours would come after it)
            user = shlex.split(os.environ.get("CFLAGS", ""))
            cflags = [] if any(f.startswith("-O") for f in user) else ["-O3"]
            if os.environ.get("NDWS_MARCH_NATIVE") == "1":
                cflags.append("-march=native")
        if omp is not None:
            cflags += omp[0]
            lflags += omp[1]
        info = " ".join(cflags)
        print(f"ndws: OpenMP {'enabled' if omp else 'disabled'}; cflags: {info}")
        flavour = "msvc" if self.compiler.compiler_type == "msvc" else "unix"
        kept = []
        for ext in self.extensions:
            isa_flags = []
            isa = ext.name[len("ndws._gemm_"):] if ext.name.startswith("ndws._gemm_") else None
            if isa is not None:
                isa_flags = GEMM_ISAS[isa][flavour]
                if isa_flags and not self._compiles(ISA_PROBE, isa_flags):
                    print(f"ndws: compiler rejects {' '.join(isa_flags)}; not building {ext.name}")
                    continue
            kept.append(ext)
            if flavour == "unix":
                isa_flags = isa_flags + MODULE_FLAGS.get(ext.name, [])
            ext.extra_compile_args = list(ext.extra_compile_args or []) + cflags + isa_flags
            ext.extra_link_args = list(ext.extra_link_args or []) + lflags
            ext.define_macros = list(ext.define_macros or []) + [
                ("NDWS_BUILD_CFLAGS", _c_string(info)),
            ]
        self.extensions = kept
        super().build_extensions()


def generate(template):
    """Write `x.pxi` from the Tempita template `x.pxi.tp` (when the template is newer), as
    NumPy and scikit-learn generate their repetitive Cython: one definition, many functions."""
    target = template[:-len(".tp")]
    if (not os.path.exists(target)
            or os.path.getmtime(template) > os.path.getmtime(target)):
        from Cython import Tempita
        with open(template, encoding="utf-8") as f:
            text = Tempita.sub(f.read())
        with open(target, "w", encoding="utf-8") as f:
            f.write(text)


generate("ndws/_entries.pxi.tp")


#: sources a module is compiled from besides its .pyx (an edit to them must rebuild it)
GEMM_DEPENDS = ["ndws/_gemm_kernel.pxi", "ndws/_gemm_types.pxd", "ndws/_simd.h"]
DEPENDS = {"ndws._ufuncs": ["ndws/_loops.pxi", "ndws/_entries.pxi", "ndws/_cmath.h",
                            "ndws/_poison.h", "ndws/_tls.h"],
           "ndws._core": ["ndws/_poison.h", "ndws/_tls.h", "ndws/_dlpack.h"],
           "ndws._arena": ["ndws/_poison.h", "ndws/_tls.h"],
           "ndws._memory": ["ndws/_poison.h"],
           "ndws._threads": ["ndws/_pool.h"],
           "ndws.nn._iteration": ["ndws/_tls.h"],
           "ndws.nn._updaters": ["ndws/nn/_upd_loops.h"],
           "ndws.nn._conv": ["ndws/nn/_winograd.pxi", "ndws/nn/_dw_loops.h"]}


def extension(name):
    return Extension(
        name,
        [name.replace(".", os.sep) + ".pyx"],
        depends=GEMM_DEPENDS if name.startswith("ndws._gemm_") else DEPENDS.get(name, []),
        include_dirs=[numpy.get_include()],
        define_macros=[
            ("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"),
            ("NDWS_BUILD_CYTHON_VERSION", _c_string(Cython.__version__)),
            ("NDWS_BUILD_NUMPY_VERSION", _c_string(numpy.__version__)),
        ],
    )


# in layer order (docs/architecture.md): each module cimports only modules listed before it
EXTENSIONS = [extension("ndws._memory"), extension("ndws._arena"), extension("ndws._threads"),
              extension("ndws._core"), extension("ndws._creation"), extension("ndws._dispatch"),
              extension("ndws._linalg"), extension("ndws._ufuncs"),
              extension("ndws.nn._activations"), extension("ndws.nn._losses"),
              extension("ndws.nn._updaters"), extension("ndws.nn._linear"),
              extension("ndws.nn._conv"), extension("ndws.nn._pool"),
              extension("ndws.nn._iteration"),
              extension("ndws.evaluation._counting"), extension("ndws.evaluation._roc_kernels"),
              extension("ndws.evaluation._regression_kernels"),
              extension("ndws.parallel._sync")]
EXTENSIONS += [extension(f"ndws._gemm_{isa}")
               for isa in GEMM_ISAS if X86 or isa == "baseline"]
if os.environ.get("NDWS_BUILD_ONLY"):
    _only = set(os.environ["NDWS_BUILD_ONLY"].split(","))
    EXTENSIONS = [e for e in EXTENSIONS if e.name in _only]


setup(
    ext_modules=cythonize(
        EXTENSIONS,
        compiler_directives=DIRECTIVES,
        annotate=False,
    ),
    cmdclass={"build_ext": BuildExt},
)
