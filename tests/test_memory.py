"""Tests for ndws.memory: the process-wide memory manager's GC controls (ND4J's MemoryManager, with
the deliberate difference (docs/porting-from-dl4j.md) that periodic GC really runs) and its
allocation statistics.

Collections are observed two ways: `MemoryManager.collections` (what ndws says it ran) and
``gc.callbacks`` counting "start" events of generation 2 (what actually ran). While observing,
Python's automatic collector is disabled so that every full collection comes from ndws. Timing
bounds are deliberately loose: the machine is shared and noisy.
"""
from __future__ import annotations

import gc
import subprocess
import sys
import threading
import time
import weakref

import numpy as np
import pytest

import ndws
from conftest import child_env
from ndws.memory import MemoryManager

PERIODIC_THREAD = "ndws periodic GC"


@pytest.fixture(autouse=True)
def mm():
    """The process-wide manager; its window, frequency, periodic flag and Python's collector
    state are restored after each test whatever the test did."""
    manager = ndws.get_memory_manager()
    window, frequency = manager.auto_gc_window, manager.occasional_gc_frequency
    periodic, gc_enabled = manager.is_periodic_gc_active(), gc.isenabled()
    yield manager
    manager.toggle_periodic_gc(False)
    manager.set_auto_gc_window(window)
    manager.set_occasional_gc_frequency(frequency)
    if periodic:
        manager.toggle_periodic_gc(True)
    if gc_enabled:
        gc.enable()
    else:
        gc.disable()


class FullCollections:
    """Counts generation-2 collections (or, with ``any_generation``, every collection) as they
    start, via ``gc.callbacks`` (from any thread)."""

    def __init__(self, any_generation: bool = False) -> None:
        self.count = 0
        self.starts: list[float] = []           # time.monotonic() of each counted start
        self.any_generation = any_generation

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start" and (self.any_generation or info.get("generation") == 2):
            self.starts.append(time.monotonic())
            self.count += 1

    def __enter__(self) -> "FullCollections":
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self)


@pytest.fixture
def no_auto_gc():
    """Python's automatic collector off for the test, so every full collection is ndws'."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def periodic_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == PERIODIC_THREAD]


def make_cycle() -> weakref.ref:
    """A reference cycle only the cyclic collector can free; returns a weakref to it."""

    class Node:
        pass

    node = Node()
    node.self = node
    return weakref.ref(node)


def wait_for_collections(mm, target, timeout=10.0):
    """Poll until ndws has run `target` collections or `timeout` passes; returns the count.
    (A full collection can take tens of ms inside a big suite: wait generously, assert after.)"""
    deadline = time.monotonic() + timeout
    while mm.collections < target and time.monotonic() < deadline:
        time.sleep(0.01)
    return mm.collections

# -- defaults ----------------------------------------------------------------------------------


def test_defaults_of_a_fresh_manager():
    fresh = MemoryManager()
    assert fresh.auto_gc_window == 100
    assert fresh.get_auto_gc_window() == 100
    assert fresh.occasional_gc_frequency == 0
    assert fresh.is_periodic_gc_active() is False
    assert fresh.collections == 0
    # frequency 0: occasional GC is disabled
    assert fresh.invoke_gc_occasionally() is False
    assert fresh.collections == 0


def test_process_wide_defaults_in_a_new_interpreter():
    # The process-wide manager is checked in a fresh interpreter: other tests change it.
    code = ("import threading, ndws\n"
            "mm = ndws.get_memory_manager()\n"
            "print(mm.auto_gc_window, mm.occasional_gc_frequency, mm.is_periodic_gc_active(),"
            " mm.collections,"
            " any(t.name == 'ndws periodic GC' for t in threading.enumerate()))\n")
    out = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert out.split() == ["100", "0", "False", "0", "False"]


def test_get_memory_manager_is_process_wide(mm, threaded):
    assert isinstance(mm, MemoryManager)
    assert ndws.get_memory_manager() is mm
    assert threaded(lambda i: ndws.get_memory_manager(), 2) == [mm, mm]


# -- the window --------------------------------------------------------------------------------


def test_set_auto_gc_window(mm):
    mm.set_auto_gc_window(250)
    assert mm.auto_gc_window == 250
    assert mm.get_auto_gc_window() == 250
    mm.auto_gc_window = 7
    assert mm.auto_gc_window == 7
    mm.set_auto_gc_window(0)
    assert mm.auto_gc_window == 0
    mm.set_auto_gc_window(np.int64(40))       # any integer (operator.index) is accepted
    assert mm.auto_gc_window == 40
    assert type(mm.auto_gc_window) is int


@pytest.mark.parametrize("setter", ["method", "property"])
def test_negative_window_is_a_value_error_naming_the_argument(mm, setter):
    mm.set_auto_gc_window(55)
    with pytest.raises(ValueError, match=r"^ms: must not be negative, got -1$"):
        if setter == "method":
            mm.set_auto_gc_window(-1)
        else:
            mm.auto_gc_window = -1
    assert mm.auto_gc_window == 55


@pytest.mark.parametrize("setter", ["method", "property"])
@pytest.mark.parametrize("bad", [1.5, "100", None, True])
def test_non_integer_window_is_a_type_error(mm, setter, bad):
    mm.set_auto_gc_window(55)
    with pytest.raises(TypeError, match=rf"^ms: expected an integer, got {bad!r}$"):
        if setter == "method":
            mm.set_auto_gc_window(bad)
        else:
            mm.auto_gc_window = bad
    assert mm.auto_gc_window == 55


def test_occasional_frequency_validation(mm):
    mm.set_occasional_gc_frequency(3)
    assert mm.occasional_gc_frequency == 3
    with pytest.raises(ValueError, match=r"^n: must not be negative, got -2$"):
        mm.set_occasional_gc_frequency(-2)
    with pytest.raises(TypeError, match=r"^n: expected an integer, got 2\.0$"):
        mm.set_occasional_gc_frequency(2.0)
    assert mm.occasional_gc_frequency == 3
    mm.set_occasional_gc_frequency(0)
    assert mm.occasional_gc_frequency == 0


def test_toggle_periodic_gc_requires_a_bool(mm):
    with pytest.raises(TypeError, match=r"^enabled: expected a bool, got 1$"):
        mm.toggle_periodic_gc(1)
    assert mm.is_periodic_gc_active() is False
    assert periodic_threads() == []


# -- periodic collection -----------------------------------------------------------------------


def test_periodic_gc_runs_collections_no_more_often_than_the_window(mm, no_auto_gc):
    window_ms = 20
    mm.set_auto_gc_window(window_ms)
    before = mm.collections
    with FullCollections() as full:
        start = time.monotonic()
        mm.toggle_periodic_gc(True)
        try:
            assert mm.is_periodic_gc_active() is True
            threads = periodic_threads()
            assert len(threads) == 1 and threads[0].daemon
            time.sleep(0.3)
            # a full collection in a big test session can take tens of milliseconds: wait
            # (generously) for a few rather than asserting how many fit in 0.3 s
            wait_for_collections(mm, before + 3, timeout=20.0)
        finally:
            mm.toggle_periodic_gc(False)
        elapsed_ms = (time.monotonic() - start) * 1000.0
        ran = mm.collections - before
        seen = full.count
    assert ran >= 3, f"only {ran} periodic collections in {elapsed_ms:.0f} ms"
    assert ran <= elapsed_ms / window_ms + 1, (ran, elapsed_ms)
    # every collection ndws counted really ran gc.collect(), and nothing else collected fully
    assert seen == ran
    # "no more often than the window" holds between any two collections, not just on average
    # (sleeps only ever overrun; 10% slack for timer granularity)
    gaps_ms = [(b - a) * 1000.0 for a, b in zip(full.starts, full.starts[1:])]
    assert min(gaps_ms) >= 0.9 * window_ms, gaps_ms


def test_toggling_periodic_gc_twice_keeps_one_thread(mm):
    mm.set_auto_gc_window(0)
    mm.toggle_periodic_gc(True)
    mm.toggle_periodic_gc(True)
    try:
        assert len(periodic_threads()) == 1
    finally:
        mm.toggle_periodic_gc(False)
    mm.toggle_periodic_gc(False)               # already off: a no-op
    assert periodic_threads() == []
    assert mm.is_periodic_gc_active() is False


def test_toggling_off_stops_the_thread_and_collections(mm, no_auto_gc):
    mm.set_auto_gc_window(20)
    mm.toggle_periodic_gc(True)
    try:
        thread = periodic_threads()[0]
        time.sleep(0.1)
    finally:
        mm.toggle_periodic_gc(False)
    # stopping joins the thread
    assert not thread.is_alive()
    assert periodic_threads() == []
    assert mm.is_periodic_gc_active() is False
    before = mm.collections
    with FullCollections() as full:
        time.sleep(0.2)                         # ten windows
    assert mm.collections == before
    assert full.count == 0


def test_window_zero_means_never_until_the_window_changes(mm, no_auto_gc):
    mm.set_auto_gc_window(0)
    before = mm.collections
    mm.toggle_periodic_gc(True)
    try:
        with FullCollections() as full:
            time.sleep(0.25)
            assert mm.collections == before
            assert full.count == 0
            assert len(periodic_threads()) == 1
            # a new window takes effect without waiting for the old (infinite) one
            mm.set_auto_gc_window(20)
            assert wait_for_collections(mm, before + 1) > before
    finally:
        mm.toggle_periodic_gc(False)


def test_periodic_gc_is_suppressed_while_paused(mm, no_auto_gc):
    mm.set_auto_gc_window(20)
    mm.toggle_periodic_gc(True)
    try:
        with mm.gc_paused():
            time.sleep(0.05)                    # let a collection already under way finish
            before = mm.collections
            with FullCollections() as full:
                time.sleep(0.25)
            assert mm.collections == before
            assert full.count == 0
        # and it resumes afterwards
        assert wait_for_collections(mm, before + 1) > before
    finally:
        mm.toggle_periodic_gc(False)


# -- explicit and occasional collection --------------------------------------------------------


def test_invoke_gc_collects_a_reference_cycle(mm, no_auto_gc):
    gc.collect()                                # start from no garbage
    ref = make_cycle()
    assert ref() is not None                    # only the cyclic collector can free it
    before = mm.collections
    with FullCollections() as full:
        found = mm.invoke_gc()
    assert ref() is None
    assert found >= 1
    assert mm.collections == before + 1
    assert full.count == 1


def test_invoke_gc_returns_what_gc_collect_returned(mm, monkeypatch):
    calls = []

    def fake_collect(*args):
        calls.append(args)
        return 42

    monkeypatch.setattr(gc, "collect", fake_collect)
    before = mm.collections
    assert mm.invoke_gc() == 42
    assert calls == [()]                        # a full collection
    assert mm.collections == before + 1


def test_occasional_gc_with_frequency_zero_never_collects(mm):
    mm.set_occasional_gc_frequency(0)
    mm.set_auto_gc_window(0)
    before = mm.collections
    assert [mm.invoke_gc_occasionally() for _ in range(10)] == [False] * 10
    assert mm.collections == before


@pytest.mark.parametrize("n", [1, 3, 5])
def test_occasional_gc_collects_every_nth_call_with_window_zero(mm, no_auto_gc, n):
    mm.set_auto_gc_window(0)
    mm.set_occasional_gc_frequency(n)
    before = mm.collections
    with FullCollections() as full:
        results = [mm.invoke_gc_occasionally() for _ in range(4 * n)]
    hits = [i for i, r in enumerate(results) if r]
    # ND4J's call counter is never reset, so where the first hit falls depends on earlier
    # calls; the spacing does not.
    assert len(hits) == 4, results
    assert all(b - a == n for a, b in zip(hits, hits[1:])), results
    assert all(r is True or r is False for r in results)
    assert mm.collections == before + 4
    assert full.count == 4


def test_occasional_gc_respects_the_window(mm, no_auto_gc):
    mm.set_occasional_gc_frequency(2)
    mm.set_auto_gc_window(600_000)              # ten minutes
    mm.invoke_gc()                              # the last collection is now
    before = mm.collections
    with FullCollections() as full:
        assert [mm.invoke_gc_occasionally() for _ in range(20)] == [False] * 20
    assert mm.collections == before
    assert full.count == 0
    # once more than the window has passed, the next n-th call collects
    mm.set_auto_gc_window(30)
    mm.set_occasional_gc_frequency(1)
    time.sleep(0.1)
    assert mm.invoke_gc_occasionally() is True
    assert mm.collections == before + 1


def test_occasional_gc_is_suppressed_while_paused(mm, no_auto_gc):
    mm.set_auto_gc_window(0)
    mm.set_occasional_gc_frequency(1)
    before = mm.collections
    with mm.gc_paused():
        assert [mm.invoke_gc_occasionally() for _ in range(5)] == [False] * 5
    assert mm.collections == before
    assert mm.invoke_gc_occasionally() is True
    assert mm.collections == before + 1


# -- gc_paused ---------------------------------------------------------------------------------


def test_gc_paused_disables_and_restores_enabled_collector(mm):
    gc.enable()
    with mm.gc_paused() as value:
        assert value is None
        assert gc.isenabled() is False
    assert gc.isenabled() is True


def test_gc_paused_keeps_a_disabled_collector_disabled(mm):
    gc.disable()
    with mm.gc_paused():
        assert gc.isenabled() is False
    assert gc.isenabled() is False


def test_gc_paused_nested(mm):
    gc.enable()
    with mm.gc_paused():
        with mm.gc_paused():
            assert gc.isenabled() is False
        assert gc.isenabled() is False          # the inner block found it disabled
    assert gc.isenabled() is True


def test_gc_paused_restores_on_exception(mm):
    gc.enable()
    mm.set_auto_gc_window(0)
    mm.set_occasional_gc_frequency(1)
    with pytest.raises(KeyError):
        with mm.gc_paused():
            assert gc.isenabled() is False
            raise KeyError("boom")
    assert gc.isenabled() is True
    # the pause is over: occasional collection works again
    assert mm.invoke_gc_occasionally() is True


def test_gc_paused_stops_automatic_collection(mm):
    def churn():
        # enough container allocations to trigger many automatic collections when enabled
        junk = [[i] for i in range(50_000)]
        del junk

    gc.enable()
    with FullCollections(any_generation=True) as unpaused:
        churn()
    assert unpaused.count > 0                   # the workload does trigger the collector
    with mm.gc_paused():
        with FullCollections(any_generation=True) as paused:
            churn()
    assert paused.count == 0


# -- destroy_all_workspaces_for_current_thread ----------------------------------------------------


@pytest.mark.parametrize("destroy", [
    ndws.destroy_all_workspaces_for_current_thread,
    ndws.destroyAllWorkspacesForCurrentThread,
    lambda: ndws.get_workspace_manager().destroy_all_workspaces_for_current_thread(),
], ids=["function", "camelCase", "manager"])
def test_destroy_all_collects_only_while_periodic_gc_is_active(mm, no_auto_gc, destroy):
    ws = ndws.workspace("MEM_DESTROY")
    with ws:
        ndws.zeros(4)
    before = mm.collections
    with FullCollections() as full:
        destroy()
    assert mm.collections == before
    assert full.count == 0
    assert not ndws.get_workspace_manager().check_if_workspace_exists("MEM_DESTROY")

    # window 0: the periodic thread itself never collects, so any collection is destroy's
    mm.set_auto_gc_window(0)
    mm.toggle_periodic_gc(True)
    try:
        ws = ndws.workspace("MEM_DESTROY")
        with ws:
            ndws.zeros(4)
        with FullCollections() as full:
            destroy()
        assert mm.collections == before + 1
        assert full.count == 1
        assert not ndws.get_workspace_manager().check_if_workspace_exists("MEM_DESTROY")
    finally:
        mm.toggle_periodic_gc(False)


# -- workspace queries -------------------------------------------------------------------------


def test_current_workspace_and_scope_out(mm):
    assert mm.current_workspace() is None
    ws = ndws.workspace("MEM_CURRENT")
    with ws:
        assert mm.current_workspace() is ws
        with mm.scope_out_of_workspaces():
            assert mm.current_workspace() is None
            assert ndws.zeros(3).is_attached() is False
        assert mm.current_workspace() is ws


# -- allocation statistics ---------------------------------------------------------------------


def delta(after: dict, before: dict) -> dict:
    return {k: after[k] - before[k] for k in before}


def test_allocation_statistics_keys(mm):
    stats = mm.allocation_statistics()
    assert set(stats) == {"allocations", "bytes", "live_blocks", "live_bytes"}
    assert all(type(v) is int and v >= 0 for v in stats.values())
    assert stats["live_blocks"] <= stats["allocations"]
    assert stats["live_bytes"] <= stats["bytes"]


def test_detached_allocation_is_counted(mm):
    before = mm.allocation_statistics()
    a = ndws.zeros(10)
    d = delta(mm.allocation_statistics(), before)
    assert a.is_attached() is False
    assert d["allocations"] == 1
    assert d["live_blocks"] == 1
    assert d["bytes"] >= a.nbytes == 80
    assert d["live_bytes"] == d["bytes"]
    del a
    d = delta(mm.allocation_statistics(), before)
    assert d["allocations"] == 1                # cumulative
    assert d["live_blocks"] == 0
    assert d["live_bytes"] == 0


def test_spilled_allocation_is_counted(mm):
    conf = ndws.WorkspaceConfiguration(initial_size=1024, policy_learning="NONE",
                                       policy_allocation="STRICT")
    ws = ndws.workspace("MEM_SPILL", conf)
    with ws:
        before = mm.allocation_statistics()
        a = ndws.zeros(1000)                    # 8000 bytes > 1024: spills (EXTERNAL)
        d = delta(mm.allocation_statistics(), before)
        assert a.is_attached() and a.workspace_id == "MEM_SPILL"
        assert ws.spilled_size == 8000
        assert d["allocations"] == 1
        assert d["bytes"] >= 8000
        b = ndws.zeros(8)                       # 64 bytes fit the block: no allocation
        assert delta(mm.allocation_statistics(), before)["allocations"] == 1
        assert b.is_attached()
    # every cycle spills again
    with ws:
        before = mm.allocation_statistics()
        ndws.zeros(1000)
        assert delta(mm.allocation_statistics(), before)["allocations"] == 1


def test_workspace_allocation_after_learning_is_not_counted(mm):
    ws = ndws.workspace("MEM_LEARN")           # FIRST_LOOP, initial size 0

    def body():
        a = ndws.zeros(10)
        b = (a + 1.0) * 2.0
        assert a.workspace_id == b.workspace_id == "MEM_LEARN"
        return b

    with ws:
        before = mm.allocation_statistics()
        body()                                  # the first loop spills while it learns
        assert ws.spilled_size > 0
        assert delta(mm.allocation_statistics(), before)["allocations"] == 3
    with ws:                                    # the learned block exists from here on
        body()
    before = mm.allocation_statistics()
    for _ in range(3):
        with ws:
            body()
            assert ws.spilled_size == 0
    d = delta(mm.allocation_statistics(), before)
    assert d["allocations"] == 0
    assert d["bytes"] == 0
