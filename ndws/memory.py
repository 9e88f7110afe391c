"""The memory manager: Python garbage-collection controls for cyclic workloads.

ND4J's ``MemoryManager`` decides when ``System.gc()`` runs; ndws drives Python's `gc` by the
same rules. Unlike ND4J's CPU backend, whose periodic GC never runs, periodic collection here is
real: while it is active a daemon thread runs ``gc.collect()`` no more often than the auto-GC
window. While it is off, ndws never starts a collection by itself.

Examples
--------
>>> import ndws
>>> mm = ndws.get_memory_manager()
>>> mm.auto_gc_window
100
>>> with mm.gc_paused():       # keep Python's automatic collector out of a hot loop
...     pass
"""
from __future__ import annotations

import contextlib

from ndws import _core, _gc
from ndws.workspace import scope_out_of_workspaces as _scope_out_of_workspaces

__all__ = ["MemoryManager", "get_memory_manager"]


class MemoryManager:
    """Process-wide GC controls (ND4J ``Nd4j.getMemoryManager()``); use
    `get_memory_manager` rather than constructing one. Every instance drives the one collector
    of the process."""

    __slots__ = ()

    # -- the window -----------------------------------------------------------------------------

    @property
    def auto_gc_window(self) -> int:
        """Minimum milliseconds between two collections ndws starts (default 100)."""
        return _gc.collector.auto_gc_window

    @auto_gc_window.setter
    def auto_gc_window(self, ms: int) -> None:
        _gc.collector.set_auto_gc_window(ms)

    def set_auto_gc_window(self, ms: int) -> None:
        """Set the minimum time between automatic collections, in milliseconds."""
        _gc.collector.set_auto_gc_window(ms)

    def get_auto_gc_window(self) -> int:
        """Same as `auto_gc_window` (ND4J ``getAutoGcWindow``)."""
        return _gc.collector.auto_gc_window

    # -- collection -----------------------------------------------------------------------------

    def toggle_periodic_gc(self, enabled: bool) -> None:
        """Start or stop periodic collection: a daemon thread that runs ``gc.collect()`` every
        window (not while `gc_paused` is active). Stopping joins the thread."""
        _gc.collector.toggle_periodic_gc(enabled)

    def is_periodic_gc_active(self) -> bool:
        """True while periodic collection is switched on."""
        return _gc.collector.is_periodic_gc_active()

    def invoke_gc(self) -> int:
        """Run ``gc.collect()`` now; returns what it returned."""
        return _gc.collector.invoke_gc()

    def invoke_gc_occasionally(self) -> bool:
        """Count a call; every `occasional_gc_frequency`-th call that comes more than the
        window after the last collection runs one. Returns whether it did. Call it once per
        iteration of a loop (DL4J does so per training iteration)."""
        return _gc.collector.invoke_gc_occasionally()

    def set_occasional_gc_frequency(self, n: int) -> None:
        """Collect on every n-th `invoke_gc_occasionally` call (0 disables it, the default)."""
        _gc.collector.set_occasional_gc_frequency(n)

    @property
    def occasional_gc_frequency(self) -> int:
        """Every how many `invoke_gc_occasionally` calls a collection may run (0: never)."""
        return _gc.collector.occasional_gc_frequency

    @property
    def collections(self) -> int:
        """Number of collections ndws has run (explicit, occasional and periodic)."""
        return _gc.collector.collections

    def gc_paused(self) -> contextlib.AbstractContextManager[None]:
        """Disable Python's automatic collector (and ndws' periodic and occasional collections)
        inside the block; the collector's previous state is restored on exit.

        ``gc.disable()`` is process-wide: other threads' allocations don't trigger collections
        either while the block runs.
        """
        return _gc.collector.gc_paused()

    # -- workspace queries ------------------------------------------------------------------------

    def current_workspace(self):
        """The calling thread's current workspace (None when none)."""
        return _core.current_workspace()

    def scope_out_of_workspaces(self):
        """Same as `ndws.scope_out_of_workspaces`."""
        return _scope_out_of_workspaces()

    def allocation_statistics(self) -> dict[str, int]:
        """Heap allocations ndws has made for array data: ``allocations`` and ``bytes`` since
        import, ``live_blocks`` and ``live_bytes`` now."""
        return _core.allocation_counters()


_manager = MemoryManager()


def get_memory_manager() -> MemoryManager:
    """The process-wide `MemoryManager`."""
    return _manager
