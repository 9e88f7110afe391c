"""Python garbage collection driven by ND4J's memory-manager rules (see ndws.memory, its public
face): the auto-GC window, a periodic collector thread, occasional collection from a training
loop, and pausing the collector around a hot loop. Below ndws.workspace and ndws.memory, which
both use the one `collector` of the process."""
from __future__ import annotations

import contextlib
import gc
import operator
import threading
import time
from typing import Any, Iterator


def _non_negative_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name}: expected an integer, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an integer, got {value!r}") from None
    if number < 0:
        raise ValueError(f"{name}: must not be negative, got {number}")
    return number


class GarbageCollector:
    """The process's collection policy: the auto-GC window, periodic and occasional
    collection, pausing. One instance, `collector`, serves the whole process; the public face
    is `ndws.memory.MemoryManager` (ND4J's names), and a workspace manager asks it for the
    collection ND4J runs when a thread destroys all its workspaces."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition()
        self._window_ms = 100
        self._frequency = 0
        self._calls = 0
        self._last_gc = time.monotonic()
        self._periodic = False
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None
        self._paused = 0
        self._collections = 0

    # -- the window -----------------------------------------------------------------------------

    @property
    def auto_gc_window(self) -> int:
        """Minimum milliseconds between two collections ndws starts (default 100)."""
        return self._window_ms

    def set_auto_gc_window(self, ms: int) -> None:
        """Set the minimum time between automatic collections, in milliseconds."""
        self._window_ms = _non_negative_int("ms", ms)
        self._wake()

    # -- periodic collection --------------------------------------------------------------------

    def toggle_periodic_gc(self, enabled: bool) -> None:
        """Start or stop periodic collection: a daemon thread that runs ``gc.collect()`` every
        window (not while `gc_paused` is active). Stopping joins the thread."""
        if not isinstance(enabled, bool):
            raise TypeError(f"enabled: expected a bool, got {enabled!r}")
        with self._lock:
            self._periodic = enabled
            if enabled and self._thread is None:
                self._stop = threading.Event()
                self._thread = threading.Thread(target=self._run, args=(self._stop,),
                                                name="ndws periodic GC", daemon=True)
                self._thread.start()
                return
            if enabled or self._thread is None:
                return
            thread, stop = self._thread, self._stop
            self._thread = self._stop = None
        with self._cond:
            stop.set()
            self._cond.notify_all()
        if thread is not threading.current_thread():
            thread.join()

    def is_periodic_gc_active(self) -> bool:
        """True while periodic collection is switched on."""
        return self._periodic

    def _wake(self) -> None:
        # a changed window takes effect now rather than after the old one elapses
        with self._cond:
            self._cond.notify_all()

    def _run(self, stop: threading.Event) -> None:
        # Sleep one window, collect, repeat; a window of 0 means "never" (as in ND4J) and the
        # thread sleeps until the window changes or periodic GC is switched off.
        with self._cond:
            while not stop.is_set():
                window = self._window_ms
                self._cond.wait(window / 1000.0 if window > 0 else None)
                if stop.is_set():
                    break
                if (window > 0 and window == self._window_ms and self._paused == 0
                        and self._elapsed_ms() >= window):
                    self._collect()

    # -- explicit and occasional collection ------------------------------------------------------

    def invoke_gc(self) -> int:
        """Run ``gc.collect()`` now; returns what it returned."""
        return self._collect()

    def invoke_gc_occasionally(self) -> bool:
        """Count a call; every `occasional_gc_frequency`-th call that comes more than the
        window after the last collection runs one. Returns whether it did. Call it once per
        iteration of a loop (DL4J does so per training iteration)."""
        if self._frequency <= 0:
            return False
        self._calls += 1
        if (self._calls % self._frequency == 0 and self._paused == 0
                and self._elapsed_ms() > self._window_ms):
            self._collect()
            return True
        return False

    def set_occasional_gc_frequency(self, n: int) -> None:
        """Collect on every n-th `invoke_gc_occasionally` call (0 disables it, the default)."""
        self._frequency = _non_negative_int("n", n)

    @property
    def occasional_gc_frequency(self) -> int:
        """Every how many `invoke_gc_occasionally` calls a collection may run (0: never)."""
        return self._frequency

    @property
    def collections(self) -> int:
        """Number of collections ndws has run (explicit, occasional and periodic)."""
        return self._collections

    def _elapsed_ms(self) -> float:
        return (time.monotonic() - self._last_gc) * 1000.0

    def _collect(self) -> int:
        found = gc.collect()
        self._last_gc = time.monotonic()
        self._collections += 1
        return found

    # -- keeping the collector out of a hot loop --------------------------------------------------

    @contextlib.contextmanager
    def gc_paused(self) -> Iterator[None]:
        """Disable Python's automatic collector (and ndws' periodic and occasional collections)
        inside the block; the collector's previous state is restored on exit.

        ``gc.disable()`` is process-wide: other threads' allocations don't trigger collections
        either while the block runs.
        """
        was_enabled = gc.isenabled()
        gc.disable()
        with self._lock:
            self._paused += 1
        try:
            yield
        finally:
            with self._lock:
                self._paused -= 1
            if was_enabled:
                gc.enable()


#: The process's collector (ndws.memory.get_memory_manager() is its public face).
collector = GarbageCollector()
