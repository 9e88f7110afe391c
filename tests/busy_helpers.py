"""Helpers of the tests that hold a training network at a chosen point while another thread
copies or calls it (tests/test_nn_busy.py, tests/test_parallel_*.py): Events, never timing."""
from __future__ import annotations

import threading

from ndws.nn.listeners import TrainingListener

WAIT = 30      # seconds: a bound for Events that must fire, never a timing assumption


class Hold(TrainingListener):
    """Holds fit in `hook` at iteration `at` until `go` (records each boundary's parameters).
    Inside an iteration it first fills the live parameters with 7.0 (restored before it
    returns): what a copy torn by an update in progress would see. Under ParallelWrapper only
    worker 0 (the user's model) calls it."""

    root_worker_only = True

    def __init__(self, hook, at, raise_=None):
        self.hook, self.at, self.raise_ = hook, at, raise_
        self.inside, self.go = threading.Event(), threading.Event()
        self.boundaries: dict = {}

    def _hold(self, model):
        if model.iteration != self.at:
            return
        live = model.params()
        before = live.numpy().copy()
        live.fill(7.0)             # what a half-written update looks like to a torn copy
        self.inside.set()
        assert self.go.wait(WAIT)
        live.assign(before)
        if self.raise_ is not None:
            raise self.raise_

    def on_gradient_calculation(self, model):
        if self.hook == "on_gradient_calculation":
            self._hold(model)

    def on_backward_pass(self, model):
        if self.hook == "on_backward_pass":
            self._hold(model)

    def iteration_done(self, model, iteration, epoch):
        self.boundaries[iteration + 1] = model.params().numpy().copy()
        if self.hook == "iteration_done" and iteration + 1 == self.at:
            self.inside.set()
            assert self.go.wait(WAIT)


def start_fit(net, batches, **kw):
    """`net.fit(batches)` on a thread of its own; its exceptions are collected in `errors`."""
    errors = []

    def run():
        try:
            net.fit(batches, progress=False, **kw)
        except BaseException as exc:  # noqa: BLE001 - asserted by the test
            errors.append(exc)
    t = threading.Thread(target=run, name="fit-thread")
    t.start()
    return t, errors


def until(condition):
    """Wait for `condition()` (a state another thread sets, polled on an Event's wait)."""
    tick = threading.Event()
    for _ in range(WAIT * 1000):
        if condition():
            return
        tick.wait(0.001)
    raise AssertionError("the condition never came true")


def start(fn):
    """`fn()` on a thread of its own; its result or exception goes to `box`."""
    box = {}

    def run():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - asserted by the test
            box["error"] = exc
    t = threading.Thread(target=run, name="copier")
    t.start()
    return t, box


def copy_while_held(net, hold, fn):
    """With a fit of `net` held inside an iteration by `hold`: run `fn()` (a copy of `net`) on
    another thread until it waits for the iteration's end (or returns: it did not wait), then
    release the fit and wait for `fn`. Returns (whether it waited, its box)."""
    copier, box = start(fn)
    until(lambda: net._busy.waiting or not copier.is_alive())
    waited = copier.is_alive()
    hold.go.set()
    copier.join(WAIT)
    return waited, box


def clone_during(net, hold, train):
    """`train()` (a fit of `net`) on a thread of its own; once `hold` holds it inside an
    iteration, `net.clone()` from this thread, which must wait for the iteration's end. Returns
    the clone, after the training has ended without an error."""
    trainer, trained = start(train)
    assert hold.inside.wait(WAIT)
    waited, box = copy_while_held(net, hold, net.clone)
    trainer.join(WAIT)
    assert waited, "the copy did not wait for the iteration's end"
    assert "error" not in trained and "error" not in box
    return box["result"]
