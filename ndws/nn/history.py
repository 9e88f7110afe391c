"""`History`: what `MultiLayerNetwork.fit` returns (the score of every iteration, each epoch's
mean score, time and throughput), and the progress bar fit shows on a terminal.

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

import sys
import time
from typing import Any

__all__ = ["History"]


class History:
    """The record of one `fit` call.

    Attributes
    ----------
    iterations, scores : list
        Each iteration's number and score.
    epochs : list of int
        The epoch numbers fit ran.
    epoch_scores : list of float
        Each epoch's mean iteration score.
    epoch_seconds : list of float
        Each epoch's wall time.
    samples_per_second : list of float
        Each epoch's examples per second.
    """

    def __init__(self) -> None:
        self.iterations: list[int] = []
        self.scores: list[float] = []
        self.epochs: list[int] = []
        self.epoch_scores: list[float] = []
        self.epoch_seconds: list[float] = []
        self.samples_per_second: list[float] = []
        self._epoch_last: list[int | None] = []     # each epoch's last iteration (plot)
        self._t0 = 0.0
        self._first = 0
        self._samples = 0

    def _start_epoch(self, epoch: int) -> None:
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

    def plot(self, ax: Any = None) -> Any:
        """Plot the iteration scores and the epoch means (matplotlib); returns the axes."""
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
        ax.set_xlabel("iteration")
        ax.set_ylabel("score")
        ax.legend()
        return ax

    def __repr__(self) -> str:
        last = f", last epoch score {self.epoch_scores[-1]:.6g}" if self.epoch_scores else ""
        return f"<History {len(self.epochs)} epochs, {len(self.scores)} iterations{last}>"


class _Progress:
    # tqdm over fit's batches when asked, or by default when stderr is a terminal
    def __init__(self, enabled: bool | None, total: int | None, desc: str):
        if enabled is None:
            enabled = sys.stderr.isatty()
        if not isinstance(enabled, bool):
            raise TypeError(f"progress: expected True, False or None, got {enabled!r:.40}")
        self._bar = None
        if enabled:
            from tqdm import tqdm
            self._bar = tqdm(total=total, desc=desc, unit="batch", leave=False,
                             file=sys.stderr)

    def update(self, score: float) -> None:
        if self._bar is not None:
            self._bar.set_postfix(score=f"{score:.4g}", refresh=False)
            self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class _Epoch:
    """One epoch of a training loop, framed as every fit frames it (`MultiLayerNetwork.fit`,
    `ParallelWrapper.fit`, `MPITrainer.fit`): the listeners' ``on_epoch_start`` before it, the
    History's record and the progress bar over its batches, and at its end (unless it raised)
    the epoch's record closed, each network's epoch counter advanced and ``on_epoch_end``."""

    __slots__ = ("_model", "_listeners", "_history", "_nets", "_bar")

    def __init__(self, model: Any, listeners: list, history: History, total: int | None,
                 progress: bool | None, nets: list | None = None):
        self._model, self._listeners, self._history = model, listeners, history
        self._nets = nets if nets is not None else [model]
        for listener in listeners:
            listener.on_epoch_start(model)
        history._start_epoch(model.epoch)
        self._bar = (_Progress(progress, total, f"epoch {model.epoch}")
                     if progress is not False else None)

    def iteration(self, iteration: int, score: float, rows: int) -> None:
        """Record a finished iteration (and move the bar)."""
        self._history._iteration(iteration, score, rows)
        if self._bar is not None:
            self._bar.update(score)

    def __enter__(self) -> "_Epoch":
        return self

    def __exit__(self, exc_type: Any, *exc_info: Any) -> bool:
        if self._bar is not None:
            self._bar.close()
        if exc_type is None:
            self._history._end_epoch()
            for net in self._nets:
                net._epoch += 1
            for listener in self._listeners:
                listener.on_epoch_end(self._model)
        return False
