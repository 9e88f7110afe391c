"""Early stopping training (DL4J's ``EarlyStoppingConfiguration``, ``EarlyStoppingTrainer`` and
``EarlyStoppingResult``): train epoch after epoch, score the network on held-out data every
`evaluate_every_n_epochs` epochs, keep the best model through a saver, and stop at the first
termination condition met, saying which.

The trainer drives the network's own fit (one call for the whole run: one `History`, one
progress bar, the listeners' hooks as in any fit): each evaluated epoch's score is the epoch's
``History.validation_scores`` entry and shows on the bar as ``val_score``. After each minibatch
the iteration conditions are asked with its score; a NaN or infinite score always stops the run
(`InvalidScoreIterationTerminationCondition`, configured or not), and so does a NaN or infinite
held-out score.

What a trainer needs from a network, which `MultiLayerNetwork` and `ComputationGraph` both have:
the shared fit loop with a per-epoch score and a stop test (``Model._fit_loop``), ``score()``
(the last minibatch's), ``clone()`` / ``save()`` / ``load()`` for the savers, and what the score
calculators call (``score(ds)``, ``do_evaluation``).
"""
from __future__ import annotations

import enum
import logging
import math
from typing import Any

import numpy as np

from ndws.data.dataset import DataSet, MultiDataSet
from ndws.nn._fit_options import reiterable
from ndws.nn.earlystopping.saver import EarlyStoppingModelSaver, InMemoryModelSaver
from ndws.nn.earlystopping.scorecalc import ScoreCalculator
from ndws.nn.earlystopping.termination import (EpochTerminationCondition,
                                               InvalidScoreIterationTerminationCondition,
                                               IterationTerminationCondition,
                                               MaxEpochsTerminationCondition)

__all__ = ["BaseEarlyStoppingTrainer", "EarlyStoppingConfiguration", "EarlyStoppingGraphTrainer",
           "EarlyStoppingListener", "EarlyStoppingResult", "EarlyStoppingTrainer",
           "TerminationReason"]

log = logging.getLogger("ndws")


def _conditions(name: str, values: Any, cls: type) -> tuple:
    if values is None:
        return ()
    if isinstance(values, cls):
        values = (values,)
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"EarlyStoppingConfiguration.{name}: expected a list of "
                        f"{cls.__name__}, got {type(values).__name__}")
    values = tuple(values)
    for i, c in enumerate(values):
        if not isinstance(c, cls):
            raise TypeError(f"EarlyStoppingConfiguration.{name}[{i}]: expected an "
                            f"{cls.__name__}, got {type(c).__name__}")
    return values


class EarlyStoppingConfiguration:
    """What an early stopping run does (DL4J's ``EarlyStoppingConfiguration.Builder``).

    Parameters
    ----------
    epoch_termination_conditions : list of EpochTerminationCondition
        Asked after each evaluated epoch (`MaxEpochsTerminationCondition` after every epoch).
    iteration_termination_conditions : list of IterationTerminationCondition
        Asked after each minibatch with its score.
    score_calculator : ScoreCalculator
        The held-out score (required; DL4J's "Score calculator cannot be null").
    model_saver : EarlyStoppingModelSaver, optional
        Default `InMemoryModelSaver()`.
    evaluate_every_n_epochs : int
        Score the network after epochs 0, n, 2n, ... (default 1).
    save_last_model : bool
        Also save the latest model after each evaluation (and when an iteration condition
        stops the run).

    At least one termination condition is required, as in DL4J.
    """

    def __init__(self, *, epoch_termination_conditions: Any = (),
                 iteration_termination_conditions: Any = (), score_calculator: Any = None,
                 model_saver: Any = None, evaluate_every_n_epochs: int = 1,
                 save_last_model: bool = False):
        self.epoch_termination_conditions = _conditions(
            "epoch_termination_conditions", epoch_termination_conditions,
            EpochTerminationCondition)
        self.iteration_termination_conditions = _conditions(
            "iteration_termination_conditions", iteration_termination_conditions,
            IterationTerminationCondition)
        if not (self.epoch_termination_conditions or self.iteration_termination_conditions):
            raise ValueError("EarlyStoppingConfiguration: Cannot conduct early stopping without "
                             "a termination condition (give epoch_termination_conditions or "
                             "iteration_termination_conditions)")
        if not isinstance(score_calculator, ScoreCalculator):
            raise TypeError(f"EarlyStoppingConfiguration.score_calculator: expected a "
                            f"ScoreCalculator (DataSetLossCalculator, ...), got "
                            f"{type(score_calculator).__name__}")
        self.score_calculator = score_calculator
        if model_saver is None:
            model_saver = InMemoryModelSaver()
        if not isinstance(model_saver, EarlyStoppingModelSaver):
            raise TypeError(f"EarlyStoppingConfiguration.model_saver: expected an "
                            f"EarlyStoppingModelSaver (InMemoryModelSaver, LocalFileModelSaver), "
                            f"got {type(model_saver).__name__}")
        self.model_saver = model_saver
        n = evaluate_every_n_epochs
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"EarlyStoppingConfiguration.evaluate_every_n_epochs: expected an "
                             f"int >= 1, got {n!r:.40}")
        self.evaluate_every_n_epochs = int(n)
        if not isinstance(save_last_model, bool):
            raise TypeError(f"EarlyStoppingConfiguration.save_last_model: expected True or "
                            f"False, got {save_last_model!r:.40}")
        self.save_last_model = save_last_model


class TerminationReason(enum.Enum):
    """Why an early stopping run ended (DL4J's ``EarlyStoppingResult.TerminationReason``)."""

    Error = "Error"
    IterationTerminationCondition = "IterationTerminationCondition"
    EpochTerminationCondition = "EpochTerminationCondition"


class EarlyStoppingResult:
    """The outcome of `EarlyStoppingTrainer.fit`.

    Attributes
    ----------
    termination_reason : TerminationReason
    termination_details : str
        The condition that stopped the run (its repr), or the error.
    total_epochs : int
        Epochs trained (an epoch an iteration condition cut short is not counted).
    best_model_epoch : int
        The evaluated epoch (from 0) of the best score; -1 when none was evaluated.
    best_model_score : float
    score_vs_epoch : dict of int to float
        Each evaluated epoch's score.
    history : History
        The run's fit record (the network's ``history``).
    error : Exception or None
        With reason Error: the exception the training step raised.
    """

    TerminationReason = TerminationReason

    def __init__(self, termination_reason: TerminationReason, termination_details: str,
                 score_vs_epoch: dict, best_model_epoch: int, best_model_score: float,
                 total_epochs: int, best_model: Any, history: Any = None,
                 error: BaseException | None = None):
        self.termination_reason = termination_reason
        self.termination_details = termination_details
        self.score_vs_epoch = score_vs_epoch
        self.best_model_epoch = best_model_epoch
        self.best_model_score = best_model_score
        self.total_epochs = total_epochs
        self._best_model = best_model
        self.history = history
        self.error = error

    def get_best_model(self) -> Any:
        """The best model the saver kept (the network as it ended when no epoch was
        evaluated)."""
        return self._best_model

    def __repr__(self) -> str:
        return (f"EarlyStoppingResult(terminationReason={self.termination_reason.name},"
                f"details={self.termination_details},bestModelEpoch={self.best_model_epoch},"
                f"bestModelScore={self.best_model_score},totalEpochs={self.total_epochs})")


class EarlyStoppingListener:
    """Hooks of an early stopping run (DL4J's ``EarlyStoppingListener``)."""

    def on_start(self, config: EarlyStoppingConfiguration, net: Any) -> None:
        """Before the first epoch."""

    def on_epoch(self, epoch: int, score: float, config: EarlyStoppingConfiguration,
                 net: Any) -> None:
        """After each evaluated epoch, with its score."""

    def on_completion(self, result: EarlyStoppingResult) -> None:
        """With the result, before fit returns it."""


class _Run:
    # one fit's bookkeeping: the epoch hook (fit's `validate`) and the stop test (fit's `stop`)

    def __init__(self, config: EarlyStoppingConfiguration, net: Any, listener: Any):
        self.config, self.net, self.listener = config, net, listener
        self.minimize = bool(config.score_calculator.minimize_score())
        self.best_score = math.inf if self.minimize else -math.inf
        self.best_epoch = -1
        self.scores: dict[int, float] = {}
        self.epoch = 0                        # epochs completed in this run
        self.reason: TerminationReason | None = None
        self.details = ""
        self.at_epoch_end = False
        self.cut_short = False                # an iteration condition ended an epoch early
        self.own_error = False                # raised by a calculator, saver or listener
        self.invalid = InvalidScoreIterationTerminationCondition()

    def _stop(self, reason: TerminationReason, condition: Any) -> None:
        self.reason, self.details = reason, repr(condition)

    def validate(self) -> tuple | None:
        try:
            return self._end_of_epoch()
        except BaseException:
            self.own_error = True
            raise

    def _end_of_epoch(self) -> tuple | None:
        cfg, epoch = self.config, self.epoch
        self.at_epoch_end = True
        self.epoch += 1
        conditions = cfg.epoch_termination_conditions
        if epoch % cfg.evaluate_every_n_epochs != 0:
            # not evaluated: only the conditions that need no score are asked
            for c in conditions:
                if not c.needs_score and c.terminate(epoch, math.nan, self.minimize):
                    self._stop(TerminationReason.EpochTerminationCondition, c)
                    break
            return None
        score = float(cfg.score_calculator.calculate_score(self.net))
        self.scores[epoch] = score
        invalid = not math.isfinite(score)
        if (score < self.best_score if self.minimize else score > self.best_score) or (
                self.best_epoch == -1 and invalid):
            log.info("Score at epoch %d: %s%s", epoch, score,
                     "" if self.best_epoch == -1 else
                     f" (new best; previous {self.best_score} at epoch {self.best_epoch})")
            self.best_score, self.best_epoch = score, epoch
            cfg.model_saver.save_best_model(self.net, score)
        if cfg.save_last_model:
            cfg.model_saver.save_latest_model(self.net, score)
        if self.listener is not None:
            self.listener.on_epoch(epoch, score, cfg, self.net)
        if invalid:
            # a held-out score that is not finite: the parameters are garbage from here on
            self._stop(TerminationReason.IterationTerminationCondition, self.invalid)
        else:
            for c in conditions:
                if c.terminate(epoch, score, self.minimize):
                    self._stop(TerminationReason.EpochTerminationCondition, c)
                    break
        return score, None

    def stop(self) -> bool:
        if self.at_epoch_end:
            self.at_epoch_end = False
            return self.reason is not None
        score = self.net.score()
        for c in self.config.iteration_termination_conditions + (self.invalid,):
            if c.terminate(score):
                self._stop(TerminationReason.IterationTerminationCondition, c)
                self.cut_short = True
                return True
        return False


class BaseEarlyStoppingTrainer:
    """What both trainers share (DL4J's ``BaseEarlyStoppingTrainer``): the checks of the
    arguments, and `fit`, which drives the network's own fit loop (``Model._fit_loop``)."""

    #: the network class the trainer takes, and the training data it reads
    _net_kind = "Model"
    _data_kinds: tuple = (DataSet,)
    _data_names = "a DataSetIterator, a list of DataSets or a DataSet"

    @staticmethod
    def _net_class() -> type:
        raise NotImplementedError

    def __init__(self, config: EarlyStoppingConfiguration, net: Any, train_iterator: Any,
                 listener: EarlyStoppingListener | None = None):
        if not isinstance(config, EarlyStoppingConfiguration):
            raise TypeError(f"config: expected an EarlyStoppingConfiguration, got "
                            f"{type(config).__name__}")
        if not isinstance(net, self._net_class()):
            raise TypeError(f"net: expected an ndws.nn.{self._net_kind}, got "
                            f"{type(net).__name__}")
        net._check_init()
        if isinstance(train_iterator, self._data_kinds):
            train_iterator = [train_iterator]
        elif isinstance(train_iterator, (str, bytes)) or not hasattr(train_iterator, "__iter__"):
            raise TypeError(f"train_iterator: expected {self._data_names}, got "
                            f"{type(train_iterator).__name__}")
        elif not isinstance(train_iterator, list):
            reiterable(train_iterator, where="train_iterator")
        if listener is not None and not isinstance(listener, EarlyStoppingListener):
            raise TypeError(f"listener: expected an EarlyStoppingListener, got "
                            f"{type(listener).__name__}")
        self.config, self.net, self.train = config, net, train_iterator
        self.listener = listener

    def fit(self, progress: bool | None = None) -> EarlyStoppingResult:
        """Train until a termination condition is met; returns the `EarlyStoppingResult`.
        An exception of the training step (a bad batch, a layer's error) ends the run with
        reason Error (DL4J's) and is kept in ``result.error``; one of the score calculator,
        the saver or the listener propagates."""
        cfg, net = self.config, self.net
        for c in cfg.iteration_termination_conditions + cfg.epoch_termination_conditions:
            c.initialize()
        if self.listener is not None:
            self.listener.on_start(cfg, net)
        if callable(getattr(self.train, "reset", None)):
            self.train.reset()           # an earlier run may have stopped inside an epoch
        run = _Run(cfg, net, self.listener)
        limits = [c.max_epochs for c in cfg.epoch_termination_conditions
                  if isinstance(c, MaxEpochsTerminationCondition)]
        error = None
        try:
            net._fit_loop(self.train, None, None, min(limits) if limits else None, progress,
                          validate=run.validate, stop=run.stop)
        except Exception as exc:
            if run.own_error:
                raise
            log.warning("Early stopping training terminated due to exception at epoch %d: %r",
                        run.epoch, exc)
            error = exc
        saver = cfg.model_saver
        if error is not None:
            result = EarlyStoppingResult(TerminationReason.Error, repr(error), run.scores,
                                         run.best_epoch, run.best_score, run.epoch,
                                         saver.get_best_model(), net.history, error)
        else:
            total = run.epoch
            if run.cut_short and cfg.save_last_model:
                saver.save_latest_model(net, 0.0)
            best = saver.get_best_model()
            result = EarlyStoppingResult(run.reason, run.details, run.scores, run.best_epoch,
                                         run.best_score, total, best if best is not None else net,
                                         net.history)
        if self.listener is not None:
            self.listener.on_completion(result)
        return result


class EarlyStoppingTrainer(BaseEarlyStoppingTrainer):
    """Trains `net` on `train_iterator` under `config` (DL4J's ``EarlyStoppingTrainer``).

    Parameters
    ----------
    config : EarlyStoppingConfiguration
    net : MultiLayerNetwork
        Initialised; it goes on training in place (the best model is the saver's copy).
    train_iterator : DataSetIterator, list of DataSets or DataSet
        Read once per epoch (a generator, read only once, is refused).
    listener : EarlyStoppingListener, optional
    """

    _net_kind = "MultiLayerNetwork"

    @staticmethod
    def _net_class() -> type:
        from ndws.nn.network import MultiLayerNetwork
        return MultiLayerNetwork


class EarlyStoppingGraphTrainer(BaseEarlyStoppingTrainer):
    """Trains a `ComputationGraph` on `train_iterator` under `config` (DL4J's
    ``EarlyStoppingGraphTrainer``), as `EarlyStoppingTrainer` trains a network.

    Parameters
    ----------
    config : EarlyStoppingConfiguration
        Its score calculator reads MultiDataSets too (`DataSetLossCalculator`; the evaluation
        calculators count the graph's first output).
    net : ComputationGraph
        Initialised; it goes on training in place.
    train_iterator : MultiDataSetIterator, DataSetIterator, list of MultiDataSets or
        DataSets, a MultiDataSet or a DataSet
        Read once per epoch (a generator is refused); a DataSet needs a graph of one input
        and one output.
    listener : EarlyStoppingListener, optional
    """

    _net_kind = "ComputationGraph"
    _data_kinds = (DataSet, MultiDataSet)
    _data_names = ("a MultiDataSetIterator, a DataSetIterator, a list of MultiDataSets or "
                   "DataSets, a MultiDataSet or a DataSet")

    @staticmethod
    def _net_class() -> type:
        from ndws.nn.graph import ComputationGraph
        return ComputationGraph
