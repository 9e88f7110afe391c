"""The build under test is the source under test, and the package's files agree."""
from __future__ import annotations

import doctest
import importlib
import pathlib
import re
import types

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
        _sources(pkg / name, pkg, seen)
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
            "_entries.pxi", "_cmath.h", "_tls.h"} <= ufuncs
    assert "_fallback.pxd" in ufuncs
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
                 "ndws.parallel.wrapper"):
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
