"""Shared fixtures: a seeded rng, a thread runner, workspaces of another thread, per-dtype
tolerances, and ND4J's test-base discipline (every test ends with no current workspace; all
workspaces destroyed)."""
from __future__ import annotations

import os
import threading
from typing import Any, Callable

import numpy as np
import pytest

import ndws

SEED = int(os.environ.get("NDWS_TEST_SEED", "20261121"))

#: relative tolerances per dtype for results compared with NumPy (data, not code)
RTOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}


@pytest.fixture
def rng() -> np.random.Generator:
    """Seeded NumPy generator (override the seed with NDWS_TEST_SEED)."""
    return np.random.default_rng(SEED)


@pytest.fixture(autouse=True)
def _workspace_hygiene():
    """Like ND4J's BaseND4JTest: after each test no workspace may be current; then every
    workspace of the thread is destroyed and the debug mode reset."""
    mgr = ndws.get_workspace_manager()
    yield
    current = ndws.current_workspace()
    ndws._core._clear_scopes()
    mgr.debug_mode = ndws.DebugMode.DISABLED
    mgr.set_default_workspace_configuration(ndws.WorkspaceConfiguration())
    mgr.destroy_all_workspaces_for_current_thread()
    assert current is None, f"test left workspace {current!r} current"


def run_threaded(fn: Callable[[int], Any], n_threads: int, timeout: float = 120.0
                 ) -> list[Any]:
    """Run fn(i) on n_threads threads started together; return results in thread order and
    re-raise the first exception of any thread."""
    barrier = threading.Barrier(n_threads)
    results: list[Any] = [None] * n_threads
    errors: list[BaseException | None] = [None] * n_threads

    def body(i: int) -> None:
        try:
            barrier.wait()
            results[i] = fn(i)
        except BaseException as exc:  # re-raised in the caller
            errors[i] = exc

    threads = [threading.Thread(target=body, args=(i,), name=f"ndws-test-{i}")
               for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), f"{t.name} did not finish within {timeout}s"
    for exc in errors:
        if exc is not None:
            raise exc
    return results


@pytest.fixture
def threaded() -> Callable[[Callable[[int], Any], int], list[Any]]:
    return run_threaded


@pytest.fixture
def foreign_workspace():
    """make(id, open=False) -> (workspace, thread): a workspace that belongs to another thread,
    open there when asked; the thread waits (on an Event, never a timer) until the test ends."""
    release = threading.Event()
    owners = []

    def make(id: str, open: bool = False):
        ready = threading.Event()
        box = {}

        def owner():
            box["ws"] = ndws.workspace(id, ndws.WorkspaceConfiguration())
            if open:
                with box["ws"]:
                    ready.set()
                    release.wait()
            else:
                ready.set()
                release.wait()

        t = threading.Thread(target=owner)
        t.start()
        owners.append(t)
        ready.wait()
        return box["ws"], t

    yield make
    release.set()
    for t in owners:
        t.join()


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a child Python process that must import the ndws under test: this
    one's, the directory holding that ndws first on PYTHONPATH, and `extra` set."""
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(ndws.__file__))),
         env.get("PYTHONPATH", "")])
    return env


def assert_matches(actual: Any, expected: np.ndarray, dtype: Any = None) -> None:
    """NDArray (or NumPy) `actual` equals NumPy `expected` in shape, dtype and values."""
    got = actual.numpy() if isinstance(actual, ndws.NDArray) else np.asarray(actual)
    exp = np.asarray(expected)
    assert got.shape == exp.shape, (got.shape, exp.shape)
    assert got.dtype == exp.dtype, (got.dtype, exp.dtype)
    if exp.dtype.kind in "fc":
        rtol = RTOL.get(exp.dtype, 1e-6)
        np.testing.assert_allclose(got, exp, rtol=rtol, atol=0, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, exp)
