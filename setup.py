"""Build of ndws' Cython extensions. Metadata lives in pyproject.toml.

Environment switches:
  NDWS_NO_OPENMP=1      build without OpenMP even where the compiler supports it
  NDWS_CYTHON_DEBUG=1   turn Cython's bounds/wraparound/initialization checks back on
  NDWS_MARCH_NATIVE=1   add -march=native (opt-in: the wheel then only runs on this CPU type)
  NDWS_SANITIZE=1       AddressSanitizer + UndefinedBehaviorSanitizer build, OpenMP kept (see
                        docs/kernels.md, "Sanitizer builds", for running the suite under it)
  NDWS_BUILD_ONLY=a,b   development: build only these modules (e.g. ndws._linalg), so parallel
                        builds of different modules (with separate --build-temp) do not collide

Builds are reused by content: a module is cythonized again only when one of its Cython inputs
(its .pyx and every .pxd / .pxi it uses, Cython's version, the directives) changed, and
compiled again only when its C source, a header, a compiler flag, an include directory's
headers, the compiler or a build switch changed; otherwise the module built last time with the
same inputs is copied from build/ndws-cache. So the README's second command (its own pip
build environment, whose fresh files would look newer to a timestamp check) reuses what the
first one built, and a build with other switches (NDWS_SANITIZE=1, NDWS_NO_OPENMP=1, CFLAGS)
never reuses one built without them.
"""
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time

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
MODULE_FLAGS = {"ndws.nn._updaters": ["-fno-math-errno"],
                # the per-activation loops are `cdef inline` helpers called with a literal
                # activation code; gcc kept them out of line (many call sites, large bodies),
                # so each element paid a switch on the code and no loop vectorised: forced
                # inline, each call site folds its code away
                "ndws.nn._activations": ["-DCYTHON_INLINE=inline __attribute__((always_inline))"]}
ISA_PROBE = "#include <immintrin.h>\nint main(void) { return 0; }\n"


ROOT = os.path.dirname(os.path.abspath(__file__))
#: modules built before, by content (see the module docstring); the KEEP_BUILDS most recently
#: used builds of each module are kept (say, the last edit, the one before, a sanitizer build)
CACHE = os.path.join(ROOT, "build", "ndws-cache")
KEEP_BUILDS = 3


def _sha(data):
    return hashlib.sha256(data).hexdigest()


def _file_sha(path):
    with open(path, "rb") as f:
        return _sha(f.read())


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', re.M)
_includes_of = {}


def _included_headers(sources, include_dirs):
    """(name, sha256) of every header `sources` include, directly or through another header,
    that is found next to the including file or in `include_dirs` (the project's, NumPy's,
    Python's; the C library's belong to the compiler's identity). By content and by name,
    not by path: NumPy's include directory moves with every pip build environment, its
    headers do not change."""
    dirs = [os.path.abspath(d) for d in include_dirs]
    found, todo = {}, [os.path.abspath(src) for src in sources]
    while todo:
        path = todo.pop()
        if path not in _includes_of:
            with open(path, encoding="utf-8", errors="replace") as f:
                _includes_of[path] = _INCLUDE.findall(f.read())
        for name in _includes_of[path]:
            for d in [os.path.dirname(path)] + dirs:
                header = os.path.normpath(os.path.join(d, name))
                if os.path.isfile(header):
                    if header not in found:
                        ours = header.startswith(os.path.join(ROOT, "ndws") + os.sep)
                        found[header] = os.path.relpath(header, ROOT if ours else d)
                        todo.append(header)
                    break
    return sorted((name, _file_sha(h)) for h, name in found.items())


def _switches():
    # the environment a build reads (the switches above, the compiler's variables)
    names = ("CC", "CXX", "CFLAGS", "CPPFLAGS", "LDFLAGS", "LDSHARED", "ARCHFLAGS")
    return sorted((k, v) for k, v in os.environ.items()
                  if (k in names or k.startswith("NDWS_")) and k != "NDWS_BUILD_ONLY")


def _store(path, source):
    # into the cache under a temporary name, then renamed: a concurrent build never sees half
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    shutil.copyfile(source, tmp)
    os.replace(tmp, path)


class BuildExt(build_ext):
    """Adds -O3, -fopenmp when a tiny OpenMP program compiles and links, and each GEMM module's
    instruction-set flags (dropping a module whose flags the compiler rejects); reuses a module
    built before from identical inputs (the module docstring)."""

    _compiler_version = None

    def _compiler_identity(self):
        # the compiler's own words about itself: an upgraded compiler at the same path is
        # another compiler
        if BuildExt._compiler_version is None:
            exe = (self.compiler.compiler_so or ["cc"])[0] \
                if self.compiler.compiler_type != "msvc" else "cl"
            try:
                out = subprocess.run([exe, "--version"], capture_output=True, text=True,
                                     timeout=60)
                BuildExt._compiler_version = out.stdout + out.stderr
            except (OSError, subprocess.SubprocessError) as exc:
                BuildExt._compiler_version = f"unknown ({exc})"
        return BuildExt._compiler_version

    def _cache_key(self, ext):
        """Everything the module's binary is made from: its C source, the project's headers it
        includes, the include directories' headers, flags, macros, compiler, Python,
        switches."""
        headers = _included_headers(ext.sources, list(ext.include_dirs or [])
                                    + list(self.include_dirs or []))
        parts = {
            "format": 1, "name": ext.name,
            "sources": [_file_sha(src) for src in ext.sources], "headers": headers,
            "ext": [ext.extra_compile_args, ext.extra_link_args, ext.define_macros,
                    ext.undef_macros, ext.libraries, ext.library_dirs, ext.runtime_library_dirs,
                    ext.extra_objects, ext.language],
            "compiler": [self.compiler.compiler_type,
                         getattr(self.compiler, "compiler_so", None),
                         getattr(self.compiler, "linker_so", None),
                         self._compiler_identity(), self.libraries, self.library_dirs,
                         self.define, self.undef, self.debug],
            "python": [sys.version, sysconfig.get_config_var("EXT_SUFFIX"), sys.platform,
                       platform.machine()],
            "switches": _switches(),
        }
        text = json.dumps(parts, sort_keys=True, default=str, indent=0)
        return _sha(text.encode())[:32], text

    def build_extension(self, ext):
        target = self.get_ext_fullpath(ext.name)
        key, parts = self._cache_key(ext)
        suffix = os.path.splitext(target)[1]
        cached = os.path.join(CACHE, "ext", f"{ext.name}-{key}{suffix}")
        if os.path.exists(cached) and not self.force:
            # a new file renamed over the old: a process that has the old one loaded keeps it
            _store(target, cached)
            os.utime(cached)                # the least recently used builds are dropped first
            print(f"ndws: {ext.name}: reused (built before from the same inputs)")
            return
        # a fresh compile: distutils' own timestamp check must not skip it
        self.force, force = True, self.force
        try:
            super().build_extension(ext)
        finally:
            self.force = force
        _store(cached, target)
        # what the build was made from, beside it: `diff` two of them to see why a module was
        # compiled again
        with open(cached[:-len(suffix)] + ".json", "w") as f:
            f.write(parts)
        kept = sorted((os.path.join(CACHE, "ext", n) for n in os.listdir(
            os.path.join(CACHE, "ext")) if n.startswith(ext.name + "-") and n.endswith(suffix)),
            key=os.path.getmtime, reverse=True)
        for old in kept[KEEP_BUILDS:]:
            for path in (old, old[:-len(suffix)] + ".json"):
                try:
                    os.unlink(path)
                except OSError:
                    pass

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


#: sources a module is compiled from besides its .pyx (an edit to them must rebuild it)
GEMM_DEPENDS = ["ndws/_gemm_kernel.pxi", "ndws/_gemm_types.pxd", "ndws/_simd.h"]
DEPENDS = {"ndws._ufuncs": ["ndws/_loops.pxi", "ndws/_entries.pxi", "ndws/_cmath.h",
                            "ndws/_vmath.h", "ndws/_poison.h", "ndws/_tls.h"],
           "ndws._fallback": ["ndws/_poison.h", "ndws/_tls.h"],
           "ndws._core": ["ndws/_poison.h", "ndws/_tls.h", "ndws/_dlpack.h"],
           "ndws._arena": ["ndws/_poison.h", "ndws/_tls.h"],
           "ndws._memory": ["ndws/_poison.h", "ndws/_pages.h"],
           "ndws._threads": ["ndws/_pool.h"],
           "ndws.nn._iteration": ["ndws/_tls.h"],
           "ndws.nn._activations": ["ndws/_vmath.h", "ndws/nn/_act_loops.h"],
           "ndws.nn._losses": ["ndws/_vmath.h", "ndws/nn/_act_loops.h"],
           "ndws.nn._pool": ["ndws/nn/_pool_loops.h"],
           "ndws.nn._rnn": ["ndws/_tls.h", "ndws/_vmath.h",
                            "ndws/nn/_rnn_cell.h"],
           "ndws.nn._updaters": ["ndws/nn/_upd_loops.h"],
           "ndws.nn._depthwise": ["ndws/nn/_dw_loops.h"],
           "ndws.nn._conv_few": ["ndws/nn/_few_loops.h", "ndws/nn/_conv_isa.h"],
           "ndws.nn._winograd": ["ndws/nn/_wino_loops.h", "ndws/nn/_conv_isa.h"]}


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
              extension("ndws._linalg"), extension("ndws._fallback"), extension("ndws._ufuncs"),
              extension("ndws.nn._activations"), extension("ndws.nn._act_entries"),
              extension("ndws.nn._losses"),
              extension("ndws.nn._updaters"), extension("ndws.nn._linear"),
              extension("ndws.nn._conv"), extension("ndws.nn._winograd"),
              extension("ndws.nn._conv_gemm"), extension("ndws.nn._conv_few"),
              extension("ndws.nn._conv2d"),
              extension("ndws.nn._depthwise"), extension("ndws.nn._pool"),
              extension("ndws.nn._rnn_args"), extension("ndws.nn._rnn"),
              extension("ndws.nn._rnn_entries"),
              extension("ndws.nn._iteration"),
              extension("ndws.evaluation._counting"), extension("ndws.evaluation._roc_kernels"),
              extension("ndws.evaluation._regression_kernels"),
              extension("ndws.parallel._sync")]
EXTENSIONS += [extension(f"ndws._gemm_{isa}")
               for isa in GEMM_ISAS if X86 or isa == "baseline"]
if os.environ.get("NDWS_BUILD_ONLY"):
    _only = set(os.environ["NDWS_BUILD_ONLY"].split(","))
    EXTENSIONS = [e for e in EXTENSIONS if e.name in _only]


def _cython_inputs(tree, ext):
    # a module's Cython inputs by content: its .pyx and every .pxd / .pxi it uses (NumPy's and
    # Cython's own included), Cython's version and the directives
    deps = sorted((os.path.basename(d), _file_sha(d)) for d in tree.all_dependencies(
        ext.sources[0]))
    return _sha(json.dumps([Cython.__version__, DIRECTIVES, deps], sort_keys=True).encode())


def cythonized(extensions):
    """cythonize(), regenerating only the .c of modules whose Cython inputs changed since it was
    written, judged by content: a new pip build environment's NumPy and Cython files are newer
    than the .c, not different. cythonize() itself judges by timestamps, so each .c is dated
    after its inputs when they are unchanged, and before them when they changed."""
    from Cython.Build.Dependencies import create_dependency_tree
    tree = create_dependency_tree(quiet=True)
    stale = []
    for ext in extensions:
        pyx = ext.sources[0]
        c_file = pyx[:-len(".pyx")] + ".c"
        stamp = os.path.join(CACHE, "cython", ext.name + ".json")
        deps = tree.all_dependencies(pyx)
        inputs = _cython_inputs(tree, ext)
        try:
            with open(stamp) as f:
                fresh = json.load(f) == {"inputs": inputs, "c": _file_sha(c_file)}
        except (OSError, ValueError):
            fresh = False
        if fresh:
            newest = max([os.path.getmtime(d) for d in deps] + [time.time()])
            os.utime(c_file, (newest + 1, newest + 1))
        else:
            if os.path.exists(c_file):
                os.utime(c_file, (0, 0))
            stale.append((stamp, inputs, c_file))
    modules = cythonize(extensions, compiler_directives=DIRECTIVES, annotate=False)
    for stamp, inputs, c_file in stale:
        os.makedirs(os.path.dirname(stamp), exist_ok=True)
        with open(stamp + ".tmp", "w") as f:
            json.dump({"inputs": inputs, "c": _file_sha(c_file)}, f)
        os.replace(stamp + ".tmp", stamp)
    return modules


if __name__ == "__main__":          # also under pip (setuptools runs this file as __main__)
    generate("ndws/_entries.pxi.tp")
    setup(
        ext_modules=cythonized(EXTENSIONS),
        cmdclass={"build_ext": BuildExt},
    )
