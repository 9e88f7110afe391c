"""Who is using a `MultiLayerNetwork`, and what it is in the middle of (docs/networks.md,
"Threads, listeners and snapshots").

One network serves one thread at a time, its *owner*: a call from a second thread while the
owner is inside raises at once (the busy error). The owner may call back into the network from
code the network runs on its thread (a listener, a data iterator, a layer), and what such a
nested call may do depends on where the outer call is:

* *inside a pass* (`Busy.inside` names it): the layers hold the state of a forward pass (the
  training pass keeps it for its backward pass), which another pass would overwrite, and the
  pass has its workspaces open. No nested forward pass, no parameter write.
* *writing* (`Busy.writing` > 0): a training iteration, from its forward pass to the end of its
  update (or set_params, init, ...). The parameters, the updater state and the random state are
  between two training states: nothing that copies or sets them as a whole runs.
* at an *iteration boundary* (neither): anything but a second training call.

A copy of the parameters for another thread (a `ParallelInference` snapshot, `clone()`) is not
refused while the owner trains: it is taken at the next iteration boundary. When nothing
writes, the copy is made at once, under `Busy.lock`, which a training iteration takes to start
(so it cannot start half-way through a copy); when an iteration writes, the request waits, and
the thread that ends the iteration makes the copy before it goes on. The start and end of an
iteration take one uncontended lock each: about 1,000 instructions an iteration under
callgrind, 0.4% of the compiled iteration of a 64-32-10 network at batch 32 (less for any
network worth training on threads). A lock held for the whole iteration would need less code,
but Python's locks are not fair: a fit that releases it and takes it back every iteration can
starve a copier for ever, where a request is served at the first boundary.

A copier that could be what the iteration waits for does not wait: the owner's own thread, and
`ParallelWrapper`'s worker threads (`Busy.crew`), whose round cannot end without them, are
refused inside an iteration instead. If the owner's call raises inside an iteration, the
waiting copies fail with an error saying so (the parameters may be half-updated).
"""
from __future__ import annotations

import threading
from typing import Any, Callable

__all__ = ["Busy", "TRAIN", "FORWARD", "STATE", "WRITE", "FREE"]

_get_ident = threading.get_ident

# what a call does, for the rules of nesting it on the owner's thread
TRAIN = 0      # fit, compute_gradient_and_score, init: never nested
FORWARD = 1    # output, score(ds), evaluation: not inside a pass
STATE = 2      # save, clone, snapshots: not inside a pass or a training iteration
WRITE = 3      # set_params: not inside a pass or a training iteration
FREE = 4       # the counters, the listeners: anywhere

_BUSY = ("{op}: the network is in use by another thread ({outer}); one network serves one "
         "thread at a time: give each thread its own (clone()), or serve it to many threads "
         "with ndws.parallel.ParallelInference")
_NESTED = ("{op}: called from inside {outer} on the same thread (from a listener, a data "
           "iterator or a layer); a network runs one training call at a time: call it after "
           "{outer} returns, or train a copy (clone())")
_IN_PASS = ("{op}: called inside {inside} of this network (from on_forward_pass or a layer): "
            "until that pass ends its layers hold its state and read the parameters, and a "
            "nested pass would overwrite that state; call it after the pass (from a "
            "listener's on_backward_pass, on_gradient_calculation, iteration_done or "
            "on_epoch_end)")
_MID_ITERATION = ("{op}: called inside a training iteration of {outer} (from "
                  "on_backward_pass or on_gradient_calculation): the iteration has computed "
                  "its gradients from the current parameters and not yet applied them, so "
                  "{why}; call it at an iteration boundary (from iteration_done, "
                  "on_epoch_start or on_epoch_end)")
_WHY = {STATE: "a copy now would be a state training never rests in",
        WRITE: "new parameters now would be updated with the old ones' gradients"}
_CREW = ("{op}: called from a ParallelWrapper worker while a round writes this network's "
         "parameters, and the round cannot end while this worker waits for it; call it from "
         "a listener with root_worker_only = True (worker 0, at its iteration boundary) or "
         "after fit returns")
_FAILED = ("{op}: {outer} raised {exc} inside a training iteration while this waited for the "
           "iteration's end; its parameters may be partly updated, so nothing was copied "
           "(the network is free again)")


class _Request:
    """A copy another thread waits for: `fn` is run at the next iteration boundary."""

    __slots__ = ("op", "fn", "result", "error", "done")

    def __init__(self, op: str, fn: Callable[[], Any]):
        self.op = op
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()


class Busy:
    """The busy state of one network (see the module docstring). Every field is read and
    changed under `lock`, except `inside`, which only the thread running the pass changes."""

    __slots__ = ("lock", "owner", "helper", "crew", "depth", "outer", "writing", "inside",
                 "waiting")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner: int | None = None      # the thread using the network (None: free)
        self.helper: int | None = None     # ParallelWrapper's worker 0: calls as the owner
        self.crew: frozenset = frozenset()  # ParallelWrapper's workers: never wait for a copy
        self.depth = 0                     # the owner's calls in progress
        self.outer = ""                    # the outermost of them, for messages
        self.writing = 0                   # calls and iterations writing the parameters
        self.inside: str | None = None     # the pass in progress, for messages
        self.waiting: list[_Request] = []  # copies for other threads, due at the boundary

    # -- the owner's calls ----------------------------------------------------------------------

    def enter(self, op: str, kind: int, writes: bool) -> None:
        """Start the call `op` on this thread (RuntimeError when it may not run now); with
        `writes` it writes the parameters until `leave`."""
        me = _get_ident()
        with self.lock:
            if self.owner is None:
                self.owner, self.depth, self.outer = me, 1, op
            elif me == self.owner or me == self.helper:
                why = self._refusal(op, kind)
                if why is not None:
                    raise RuntimeError(why)
                self.depth += 1
            else:
                raise RuntimeError(_BUSY.format(op=op, outer=self.outer))
            if writes:
                self.writing += 1

    def leave(self, writes: bool, exc_type: Any) -> None:
        """End a call started by `enter` (`exc_type`: the exception it raised, or None)."""
        with self.lock:
            if writes:
                self._end(exc_type)
            self.depth -= 1
            if self.depth == 0:
                outer = self.outer
                self.owner, self.outer, self.inside = None, "", None
                if self.writing:
                    # the call raised inside an iteration, which never reached its end
                    self.writing = 0
                    self._fail(outer, exc_type)

    def _refusal(self, op: str, kind: int) -> str | None:
        # why the owner may not call `op` now, or None
        if kind == FREE:
            return None
        if kind == TRAIN:
            return _NESTED.format(op=op, outer=self.outer)
        if self.inside is not None:
            return _IN_PASS.format(op=op, inside=self.inside)
        if self.writing and kind != FORWARD:
            return _MID_ITERATION.format(op=op, outer=self.outer, why=_WHY[kind])
        return None

    # -- iterations -----------------------------------------------------------------------------

    def begin(self) -> None:
        """A training iteration (or a round) starts writing the parameters."""
        with self.lock:
            self.writing += 1

    def end(self) -> None:
        """It has finished writing: at the boundary, the waiting copies are made."""
        with self.lock:
            self._end(None)

    def _end(self, exc_type: Any) -> None:
        self.writing -= 1
        if self.writing == 0 and self.waiting:
            if exc_type is None:
                self._serve()
            else:
                self._fail(self.outer, exc_type)

    def _serve(self) -> None:
        waiting, self.waiting = self.waiting, []
        for req in waiting:
            try:
                req.result = req.fn()
            except BaseException as exc:  # noqa: BLE001 - the waiting thread raises it
                req.error = exc
            req.done.set()

    def _fail(self, outer: str, exc_type: Any) -> None:
        waiting, self.waiting = self.waiting, []
        name = getattr(exc_type, "__name__", "an exception")
        for req in waiting:
            req.error = RuntimeError(_FAILED.format(op=req.op, outer=outer, exc=name))
            req.done.set()

    # -- copies for other threads ---------------------------------------------------------------

    def snapshot(self, op: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` (a copy of the network's state) at an iteration boundary: now when nothing
        writes, else at the end of the iteration that writes (made by the thread ending it)."""
        me = _get_ident()
        with self.lock:
            mine = self.owner is not None and (me == self.owner or me == self.helper)
            if mine:
                why = self._refusal(op, STATE)
                if why is not None:
                    raise RuntimeError(why)
            elif self.writing and me in self.crew:
                raise RuntimeError(_CREW.format(op=op))
            if not self.writing:
                return fn()
            req = _Request(op, fn)
            self.waiting.append(req)
        try:
            req.done.wait()
        except BaseException:
            # interrupted: the copy is not wanted any more (made meanwhile: dropped)
            with self.lock:
                if req in self.waiting:
                    self.waiting.remove(req)
            raise
        if req.error is not None:
            raise req.error
        return req.result

    # -- ParallelWrapper's workers --------------------------------------------------------------

    def join_crew(self, helper: bool) -> None:
        """This thread works for the owner's call: never waits for a copy of the network;
        with `helper` its calls are the owner's (worker 0, whose listeners get the network)."""
        me = _get_ident()
        with self.lock:
            self.crew = self.crew | {me}
            if helper:
                self.helper = me

    def leave_crew(self) -> None:
        me = _get_ident()
        with self.lock:
            self.crew = self.crew - {me}
            if self.helper == me:
                self.helper = None


class Exclusive:
    """`Busy.enter` / `Busy.leave` as a context manager (a plain class: fit enters one per
    call, and a generator-based one costs a few microseconds)."""

    __slots__ = ("_busy", "_op", "_kind", "_writes")

    def __init__(self, busy: Busy, op: str, kind: int, writes: bool):
        self._busy = busy
        self._op = op
        self._kind = kind
        self._writes = writes

    def __enter__(self) -> None:
        self._busy.enter(self._op, self._kind, self._writes)

    def __exit__(self, exc_type: Any, *exc_info: Any) -> bool:
        self._busy.leave(self._writes, exc_type)
        return False
