"""Training listeners (DL4J's ``TrainingListener`` and its common implementations).

Hooks run in this order each iteration: `on_forward_pass` (the layers' activations), then
`on_backward_pass` and `on_gradient_calculation` (the gradients are in ``model.gradient()``),
then the update, then `iteration_done(model, iteration, epoch)` with the iteration's number
(counting from 0). `on_epoch_start` / `on_epoch_end` frame each epoch. Arrays a listener receives
are valid only during the call, in every workspace mode: keeping one raises the usual
stale-array error later.

Where reports go: the listeners that report (`ScoreIterationListener`, `PerformanceListener`,
`CollectScoresListener` with ``log_score``, `CheckpointListener`) take a `printer`:

* ``None`` (the default): printed on standard output, above fit's progress bar if one is
  showing (``tqdm.write``), so the bar is not broken. Once the ``"ndws"`` logger itself is
  configured (a handler or a level set on ``logging.getLogger("ndws")``), the reports are that
  logger's INFO records instead, and logging decides where they go: setting its level to
  WARNING silences every listener at once.
* a callable: called with each report line (a str), e.g. ``logging.getLogger("ndws").info``,
  ``lines.append``, or ``functools.partial(print, file=f)``.
* ``False``: nothing is printed (`PerformanceListener.last_line` still holds the last report).

Examples
--------
>>> from ndws.nn.listeners import ScoreIterationListener, CollectScoresListener
>>> ScoreIterationListener(5)
ScoreIterationListener(5)
>>> ScoreIterationListener(0)
Traceback (most recent call last):
...
ValueError: ScoreIterationListener.print_iterations: expected an int > 0, got 0
"""
from __future__ import annotations

import gc
import logging
import math
import os
import threading
import time
from typing import Any, Callable

import numpy as np

from ndws._fileio import output_directory
from ndws.nn.history import write_above_bar

__all__ = ["TrainingListener", "ScoreIterationListener", "PerformanceListener",
           "CollectScoresListener", "CheckpointListener", "EvaluativeListener",
           "TensorBoardListener"]

log = logging.getLogger("ndws")


def _frequency(owner: str, value: Any, name: str = "frequency") -> int:
    # DL4J's listeners refuse a frequency <= 0 ("Invalid frequency, must be > 0"); here the
    # message names the listener and the argument, whichever it is
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{owner}.{name}: expected an int > 0, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{owner}.{name}: expected an int > 0, got {value}")
    return int(value)


def _flag(owner: str, name: str, value: Any) -> bool:
    # a switch is True or False: bool("no") would silently turn it on
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{owner}.{name}: expected True or False, got {value!r:.40}")
    return bool(value)


def _printer(owner: str, printer: Any) -> Any:
    if printer is None or printer is False or callable(printer):
        return printer
    raise TypeError(f"{owner}.printer: expected None (the terminal), False (silent) or a "
                    f"callable taking a str, got {type(printer).__name__}")


def _report(printer: Callable[[str], Any] | bool | None, line: str) -> None:
    # a listener's report line, where its printer says (the module docstring)
    if printer is None:
        if log.level != logging.NOTSET or log.handlers:
            log.info("%s", line)          # the user configured the ndws logger: logging decides
        else:
            write_above_bar(line)
    elif printer is not False:
        printer(line)


def _ms(value: float) -> str:
    # milliseconds to three significant digits without an exponent (0.0412, 0.412, 41.2,
    # 412, 4123): a compiled iteration takes well under a millisecond, which DL4J's whole
    # milliseconds show as 0
    if not value > 0 or not math.isfinite(value):
        return "0"
    return f"{value:.{max(0, 2 - math.floor(math.log10(value)))}f}"


class TrainingListener:
    """Base class: every hook does nothing; override the ones you need.

    Under `ndws.parallel.ParallelWrapper` every worker thread calls a listener for its own
    network, except a listener whose `root_worker_only` is True: only worker 0 (the user's
    model) calls it.
    """

    #: act on the user's model only under ParallelWrapper (saving or evaluating a replica
    #: would repeat the work per worker)
    root_worker_only = False

    def iteration_done(self, model: Any, iteration: int, epoch: int) -> None:
        """After an iteration's update; `iteration` is its number (from 0)."""

    def on_epoch_start(self, model: Any) -> None:
        """Before the first iteration of an epoch."""

    def on_epoch_end(self, model: Any) -> None:
        """After the last iteration of an epoch (and its validation, when fit has
        ``validation_data``: ``model.history`` holds the epoch's record by then)."""

    def on_forward_pass(self, model: Any, activations: list) -> None:
        """After the forward pass of a training iteration: the input, then each layer's
        output (valid during the call only)."""

    def on_gradient_calculation(self, model: Any) -> None:
        """After the gradients are computed, before the update."""

    def on_backward_pass(self, model: Any) -> None:
        """After the backward pass."""


class ScoreIterationListener(TrainingListener):
    """Reports ``Score at iteration <i> is <score>`` every `print_iterations` iterations
    (`printer`: where, as the module docstring says)."""

    def __init__(self, print_iterations: int = 10, *, printer: Any = None):
        self.print_iterations = _frequency("ScoreIterationListener", print_iterations,
                                           "print_iterations")
        self.printer = _printer("ScoreIterationListener", printer)

    def iteration_done(self, model, iteration, epoch):
        if iteration % self.print_iterations == 0:
            _report(self.printer, f"Score at iteration {iteration} is {model.score()}")

    def __repr__(self) -> str:
        return f"ScoreIterationListener({self.print_iterations})"


class CollectScoresListener(TrainingListener):
    """Keeps ``(iteration, score)`` every `frequency` iterations in `iterations` and `scores`;
    reports each (as `ScoreIterationListener` does, through `printer`) when `log_score`."""

    def __init__(self, frequency: int = 1, log_score: bool = False, *, printer: Any = None):
        self.frequency = _frequency("CollectScoresListener", frequency)
        self.log_score = _flag("CollectScoresListener", "log_score", log_score)
        self.printer = _printer("CollectScoresListener", printer)
        self.iterations: list[int] = []
        self.scores: list[float] = []

    def iteration_done(self, model, iteration, epoch):
        if iteration % self.frequency == 0:
            self.iterations.append(iteration)
            self.scores.append(model.score())
            if self.log_score:
                _report(self.printer, f"Score at iteration {iteration} is {model.score()}")


class _GcWatch:
    # Python's collections per generation and their time, from gc.callbacks
    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.times = [0.0, 0.0, 0.0]
        self._start = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            g = info.get("generation", 0)
            self.counts[g] += 1
            self.times[g] += time.perf_counter() - self._start

    def close(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)


class PerformanceListener(TrainingListener):
    """Reports timing every `frequency` iterations (DL4J's ``PerformanceListener``):
    ``ETL: <ms> ms; iteration <i>; iteration time: <ms> ms; samples/sec: <x>; batches/sec: <x>;
    score: <s>;`` and, with `report_gc`, Python's collections per generation since the last
    report. Times are in milliseconds to three significant digits (``0.412 ms``: a small
    network's iteration takes well under one). The timers are per thread (for data-parallel
    workers). Under `ndws.parallel.MPITrainer` the iteration time is followed by
    ``communication: <ms> ms;``, the part of it spent in MPI calls (what overlap did not
    hide), and samples/sec counts the rows of every rank. `printer`: where the lines go (the
    module docstring); `last_line` keeps the last one.
    """

    def __init__(self, frequency: int = 1, report_score: bool = False, report_gc: bool = False,
                 report_sample: bool = True, report_batch: bool = True,
                 report_iteration: bool = True, report_time: bool = True,
                 report_etl: bool = True, *, printer: Any = None):
        owner = "PerformanceListener"
        self.frequency = _frequency(owner, frequency)
        self.report_score = _flag(owner, "report_score", report_score)
        self.report_sample = _flag(owner, "report_sample", report_sample)
        self.report_batch = _flag(owner, "report_batch", report_batch)
        self.report_iteration = _flag(owner, "report_iteration", report_iteration)
        self.report_time = _flag(owner, "report_time", report_time)
        self.report_etl = _flag(owner, "report_etl", report_etl)
        self.report_gc = _flag(owner, "report_gc", report_gc)
        self.printer = _printer(owner, printer)
        self._local = threading.local()
        self._gc = _GcWatch() if self.report_gc else None
        self._gc_last: tuple | None = None
        self.last_line: str | None = None

    def iteration_done(self, model, iteration, epoch):
        now = time.perf_counter()
        last = getattr(self._local, "last", None)
        self._local.last = now
        if last is None or iteration % self.frequency != 0:
            return
        seconds = max(now - last, 1e-12)
        parts = []
        if self.report_etl:
            parts.append(f"ETL: {_ms(getattr(model, 'last_etl_time', 0))} ms; ")
        if self.report_iteration:
            parts.append(f"iteration {iteration}; ")
        if self.report_time:
            parts.append(f"iteration time: {_ms(seconds * 1000)} ms; ")
            comm = getattr(model, "last_comm_time", None)
            if comm is not None:
                # ndws.parallel.MPITrainer: the iteration's time in MPI calls
                parts.append(f"communication: {_ms(comm)} ms; ")
        if self.report_sample:
            parts.append(f"samples/sec: {getattr(model, 'last_batch_size', 0) / seconds:.3f}; ")
        if self.report_batch:
            parts.append(f"batches/sec: {1 / seconds:.3f}; ")
        if self.report_score:
            parts.append(f"score: {model.score()};")
        if self._gc is not None:
            snap = (tuple(self._gc.counts), tuple(self._gc.times))
            if self._gc_last is not None:
                gens = [f"[gen{g}: {snap[0][g] - self._gc_last[0][g]} "
                        f"({_ms((snap[1][g] - self._gc_last[1][g]) * 1000)}ms)]"
                        for g in range(3)]
                parts.append(f" GC: {', '.join(gens)};")
            self._gc_last = snap
        self.last_line = "".join(parts).rstrip()
        _report(self.printer, self.last_line)

    def __del__(self) -> None:
        if getattr(self, "_gc", None) is not None:
            self._gc.close()


class CheckpointListener(TrainingListener):
    """Saves the model (its `save` format) every `every_n_iterations` iterations and/or every
    `every_n_epochs` epochs into `directory` (created, with its parents, if it does not exist),
    keeping the newest `keep_last` files (all when None). Files are named
    ``checkpoint_<n>_iter<i>_epoch<e>.zip``; each save is reported (``Model checkpoint saved:
    <path>``) through `printer` (the module docstring)."""

    root_worker_only = True  # under ParallelWrapper: worker 0 (the user's model) only

    def __init__(self, directory: Any, every_n_iterations: int | None = None,
                 every_n_epochs: int | None = None, keep_last: int | None = None,
                 save_updater: bool = True, *, printer: Any = None):
        owner = "CheckpointListener"
        if not isinstance(directory, (str, os.PathLike)) or not os.fspath(directory):
            output_directory("CheckpointListener.directory", directory)   # says why
        if every_n_iterations is None and every_n_epochs is None:
            raise ValueError("CheckpointListener: give every_n_iterations or every_n_epochs")
        self.every_n_iterations = (None if every_n_iterations is None else
                                   _frequency(owner, every_n_iterations, "every_n_iterations"))
        self.every_n_epochs = (None if every_n_epochs is None else
                               _frequency(owner, every_n_epochs, "every_n_epochs"))
        if keep_last is not None:
            if isinstance(keep_last, (bool, np.bool_)) or not isinstance(keep_last,
                                                                       (int, np.integer)):
                raise TypeError(f"CheckpointListener.keep_last: expected an int >= 1 (the "
                                f"newest checkpoints kept) or None (keep all), got "
                                f"{type(keep_last).__name__}")
            if keep_last < 1:
                raise ValueError(f"CheckpointListener.keep_last: expected an int >= 1 (the "
                                 f"newest checkpoints kept) or None (keep all), got "
                                 f"{keep_last}")
            keep_last = int(keep_last)
        self.keep_last = keep_last
        self.save_updater = _flag(owner, "save_updater", save_updater)
        self.printer = _printer(owner, printer)
        # last, once every argument is known good: nothing is created for a refused listener
        self.directory = output_directory("CheckpointListener.directory", directory)
        self.saved: list[str] = []

    def _save(self, model: Any) -> None:
        name = (f"checkpoint_{len(self.saved)}_iter{model.iteration}_epoch{model.epoch}.zip")
        path = os.path.join(self.directory, name)
        model.save(path, self.save_updater)
        self.saved.append(path)
        if self.keep_last is not None:
            while len(self.saved) > self.keep_last:
                old = self.saved.pop(0)
                if os.path.exists(old):
                    os.unlink(old)
        _report(self.printer, f"Model checkpoint saved: {path}")

    def iteration_done(self, model, iteration, epoch):
        if self.every_n_iterations and (iteration + 1) % self.every_n_iterations == 0:
            self._save(model)

    def on_epoch_end(self, model):
        if self.every_n_epochs and model.epoch % self.every_n_epochs == 0:
            self._save(model)


class EvaluativeListener(TrainingListener):
    """Runs ``model.do_evaluation(iterator, *evaluations)`` every `frequency` iterations (or
    epochs with ``invocation="epoch_end"``) and logs the first evaluation's `stats()`; the
    evaluations are reset before each run and kept in `last`. `iterator` is anything
    `do_evaluation` takes as its data but arrays (an iterator, a list, a DataSet); it runs after
    the iteration's workspaces are closed, so any iterator works under any workspace mode.
    `printer`: where the stats go (the module docstring)."""

    root_worker_only = True  # under ParallelWrapper: worker 0 (the user's model) only

    def __init__(self, iterator: Any, frequency: int, *evaluations: Any,
                 invocation: str = "iteration_end", printer: Any = None):
        if not evaluations:
            raise ValueError("EvaluativeListener: give at least one evaluation")
        if invocation not in ("iteration_end", "epoch_end"):
            raise ValueError(f"EvaluativeListener.invocation: expected 'iteration_end' or "
                             f"'epoch_end', got {invocation!r:.40}")
        self.iterator = iterator
        self.frequency = _frequency("EvaluativeListener", frequency)
        self.evaluations = evaluations
        self.invocation = invocation
        self.printer = _printer("EvaluativeListener", printer)
        self.last: Any = None

    def _run(self, model: Any) -> None:
        for ev in self.evaluations:
            if hasattr(ev, "reset"):
                ev.reset()
        # no bar of its own: the evaluation runs under the fit's
        self.last = model.do_evaluation(self.iterator, *self.evaluations, progress=False)
        first = self.evaluations[0]
        if hasattr(first, "stats"):
            _report(self.printer, f"Evaluation at iteration {model.iteration}:\n{first.stats()}")

    def iteration_done(self, model, iteration, epoch):
        if self.invocation == "iteration_end" and iteration % self.frequency == 0:
            self._run(model)

    def on_epoch_end(self, model):
        if self.invocation == "epoch_end" and model.epoch % self.frequency == 0:
            self._run(model)


# in a module of its own (its writer is an optional extra); defined on TrainingListener above
from ndws.nn._tensorboard import TensorBoardListener  # noqa: E402
