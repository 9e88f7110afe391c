"""Termination conditions of early stopping (DL4J's
``org.deeplearning4j.earlystopping.termination``).

An epoch condition is asked after each evaluated epoch with the epoch's number (counting from 0
in the trainer's run), its score and whether lower scores are better; an iteration condition
after each minibatch with the minibatch's score. The trainer calls `initialize` at the start of
each `fit`.

Examples
--------
>>> from ndws.nn.earlystopping import ScoreImprovementEpochTerminationCondition
>>> c = ScoreImprovementEpochTerminationCondition(2)
>>> c.initialize()
>>> [c.terminate(e, s, True) for e, s in enumerate([0.9, 0.8, 0.85, 0.81])]
[False, False, False, True]
>>> ScoreImprovementEpochTerminationCondition(-1)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: ScoreImprovementEpochTerminationCondition.max_epochs_with_no_improvement: ... got -1
"""
from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

__all__ = ["EpochTerminationCondition", "IterationTerminationCondition",
           "MaxEpochsTerminationCondition", "ScoreImprovementEpochTerminationCondition",
           "BestScoreEpochTerminationCondition", "MaxTimeIterationTerminationCondition",
           "MaxScoreIterationTerminationCondition", "InvalidScoreIterationTerminationCondition"]

#: the clock of MaxTimeIterationTerminationCondition (seconds; a test may replace it)
_clock = time.monotonic

#: DL4J's TimeUnit names and their length in seconds
TIME_UNITS = {"NANOSECONDS": 1e-9, "MICROSECONDS": 1e-6, "MILLISECONDS": 1e-3, "SECONDS": 1.0,
              "MINUTES": 60.0, "HOURS": 3600.0, "DAYS": 86400.0}


def _int(owner: str, name: str, value: Any, low: int, meaning: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{owner}.{name}: expected an int >= {low} ({meaning}), got "
                        f"{type(value).__name__} {value!r:.40}")
    if value < low:
        raise ValueError(f"{owner}.{name}: expected an int >= {low} ({meaning}), got {value}")
    return int(value)


def _real(owner: str, name: str, value: Any, finite: bool = True) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{owner}.{name}: expected a real number, got {type(value).__name__} "
                        f"{value!r:.40}")
    v = float(value)
    if math.isnan(v) or (finite and math.isinf(v)):
        raise ValueError(f"{owner}.{name}: expected a {'finite ' if finite else ''}number, got "
                         f"{value!r:.40}")
    return v


class EpochTerminationCondition:
    """Base class: `terminate(epoch, score, minimize)` says whether training stops after
    evaluated epoch `epoch` (from 0) of score `score`."""

    #: whether the condition reads the score (False: it may be asked on an epoch that was not
    #: evaluated, with a NaN score; MaxEpochsTerminationCondition)
    needs_score = True

    def initialize(self) -> None:
        """Forget any previous run (called when the trainer's fit starts)."""

    def terminate(self, epoch: int, score: float, minimize: bool) -> bool:
        raise NotImplementedError(f"{type(self).__name__}.terminate")


class IterationTerminationCondition:
    """Base class: `terminate(last_minibatch_score)` says whether training stops after the
    minibatch just fitted."""

    def initialize(self) -> None:
        """Forget any previous run (called when the trainer's fit starts)."""

    def terminate(self, last_minibatch_score: float) -> bool:
        raise NotImplementedError(f"{type(self).__name__}.terminate")


class MaxEpochsTerminationCondition(EpochTerminationCondition):
    """Stop after `max_epochs` epochs (asked after every epoch, evaluated or not)."""

    needs_score = False

    def __init__(self, max_epochs: int):
        self.max_epochs = _int("MaxEpochsTerminationCondition", "max_epochs", max_epochs, 1,
                               "the epochs to train")

    def terminate(self, epoch, score, minimize):
        return epoch + 1 >= self.max_epochs            # epochs count from 0

    def __repr__(self) -> str:
        return f"MaxEpochsTerminationCondition({self.max_epochs})"


class ScoreImprovementEpochTerminationCondition(EpochTerminationCondition):
    """Stop when the score has not improved by more than `min_improvement` for
    `max_epochs_with_no_improvement` evaluated epochs since the best one (DL4J's patience)."""

    def __init__(self, max_epochs_with_no_improvement: int, min_improvement: float = 0.0):
        owner = "ScoreImprovementEpochTerminationCondition"
        self.max_epochs_with_no_improvement = _int(
            owner, "max_epochs_with_no_improvement", max_epochs_with_no_improvement, 0,
            "the epochs without improvement tolerated")
        self.min_improvement = _real(owner, "min_improvement", min_improvement)
        if self.min_improvement < 0:
            raise ValueError(f"{owner}.min_improvement: expected a number >= 0, got "
                             f"{min_improvement!r:.40}")
        self.initialize()

    def initialize(self):
        self.best_epoch = -1
        self.best_score = math.nan

    def terminate(self, epoch, score, minimize):
        if self.best_epoch == -1:
            self.best_epoch, self.best_score = epoch, score
            return False
        improvement = self.best_score - score if minimize else score - self.best_score
        if improvement > self.min_improvement:
            self.best_epoch, self.best_score = epoch, score
            return False
        return epoch >= self.best_epoch + self.max_epochs_with_no_improvement

    def __repr__(self) -> str:
        return (f"ScoreImprovementEpochTerminationCondition(max_epochs_with_no_improvement="
                f"{self.max_epochs_with_no_improvement}, min_improvement={self.min_improvement})")


class BestScoreEpochTerminationCondition(EpochTerminationCondition):
    """Stop once the score is better than `best_expected_score` (below it when minimising,
    above it when maximising)."""

    def __init__(self, best_expected_score: float):
        self.best_expected_score = _real("BestScoreEpochTerminationCondition",
                                         "best_expected_score", best_expected_score)

    def terminate(self, epoch, score, minimize):
        return score < self.best_expected_score if minimize else score > self.best_expected_score

    def __repr__(self) -> str:
        return f"BestScoreEpochTerminationCondition({self.best_expected_score})"


class MaxTimeIterationTerminationCondition(IterationTerminationCondition):
    """Stop once `max_time_amount` `max_time_unit` (DL4J's TimeUnit names: "SECONDS",
    "MINUTES", "HOURS", ..., any case) have passed since the trainer's fit started."""

    def __init__(self, max_time_amount: float, max_time_unit: str = "SECONDS"):
        owner = "MaxTimeIterationTerminationCondition"
        amount = _real(owner, "max_time_amount", max_time_amount)
        if amount <= 0:
            raise ValueError(f"{owner}.max_time_amount: expected a number > 0, got "
                             f"{max_time_amount!r:.40} (DL4J: Invalid maximum training time)")
        unit = max_time_unit.upper() if isinstance(max_time_unit, str) else None
        if unit not in TIME_UNITS:
            raise ValueError(f"{owner}.max_time_unit: expected one of "
                             f"{', '.join(TIME_UNITS)}, got {max_time_unit!r:.40}")
        self.max_time_amount, self.max_time_unit = amount, unit
        self._seconds = amount * TIME_UNITS[unit]
        self._end = math.inf

    def initialize(self):
        self._end = _clock() + self._seconds

    def terminate(self, last_minibatch_score):
        return _clock() >= self._end

    def __repr__(self) -> str:
        return (f"MaxTimeIterationTerminationCondition({self.max_time_amount:g},"
                f"unit={self.max_time_unit})")


class MaxScoreIterationTerminationCondition(IterationTerminationCondition):
    """Stop when a minibatch's score exceeds `max_score` or is NaN (a learning rate too high)."""

    def __init__(self, max_score: float):
        self.max_score = _real("MaxScoreIterationTerminationCondition", "max_score", max_score)

    def terminate(self, last_minibatch_score):
        return last_minibatch_score > self.max_score or math.isnan(last_minibatch_score)

    def __repr__(self) -> str:
        return f"MaxScoreIterationTerminationCondition({self.max_score})"


class InvalidScoreIterationTerminationCondition(IterationTerminationCondition):
    """Stop when a minibatch's score is NaN or infinite. The trainer applies it whether or not
    it is configured: training on from a non-finite score only produces garbage."""

    def terminate(self, last_minibatch_score):
        return not math.isfinite(last_minibatch_score)

    def __repr__(self) -> str:
        return "InvalidScoreIterationTerminationCondition()"
