"""The build under test is the source under test, and the package's files agree."""
from __future__ import annotations

import doctest
import importlib
import pathlib
import re
import types

import pytest

import ndws

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _sources(path, pkg, seen):
    """`path` and every .pxd / .pxi / .h it uses, transitively: cimported modules' .pxd files,
    included .pxi files, and headers named in extern blocks."""
    if path in seen or not path.exists():
        return seen
    seen.add(path)
    text = path.read_text()
    if path.suffix == ".pyx":
        _sources(path.with_suffix(".pxd"), pkg, seen)     # a module's own declarations
    for mod in re.findall(r"^\s*(?:from\s+ndws((?:\.\w+)+)\s+cimport|cimport\s+ndws((?:\.\w+)+))",
                          text, re.M):
        dotted = (mod[0] or mod[1]).lstrip(".")
        _sources(pkg.joinpath(*dotted.split(".")).with_suffix(".pxd"), pkg, seen)
    for name in re.findall(r'include\s+"([\w.]+\.pxi)"', text):
        _sources(path.parent / name, pkg, seen)
    for name in re.findall(r'"(\w+\.h)"', text):   # cdef extern from "x.h" and #include "x.h"
        # beside the file that names it (ndws/nn's own headers), else in ndws/
        beside = path.parent / name
        _sources(beside if beside.exists() else pkg / name, pkg, seen)
    return seen


def test_extension_is_not_stale():
    # An edited .pyx (or a .pxd/.pxi/.h it uses) with an old .so would test yesterday's code:
    # fail loudly instead.
    pkg = ROOT / "ndws"
    for pyx in pkg.rglob("*.pyx"):
        built = (list(pyx.parent.glob(pyx.stem + ".*.so"))
                 + list(pyx.parent.glob(pyx.stem + ".*.pyd")))
        assert built, f"{pyx.name} has no built extension: run `pip install -e .`"
        for source in _sources(pyx, pkg, set()):
            assert source.stat().st_mtime <= built[0].stat().st_mtime + 1, (
                f"{source.name} is newer than the built {built[0].name}: rebuild with "
                f"`pip install -e .` (or `python setup.py build_ext --inplace`)")


def test_staleness_check_follows_real_dependencies():
    pkg = ROOT / "ndws"
    core = {p.name for p in _sources(pkg / "_core.pyx", pkg, set())}
    assert {"_core.pyx", "_core.pxd", "_memory.pxd", "_arena.pxd", "_threads.pxd", "_tls.h",
            "_poison.h"} <= core
    ufuncs = {p.name for p in _sources(pkg / "_ufuncs.pyx", pkg, set())}
    assert {"_ufuncs.pyx", "_core.pxd", "_dispatch.pxd", "_threads.pxd", "_loops.pxi",
            "_entries.pxi", "_cmath.h", "_vmath.h", "_tls.h"} <= ufuncs
    assert "_fallback.pxd" in ufuncs
    activations = {p.name for p in _sources(pkg / "nn" / "_activations.pyx", pkg, set())}
    assert {"_math.pxd", "_vmath.pxd", "_vmath.h", "_act_loops.h"} <= activations
    memory = {p.name for p in _sources(pkg / "_memory.pyx", pkg, set())}
    assert "_core.pxd" not in memory and "_arena.pxd" not in memory


def _compiled_lines(pyx):
    # a module's own code: its .pyx and the .pxi files it includes (generated ones too)
    lines = pyx.read_text().count("\n")
    for name in re.findall(r'^include\s+"([\w.]+\.pxi)"', pyx.read_text(), re.M):
        lines += _compiled_lines(pyx.parent / name)
    return lines


def test_no_compiled_module_but_core_is_over_1600_lines():
    # one job per module (docs/architecture.md, "Layers"); _core is one cdef class
    sizes = {pyx.relative_to(ROOT).as_posix(): _compiled_lines(pyx)
             for pyx in (ROOT / "ndws").rglob("*.pyx")}
    assert sizes["ndws/_ufuncs.pyx"] > 1000          # the count sees the includes
    assert {m: n for m, n in sizes.items() if n > 1600} == {"ndws/_core.pyx": sizes[
        "ndws/_core.pyx"]}


def test_core_docstring_examples():
    # pytest's --doctest-modules does not see extension modules
    for name in ("_core", "_creation", "_ufuncs", "_fallback", "parallel._sync"):
        module = importlib.import_module(f"ndws.{name}")
        failures, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert tried > 0, name
        assert failures == 0, name


def test_python_module_doctests():
    for name in ("ndws.workspace", "ndws.memory", "ndws.ops", "ndws.random",
                 "ndws.nn.workspace_mgr", "ndws.nn.updaters", "ndws.nn.layers",
                 "ndws.nn.conf", "ndws.nn.network", "ndws.nn.listeners", "ndws.nn.history",
                 "ndws.nn.inputs", "ndws.nn.preprocessors", "ndws.nn.layers.convolution",
                 "ndws.nn.layers.pooling", "ndws.nn.layers.normalization",
                 "ndws.nn.layers.output", "ndws.nn.layers.padding", "ndws.parallel.wrapper",
                 "ndws.nn.graph.conf", "ndws.nn.graph.vertices", "ndws.nn.graph.network",
                 "ndws.nn.layers.wrappers", "ndws.nn.earlystopping",
                 "ndws.nn.earlystopping.termination", "ndws.nn.earlystopping.scorecalc",
                 "ndws.nn.transferlearning.builder"):
        module = importlib.import_module(name)
        failures, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert tried > 0, name
        assert failures == 0, name


def test_all_names_exist_and_stub_agrees():
    for name in ndws.__all__:
        assert hasattr(ndws, name), name
    for module in ("ndws.workspace", "ndws.memory", "ndws.ops", "ndws.random", "ndws.nn",
                   "ndws.nn.workspace_mgr", "ndws.nn.updaters", "ndws.nn.layers",
                   "ndws.nn.conf", "ndws.nn.network", "ndws.nn.serialization",
                   "ndws.nn.listeners", "ndws.nn.history", "ndws.nn.memory_report",
                   "ndws.nn.inputs", "ndws.nn.preprocessors", "ndws.nn.layers.convolution",
                   "ndws.nn.layers.pooling", "ndws.nn.layers.normalization",
                   "ndws.nn.layers.output", "ndws.nn.layers.padding", "ndws.nn._model",
                   "ndws.nn.graph", "ndws.nn.graph.conf", "ndws.nn.graph.vertices",
                   "ndws.nn.graph.network", "ndws.nn.graph.memory",
                   "ndws.parallel", "ndws.parallel.modes", "ndws.parallel.wrapper"):
        mod = importlib.import_module(module)
        for name in mod.__all__:
            assert hasattr(mod, name), f"{module}.{name}"
    for name in ("_core", "_creation", "_threads", "_ufuncs", "_linalg", "_arena", "_memory",
                 "parallel/_sync"):
        module = importlib.import_module(f"ndws.{name.replace('/', '.')}")
        stub = (ROOT / "ndws" / f"{name}.pyi").read_text()
        public = [n for n in dir(module) if not n.startswith("_")
                  and not isinstance(getattr(module, n), types.ModuleType)]
        missing = [n for n in public if n not in stub]
        assert not missing, f"{name}.pyi lacks {missing}"


def test_show_config_reports_build():
    facts = ndws.show_config(mode="dicts")
    assert facts["alignment (bytes)"] == 64
    assert facts["openmp"] in ("on", "off")
    assert facts["threads"] >= 1
    assert facts["numpy"] == __import__("numpy").__version__


def test_readme_example_runs():
    import re
    text = (ROOT / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    kept = namespace["kept"]
    assert kept.shape == (64,) and not kept.is_attached() and kept.stale is None
    assert namespace["y"].stale == "leaked"  # the cycle's own result did not survive it


def _build(root, env=None, module="ndws._memory"):
    """`python setup.py build_ext --inplace` of one module in the copy at `root`; returns the
    log and whether it reused the module or compiled it."""
    import os
    import subprocess
    import sys
    full = {k: v for k, v in os.environ.items() if not k.startswith("NDWS_") and k not in (
        "CFLAGS", "LDFLAGS", "CPPFLAGS")}
    full.update({"NDWS_BUILD_ONLY": module}, **(env or {}))
    proc = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=root,
                          env=full, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    log = proc.stdout + proc.stderr
    compiled = re.search(r" -c \S*" + re.escape(module.split(".")[-1]) + r"\.c\b", log)
    reused = f"ndws: {module}: reused" in log
    assert compiled or reused, log[-2000:]
    return "reused" if reused and not compiled else "compiled"


@pytest.mark.slow
def test_a_build_reuses_a_module_only_when_nothing_it_is_made_from_changed(tmp_path):
    # the README's second setup reuses what the first built (setup.py's docstring); an edited
    # .pyx or header, or other switches, must compile again
    import shutil
    pytest.importorskip("Cython", reason="setup.py needs Cython (in the test extra)")
    pytest.importorskip("setuptools", reason="setup.py needs setuptools (in the test extra)")
    shutil.copy(ROOT / "setup.py", tmp_path / "setup.py")
    shutil.copytree(ROOT / "ndws", tmp_path / "ndws", ignore=shutil.ignore_patterns(
        "*.so", "*.c", "__pycache__", "_entries.pxi"))
    pyx, header = tmp_path / "ndws" / "_memory.pyx", tmp_path / "ndws" / "_poison.h"
    so = lambda: next((tmp_path / "ndws").glob("_memory.*.so")).read_bytes()  # noqa: E731
    assert _build(tmp_path) == "compiled"
    assert _build(tmp_path, module="ndws.parallel._sync") == "compiled"
    first = so()
    assert _build(tmp_path) == "reused"
    assert so() == first
    for switches in ({"NDWS_NO_OPENMP": "1"}, {"NDWS_SANITIZE": "1"}):
        assert _build(tmp_path, switches) == "compiled", switches
    assert _build(tmp_path) == "reused" and so() == first          # kept beside the others
    assert _build(tmp_path, {"NDWS_SANITIZE": "1"}) == "reused"
    original = pyx.read_text()
    pyx.write_text(original + "\n\ndef _probe_of_the_build_test():\n    return 7\n")
    assert _build(tmp_path) == "compiled"
    assert b"_probe_of_the_build_test" in so()
    pyx.write_text(original)
    assert _build(tmp_path) == "reused" and so() == first
    for switches in ({"CFLAGS": "-O1"}, {"NDWS_CYTHON_DEBUG": "1"}):
        assert _build(tmp_path, switches) == "compiled", switches
    header.write_text(header.read_text() + "\n#define NDWS_BUILD_TEST_PROBE 1\n")
    assert _build(tmp_path) == "compiled"
    assert _build(tmp_path, module="ndws.parallel._sync") == "reused"     # it includes none
