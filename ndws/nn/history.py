"""`History`: what `MultiLayerNetwork.fit` returns (the score of every iteration, each epoch's
mean score, time and throughput, and the held-out scores of ``validation_data``), and the
epoch frame every training loop shares: the listeners' epoch hooks, one progress bar over the
whole fit, and a warning when the score stops being finite.

Examples
--------
>>> from ndws.nn.history import History
>>> h = History()
>>> h._start_epoch(0)
>>> for i, s in enumerate([0.9, 0.7]):
...     h._iteration(i, s, 32)
>>> h._end_epoch()
>>> h.epoch_scores
[0.8]
"""
from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
import warnings
from typing import Any, Callable

__all__ = ["History", "write_above_bar"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class History:
    """The record of one `fit` call.

    Attributes
    ----------
    iterations, scores : list
        Each iteration's number and score.
    epochs : list of int
        The epoch numbers fit ran (the network's epoch counter, from 0).
    epoch_scores : list of float
        Each epoch's mean iteration score.
    epoch_seconds : list of float
        Each epoch's wall time (training only, not the validation).
    samples_per_second : list of float
        Each epoch's examples per second.
    validation_scores : list of float
        With ``fit(..., validation_data=...)``: each epoch's score on the held-out data (the
        mean loss over its rows, plus the regularisation terms, as ``score(ds)``), computed
        after the epoch's last iteration. Empty without validation data. Under
        `ndws.nn.earlystopping.EarlyStoppingTrainer`: the score calculator's score of each
        evaluated epoch.
    validation_epochs : list of int
        The epoch (as in `epochs`) of each validation score: every epoch with
        ``validation_data``, every ``evaluate_every_n_epochs``-th under early stopping.
    validation_accuracy : list of float
        With validation data for a classifier (an output of more than one column): each
        epoch's fraction of held-out rows whose largest output is the labelled class. Empty
        otherwise.
    """

    def __init__(self, epochs: int | None = None) -> None:
        # epochs: how many the fit will run (for the bar's "epoch 3/10"; trainers pass it)
        if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int)
                                   or epochs < 1):
            raise ValueError(f"epochs: expected an int >= 1 or None, got {epochs!r:.40}")
        self.iterations: list[int] = []
        self.scores: list[float] = []
        self.epochs: list[int] = []
        self.epoch_scores: list[float] = []
        self.epoch_seconds: list[float] = []
        self.samples_per_second: list[float] = []
        self.validation_scores: list[float] = []
        self.validation_accuracy: list[float] = []
        self.validation_epochs: list[int] = []
        self._epoch_last: list[int | None] = []     # each epoch's last iteration (plot)
        self._t0 = 0.0
        self._first = 0
        self._samples = 0
        # the fit's plan (for the bar: "epoch 3/10" over all its batches), its bar, and
        # whether a non-finite score was reported
        self._planned = epochs
        self._bar: _Progress | None = None
        self._first_epoch: int | None = None
        self._warned = False

    def _start_epoch(self, epoch: int) -> None:
        if self._first_epoch is None:
            self._first_epoch = epoch
        self.epochs.append(epoch)
        self._t0 = time.perf_counter()
        self._first = len(self.scores)
        self._samples = 0

    def _iteration(self, iteration: int, score: float, samples: int) -> None:
        self.iterations.append(iteration)
        self.scores.append(score)
        self._samples += samples

    def _end_epoch(self) -> None:
        seconds = time.perf_counter() - self._t0
        mine = self.scores[self._first:]
        self.epoch_scores.append(sum(mine) / len(mine) if mine else float("nan"))
        self._epoch_last.append(self.iterations[-1] if mine else None)
        self.epoch_seconds.append(seconds)
        self.samples_per_second.append(self._samples / seconds if seconds > 0 else 0.0)

    def _validation(self, score: float, accuracy: float | None) -> None:
        self.validation_scores.append(score)
        self.validation_epochs.append(self.epochs[-1])
        if accuracy is not None:
            self.validation_accuracy.append(accuracy)

    # -- the progress bar over the whole fit --------------------------------------------------

    def _bar_epoch(self, progress: bool | None, total: int | None, epoch: int) -> None:
        # the fit's one bar: made at its first epoch (over every batch of the fit when the
        # batches per epoch and the epochs are known), its text moved on at each later one
        # "/last" for a fit of several epochs (a fit per epoch would read "epoch 3/3")
        last = (f"/{self._first_epoch + self._planned}"                # type: ignore[operator]
                if self._planned is not None and self._planned > 1 else "")
        desc = f"epoch {epoch + 1}{last}"
        if self._bar is None:
            whole = (total * self._planned if total is not None and self._planned is not None
                     else total)
            self._bar = _Progress(progress, whole, desc, leave=True, fit=True)
        else:
            self._bar.describe(desc, None if self._planned is not None else total)

    def _close(self) -> None:
        """Close the fit's progress bar (idempotent)."""
        if self._bar is not None:
            self._bar.close()

    def plot(self, ax: Any = None) -> Any:
        """Plot the iteration scores, the epoch means and the validation scores
        (matplotlib); returns the axes."""
        try:
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError("History.plot needs matplotlib: pip install matplotlib (or pip "
                              "install 'ndws[plot]')") from None
        if ax is None:
            _, ax = plt.subplots()
        ax.plot(self.iterations, self.scores, label="iteration score", alpha=0.5)
        ends = [(i, s) for i, s in zip(self._epoch_last, self.epoch_scores) if i is not None]
        if ends:
            ax.plot([i for i, _ in ends], [s for _, s in ends], "o-", label="epoch mean")
        last = dict(zip(self.epochs, self._epoch_last))
        held = [(last[e], s) for e, s in zip(self.validation_epochs, self.validation_scores)
                if last.get(e) is not None]
        if held:
            ax.plot([i for i, _ in held], [s for _, s in held], "s--",
                    label="validation score")
        ax.set_xlabel("iteration")
        ax.set_ylabel("score")
        ax.legend()
        return ax

    def __repr__(self) -> str:
        last = f", last epoch score {self.epoch_scores[-1]:.6g}" if self.epoch_scores else ""
        if self.validation_scores:
            last += f", validation score {self.validation_scores[-1]:.6g}"
        return f"<History {len(self.epochs)} epochs, {len(self.scores)} iterations{last}>"


# -- the terminal -------------------------------------------------------------------------------

def _interactive() -> bool:
    # fit's default: a bar on a terminal, or in a Jupyter kernel (tqdm.auto draws a widget
    # there; its stderr is no terminal)
    stream = sys.stderr
    try:
        if stream is not None and stream.isatty():
            return True
    except (AttributeError, ValueError):      # no isatty, or a closed stream
        pass
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)()
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def write_above_bar(line: str, file: Any = None) -> None:
    """Print `line` on `file` (default: standard output), above the progress bars that are
    showing (tqdm's ``write``: the bars are cleared, the line printed, the bars drawn
    again)."""
    file = sys.stdout if file is None else file
    if file is None:                # pythonw: nowhere to print
        return
    from tqdm.auto import tqdm
    tqdm.write(line, file=file)


class _AboveTheBar(logging.Handler):
    # A console logging handler (a StreamHandler on stdout or stderr) while a fit's bar is
    # showing: its records are written between clearing the bars and drawing them again, so a
    # log line never lands in the middle of a bar. The handler itself (format, level, filters)
    # is unchanged.
    def __init__(self, inner: logging.StreamHandler, tqdm_class: Any) -> None:
        super().__init__(inner.level)
        self.inner = inner
        self.tqdm_class = tqdm_class

    def handle(self, record: logging.LogRecord) -> Any:
        with self.tqdm_class.external_write_mode(file=self.inner.stream):
            return self.inner.handle(record)


class _ConsoleLogs:
    # the console handlers of the "ndws" and root loggers wrapped in _AboveTheBar while at
    # least one fit bar shows (counted: fits in several threads share the wrapping)
    _lock = threading.Lock()
    _count = 0
    _wrapped: list = []

    @classmethod
    def enter(cls, tqdm_class: Any) -> None:
        with cls._lock:
            cls._count += 1
            if cls._count > 1:
                return
            for logger in (logging.getLogger("ndws"), logging.getLogger()):
                handlers = list(logger.handlers)
                for i, h in enumerate(handlers):
                    if (type(h) is logging.StreamHandler
                            and h.stream in (sys.stdout, sys.stderr)):
                        handlers[i] = _AboveTheBar(h, tqdm_class)
                        cls._wrapped.append((logger, handlers[i]))
                logger.handlers = handlers

    @classmethod
    def exit(cls) -> None:
        with cls._lock:
            cls._count -= 1
            if cls._count:
                return
            # unwrap only ours: the user may have changed the handlers meanwhile
            for logger, wrapper in cls._wrapped:
                logger.handlers = [wrapper.inner if h is wrapper else h
                                   for h in logger.handlers]
            cls._wrapped = []


_fit_bars = threading.local()       # this thread's open fit bar


class _Progress:
    # A tqdm bar (tqdm.auto: a widget in a notebook) when `enabled` says so (None: on a
    # terminal or in a notebook). `fit`: the bar of a whole fit, whose console log records are
    # written above it; a fit bar still open in this thread (a fit that stopped early) is
    # closed when the next one starts.
    def __init__(self, enabled: bool | None, total: int | None, desc: str,
                 leave: bool = False, fit: bool = False):
        if enabled is None:
            enabled = _interactive()
        if not isinstance(enabled, bool):
            raise TypeError(f"progress: expected True, False or None, got {enabled!r:.40}")
        self._bar = None
        self._fit = False
        self._shown: dict = {}        # what the bar shows after the score (validation)
        if not enabled:
            return
        from tqdm.auto import tqdm
        if fit:
            previous = getattr(_fit_bars, "bar", None)
            if previous is not None:
                previous.close()
        self._bar = tqdm(total=total, desc=desc, unit="batch", leave=leave)
        if fit:
            self._fit = True
            _fit_bars.bar = self
            _ConsoleLogs.enter(tqdm)

    def update(self, score: float) -> None:
        if self._bar is not None:
            self._bar.set_postfix({"score": f"{score:.4g}", **self._shown}, refresh=False)
            self._bar.update(1)

    def describe(self, desc: str, total: int | None) -> None:
        # the next epoch: its number in the text; a bar per epoch (the epochs unknown) starts
        # again from 0
        if self._bar is not None:
            if total is not None:
                self._bar.reset(total)
            self._bar.set_description_str(desc, refresh=True)

    def postfix(self, score: str, **shown: Any) -> None:
        # the epoch's mean score and its validation, kept on the bar during the next epoch
        if self._bar is not None:
            self._shown = shown
            self._bar.set_postfix({"score": score, **shown}, refresh=True)

    def close(self) -> None:
        if self._bar is not None:
            bar, self._bar = self._bar, None
            bar.close()
            if self._fit:
                if getattr(_fit_bars, "bar", None) is self:
                    _fit_bars.bar = None
                _ConsoleLogs.exit()


# -- the epoch frame ----------------------------------------------------------------------------

def _stacklevel() -> int:
    # the first frame outside ndws (the user's fit call), so the warning points there; a
    # trainer's worker thread has none: its outermost frame
    level, frame = 1, sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE + os.sep):
        frame = frame.f_back
        level += 1
    return level


class _Epoch:
    """One epoch of a training loop, framed as every fit frames it (`MultiLayerNetwork.fit`,
    `ParallelWrapper.fit`, `MPITrainer.fit`): the listeners' ``on_epoch_start`` before it, the
    History's record and the fit's progress bar over its batches, a ``RuntimeWarning`` the
    first time the score is NaN or infinite, and at its end (unless it raised) the epoch's
    record closed, the validation (`validate`, a callable returning the held-out score and
    accuracy, or None for an epoch it does not evaluate; or no callable), each network's epoch counter advanced and ``on_epoch_end``.

    Give every network of the fit as `nets` (the model first)."""

    __slots__ = ("_model", "_listeners", "_history", "_nets", "_validate", "_bar")

    def __init__(self, model: Any, listeners: list, history: History, total: int | None,
                 progress: bool | None, nets: list | None = None,
                 validate: Callable[[], tuple] | None = None):
        self._model, self._listeners, self._history = model, listeners, history
        self._nets = nets if nets is not None else [model]
        self._validate = validate
        model.history = history
        for listener in listeners:
            listener.on_epoch_start(model)
        history._start_epoch(model.epoch)
        if progress is not False:
            history._bar_epoch(progress, total, model.epoch)
        self._bar = history._bar

    def iteration(self, iteration: int, score: float, rows: int) -> None:
        """Record a finished iteration (and move the bar)."""
        history = self._history
        history._iteration(iteration, score, rows)
        if self._bar is not None:
            self._bar.update(score)
        if not history._warned and not math.isfinite(score):
            history._warned = True
            warnings.warn(
                f"fit: the score is {score} at iteration {iteration} (epoch "
                f"{self._model.epoch}): training has diverged or the batch holds NaN or "
                f"infinite values, and the parameters are probably no longer finite. Check "
                f"the data (np.isfinite(x).all()) and lower the learning rate; "
                f"docs/networks.md, 'Defaults, and what to choose instead'", RuntimeWarning,
                stacklevel=_stacklevel())

    def __enter__(self) -> "_Epoch":
        return self

    def __exit__(self, exc_type: Any, *exc_info: Any) -> bool:
        history = self._history
        if exc_type is not None:
            history._close()
            return False
        try:
            history._end_epoch()
            result = self._validate() if self._validate is not None else None
            if result is not None:
                score, accuracy = result
                history._validation(score, accuracy)
                if self._bar is not None:
                    shown = {"val_score": f"{score:.4g}"}
                    if accuracy is not None:
                        shown["val_acc"] = f"{accuracy:.4f}"
                    self._bar.postfix(f"{history.epoch_scores[-1]:.4g}", **shown)
            for net in self._nets:
                net._epoch += 1
            for listener in self._listeners:
                listener.on_epoch_end(self._model)
        except BaseException:
            history._close()
            raise
        planned, first = history._planned, history._first_epoch
        if planned is not None and first is not None and self._model.epoch >= first + planned:
            history._close()               # the fit's last epoch
        return False
