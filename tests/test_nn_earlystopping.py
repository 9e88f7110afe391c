"""ndws.nn.earlystopping: DL4J's TestEarlyStopping ported (termination reasons and details,
best-epoch bookkeeping, savers), the History and bar records, NaN scores, hostile input."""
from __future__ import annotations

import math
import os

import numpy as np
import pytest

import ndws
from ndws.data.dataset import DataSet
from ndws.data.iterators import ArrayDataSetIterator
from ndws.evaluation import Evaluation, RegressionMetric
from ndws.nn import (DenseLayer, MultiLayerConfiguration, MultiLayerNetwork, OutputLayer, Sgd)
from ndws.nn.earlystopping import (BestScoreEpochTerminationCondition,
                                   ClassificationScoreCalculator, DataSetLossCalculator,
                                   EarlyStoppingConfiguration, EarlyStoppingListener,
                                   EarlyStoppingTrainer, InMemoryModelSaver,
                                   InvalidScoreIterationTerminationCondition,
                                   LocalFileModelSaver, MaxEpochsTerminationCondition,
                                   MaxScoreIterationTerminationCondition,
                                   MaxTimeIterationTerminationCondition,
                                   RegressionScoreCalculator, ROCScoreCalculator,
                                   ScoreImprovementEpochTerminationCondition,
                                   TerminationReason)
from ndws.nn.earlystopping import termination


def _data(rng, n=150, classes=3):
    # an Iris-like problem: 4 features, 3 separable-ish classes
    y = rng.integers(0, classes, n)
    x = (rng.standard_normal((n, 4)) * 0.5 + y[:, None]).astype(np.float32)
    return x, np.eye(classes, dtype=np.float32)[y]


def _net(lr=0.1, seed=12345, n_out=3, activation="softmax", loss="MCXENT"):
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=4, n_out=8, activation="tanh"),
         OutputLayer(n_out=n_out, activation=activation, loss_function=loss)],
        seed=seed, updater=Sgd(lr)))
    net.init()
    return net


def _iter(x, y, batch=50):
    return ArrayDataSetIterator(x, y, batch_size=batch)


def test_max_epochs_iris(rng):
    x, y = _data(rng)
    net = _net()
    saver = InMemoryModelSaver()
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(5)],
        iteration_termination_conditions=[MaxTimeIterationTerminationCondition(1, "MINUTES")],
        score_calculator=DataSetLossCalculator(_iter(x, y)), model_saver=saver)
    result = EarlyStoppingTrainer(cfg, net, _iter(x, y)).fit(progress=False)
    assert result.termination_reason is TerminationReason.EpochTerminationCondition
    assert result.termination_details == "MaxEpochsTerminationCondition(5)"
    assert result.total_epochs == 5 and net.epoch == 5
    assert sorted(result.score_vs_epoch) == [0, 1, 2, 3, 4]
    best = min(result.score_vs_epoch, key=result.score_vs_epoch.get)
    assert result.best_model_epoch == best
    assert result.best_model_score == result.score_vs_epoch[best]
    # the best model is a copy, its held-out score the recorded one (exactly: same pass)
    model = result.get_best_model()
    assert model is saver.get_best_model() and model is not net
    assert DataSetLossCalculator(_iter(x, y)).calculate_score(model) == result.best_model_score
    # each epoch's score is the History's validation record
    h = net.history
    assert h is result.history
    assert h.validation_scores == [result.score_vs_epoch[e] for e in range(5)]
    assert h.validation_epochs == [0, 1, 2, 3, 4] and len(h.epoch_scores) == 5


def test_evaluate_every_n_epochs(rng):
    x, y = _data(rng)
    net = _net()
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(5)],
        score_calculator=DataSetLossCalculator(_iter(x, y)), evaluate_every_n_epochs=2)
    result = EarlyStoppingTrainer(cfg, net, _iter(x, y)).fit(progress=False)
    assert result.termination_reason is TerminationReason.EpochTerminationCondition
    assert result.total_epochs == 5
    assert sorted(result.score_vs_epoch) == [0, 2, 4]
    assert net.history.validation_epochs == [0, 2, 4]
    # max epochs is asked on unevaluated epochs too: 4 stops after epoch 3 (DL4J overruns)
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(4)],
        score_calculator=DataSetLossCalculator(_iter(x, y)), evaluate_every_n_epochs=3)
    result = EarlyStoppingTrainer(cfg, _net(), _iter(x, y)).fit(progress=False)
    assert result.total_epochs == 4 and sorted(result.score_vs_epoch) == [0, 3]


def test_bad_tuning_max_score(rng):
    x, y = _data(rng)
    net = _net()
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(5000)],
        iteration_termination_conditions=[MaxScoreIterationTerminationCondition(0.0)],
        score_calculator=DataSetLossCalculator(_iter(x, y)), save_last_model=True)
    before = net.params().numpy()
    result = EarlyStoppingTrainer(cfg, net, _iter(x, y)).fit(progress=False)
    assert result.termination_reason is TerminationReason.IterationTerminationCondition
    assert result.termination_details == "MaxScoreIterationTerminationCondition(0.0)"
    assert result.total_epochs == 0 and result.best_model_epoch == -1
    assert result.score_vs_epoch == {}
    assert net.iteration == 1 and not np.array_equal(before, net.params().numpy())
    # nothing evaluated: the network as it ended (DL4J's rule); the latest model was saved
    assert result.get_best_model() is net
    latest = cfg.model_saver.get_latest_model()
    np.testing.assert_array_equal(latest.params().numpy(), net.params().numpy())
    # the epoch cut short has a start but no end record
    assert net.history.epochs == [0] and net.history.epoch_scores == []
    assert net.history.scores == [net.score()]


def test_max_time(rng, monkeypatch):
    x, y = _data(rng)
    now = [1000.0]
    monkeypatch.setattr(termination, "_clock", lambda: now[0])

    class Tick(EarlyStoppingListener):
        def on_epoch(self, epoch, score, config, net):
            now[0] += 20.0                 # each epoch "takes" 20 s

    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(10000)],
        iteration_termination_conditions=[MaxTimeIterationTerminationCondition(1, "minutes")],
        score_calculator=DataSetLossCalculator(_iter(x, y)))
    result = EarlyStoppingTrainer(cfg, _net(), _iter(x, y), listener=Tick()).fit(
        progress=False)
    assert result.termination_reason is TerminationReason.IterationTerminationCondition
    assert result.termination_details == "MaxTimeIterationTerminationCondition(1,unit=MINUTES)"
    # 60 s are reached at the end of epoch 2; the first batch of epoch 3 stops the run
    assert result.total_epochs == 3 and sorted(result.score_vs_epoch) == [0, 1, 2]


def test_no_improvement_n_epochs(rng):
    x, y = _data(rng)
    net = _net(lr=0.0)                     # the score never changes
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(100),
                                      ScoreImprovementEpochTerminationCondition(5)],
        iteration_termination_conditions=[MaxTimeIterationTerminationCondition(1, "MINUTES"),
                                          MaxScoreIterationTerminationCondition(50)],
        score_calculator=DataSetLossCalculator(_iter(x, y)))
    result = EarlyStoppingTrainer(cfg, net, _iter(x, y)).fit(progress=False)
    assert result.termination_reason is TerminationReason.EpochTerminationCondition
    assert result.termination_details == ("ScoreImprovementEpochTerminationCondition("
                                          "max_epochs_with_no_improvement=5, "
                                          "min_improvement=0.0)")
    assert result.total_epochs == 6 and result.best_model_epoch == 0


def test_min_improvement_condition():
    c = ScoreImprovementEpochTerminationCondition(3, 0.1)
    c.initialize()
    # an improvement of 0.05 on the best does not count: 3 epochs after epoch 0 it stops
    assert [c.terminate(e, s, True) for e, s in enumerate([1.0, 0.95, 0.97, 0.95])] == \
        [False] * 3 + [True]
    c.initialize()
    assert [c.terminate(e, 1.0 - 0.2 * e, True) for e in range(6)] == [False] * 6
    c.initialize()                          # maximising
    assert [c.terminate(e, 0.2 * e, False) for e in range(6)] == [False] * 6


def test_best_score_condition(rng):
    x, y = _data(rng)
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(1000),
                                      BestScoreEpochTerminationCondition(0.7)],
        score_calculator=ClassificationScoreCalculator(Evaluation.Metric.ACCURACY,
                                                       _iter(x, y)))
    result = EarlyStoppingTrainer(cfg, _net(lr=0.5), _iter(x, y)).fit(progress=False)
    assert result.termination_details == "BestScoreEpochTerminationCondition(0.7)"
    scores = [result.score_vs_epoch[e] for e in sorted(result.score_vs_epoch)]
    assert scores[-1] > 0.7 and all(s <= 0.7 for s in scores[:-1])
    # accuracy is maximised: the best epoch holds the largest
    assert result.best_model_score == max(scores)
    assert result.get_best_model().evaluate(x, y).accuracy() == result.best_model_score
    c = BestScoreEpochTerminationCondition(0.5)
    assert c.terminate(0, 0.4, True) and not c.terminate(0, 0.4, False)


def test_local_file_saver_survives_a_crash(rng, tmp_path):
    x, y = _data(rng)
    net = _net(lr=0.3)
    seen = {}

    class Crash(EarlyStoppingListener):
        def on_epoch(self, epoch, score, config, model):
            seen[epoch] = (score, model.params().numpy())
            if epoch == 3:
                raise KeyboardInterrupt        # the run dies: Ctrl-C, a killed process

    saver = LocalFileModelSaver(tmp_path / "es")
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(10)],
        score_calculator=DataSetLossCalculator(_iter(x, y)), model_saver=saver,
        save_last_model=True)
    with pytest.raises(KeyboardInterrupt):
        EarlyStoppingTrainer(cfg, net, _iter(x, y), listener=Crash()).fit(progress=False)
    best_epoch = min(seen, key=lambda e: seen[e][0])
    assert os.path.exists(saver.best_model_path)
    # another process reads the directory: the network's own zip
    again = LocalFileModelSaver(tmp_path / "es")
    loaded = MultiLayerNetwork.load(again.best_model_path)
    np.testing.assert_array_equal(loaded.params().numpy(), seen[best_epoch][1])
    np.testing.assert_array_equal(again.get_best_model().params().numpy(),
                                  seen[best_epoch][1])
    np.testing.assert_array_equal(again.get_latest_model().params().numpy(), seen[3][1])


def test_local_file_saver_best_model(rng, tmp_path):
    x, y = _data(rng)
    saver = LocalFileModelSaver(str(tmp_path))
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(4)],
        score_calculator=DataSetLossCalculator(_iter(x, y), average=False), model_saver=saver)
    result = EarlyStoppingTrainer(cfg, _net(), _iter(x, y)).fit(progress=False)
    best = result.get_best_model()
    assert isinstance(best, MultiLayerNetwork)
    score = DataSetLossCalculator(_iter(x, y), average=False).calculate_score(best)
    assert score == pytest.approx(result.best_model_score, rel=1e-6)
    assert saver.get_latest_model() is None           # save_last_model off


def test_nan_score_stops_with_invalid_score(rng):
    x, y = _data(rng)
    x[7, 2] = np.nan
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(10)],
        score_calculator=DataSetLossCalculator(_iter(*_data(rng))))
    # no RuntimeWarning from fit (filterwarnings = error): the run stops at once
    net = _net()
    result = EarlyStoppingTrainer(cfg, net, _iter(x, y)).fit(progress=False)
    assert result.termination_reason is TerminationReason.IterationTerminationCondition
    assert result.termination_details == "InvalidScoreIterationTerminationCondition()"
    assert net.iteration == 1 and result.total_epochs == 0
    assert math.isnan(net.history.scores[-1])
    assert InvalidScoreIterationTerminationCondition().terminate(math.inf)


def test_nan_held_out_score_stops(rng):
    x, y = _data(rng)
    bad = x.copy()
    bad[0, 0] = np.nan
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(10)],
        score_calculator=DataSetLossCalculator(_iter(bad, y)))
    result = EarlyStoppingTrainer(cfg, _net(), _iter(x, y)).fit(progress=False)
    assert result.termination_reason is TerminationReason.IterationTerminationCondition
    assert result.termination_details == "InvalidScoreIterationTerminationCondition()"
    assert result.total_epochs == 1 and result.best_model_epoch == 0
    assert not math.isfinite(result.best_model_score)


def test_regression_and_roc_calculators(rng):
    x = rng.standard_normal((80, 4)).astype(np.float32)
    t = (x @ np.array([[0.5], [-1.0], [0.25], [2.0]], dtype=np.float32))
    net = _net(lr=0.05, n_out=1, activation="identity", loss="MSE")
    for metric, minimize in ((RegressionMetric.MSE, True), ("R2", False)):
        calc = RegressionScoreCalculator(metric, [DataSet(x, t)])
        assert calc.minimize_score() is minimize
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(6)],
        score_calculator=RegressionScoreCalculator("MSE", (x, t)))
    result = EarlyStoppingTrainer(cfg, net, [DataSet(x, t)]).fit(progress=False)
    mse = result.get_best_model().evaluate_regression(x, t).score_for_metric("MSE")
    assert mse == pytest.approx(result.best_model_score, rel=1e-6)
    assert result.best_model_score == min(result.score_vs_epoch.values())
    # ROC AUC of a 2-class softmax, and DL4J's argument order
    xc, yc = _data(rng, classes=2)
    calc = ROCScoreCalculator("ROC", _iter(xc, yc))
    calc2 = ROCScoreCalculator(ROCScoreCalculator.ROCType.MULTICLASS,
                               ROCScoreCalculator.Metric.AUPRC, _iter(xc, yc))
    net2 = _net(n_out=2)
    assert calc.minimize_score() is False
    auc = calc.calculate_score(net2)
    assert auc == net2.do_evaluation(xc, yc, ndws.evaluation.ROC()).calculate_auc()
    assert calc2.calculate_score(net2) == net2.evaluate_roc_multi_class(
        xc, yc).calculate_average_auprc()


def test_training_error_ends_with_reason_error(rng):
    x, y = _data(rng)
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(3)],
        score_calculator=DataSetLossCalculator(_iter(x, y)))
    result = EarlyStoppingTrainer(cfg, _net(), [DataSet(x[:10], y[:10]), "oops"]).fit(
        progress=False)
    assert result.termination_reason is TerminationReason.Error
    assert isinstance(result.error, TypeError)
    assert "item 1 is a str, not a DataSet" in result.termination_details
    # a calculator's error is the trainer's own: it propagates
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(3)],
        score_calculator=DataSetLossCalculator([DataSet(x[:0], y[:0])]))
    with pytest.raises(ValueError, match="DataSetLossCalculator.iterator: no examples"):
        EarlyStoppingTrainer(cfg, _net(), _iter(x, y)).fit(progress=False)


def test_listener_hooks_and_repeat_runs(rng):
    x, y = _data(rng)
    calls = []

    class L(EarlyStoppingListener):
        def on_start(self, config, net):
            calls.append("start")

        def on_epoch(self, epoch, score, config, net):
            calls.append(epoch)

        def on_completion(self, result):
            calls.append(result.termination_reason.name)

    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(2)],
        score_calculator=DataSetLossCalculator(_iter(x, y)))
    trainer = EarlyStoppingTrainer(cfg, _net(), _iter(x, y), listener=L())
    trainer.fit(progress=False)
    result = trainer.fit(progress=False)          # conditions initialised again
    assert calls == ["start", 0, 1, "EpochTerminationCondition"] * 2
    assert result.total_epochs == 2 and trainer.net.epoch == 4


def test_hostile_input(rng, tmp_path):
    x, y = _data(rng)
    calc = DataSetLossCalculator(_iter(x, y))
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(NotADirectoryError, match="LocalFileModelSaver.directory: .* exists "
                                                 "and is not a directory"):
        LocalFileModelSaver(f)
    with pytest.raises(TypeError, match="LocalFileModelSaver.directory: expected a path"):
        LocalFileModelSaver(3)
    with pytest.raises(ValueError, match=r"max_epochs_with_no_improvement: expected an int >= 0"
                                         r" \(the epochs without improvement tolerated\), got -1"):
        ScoreImprovementEpochTerminationCondition(-1)
    with pytest.raises(TypeError, match="max_epochs_with_no_improvement"):
        ScoreImprovementEpochTerminationCondition(2.5)
    with pytest.raises(ValueError, match="min_improvement: expected a finite number"):
        ScoreImprovementEpochTerminationCondition(2, math.nan)
    with pytest.raises(ValueError, match="MaxEpochsTerminationCondition.max_epochs"):
        MaxEpochsTerminationCondition(0)
    with pytest.raises(ValueError, match="max_time_amount: expected a number > 0"):
        MaxTimeIterationTerminationCondition(-5)
    with pytest.raises(ValueError, match="max_time_unit: expected one of"):
        MaxTimeIterationTerminationCondition(5, "fortnights")
    with pytest.raises(ValueError, match="best_expected_score: expected a finite number"):
        BestScoreEpochTerminationCondition(math.inf)
    with pytest.raises(ValueError, match="without a termination condition"):
        EarlyStoppingConfiguration(score_calculator=calc)
    with pytest.raises(TypeError, match="score_calculator: expected a ScoreCalculator"):
        EarlyStoppingConfiguration(
            epoch_termination_conditions=[MaxEpochsTerminationCondition(2)])
    with pytest.raises(TypeError, match=r"epoch_termination_conditions\[0\]: expected an "
                                        r"EpochTerminationCondition, got "
                                        r"MaxScoreIterationTerminationCondition"):
        EarlyStoppingConfiguration(
            epoch_termination_conditions=[MaxScoreIterationTerminationCondition(1)],
            score_calculator=calc)
    with pytest.raises(ValueError, match="evaluate_every_n_epochs: expected an int >= 1"):
        EarlyStoppingConfiguration(
            epoch_termination_conditions=[MaxEpochsTerminationCondition(2)],
            score_calculator=calc, evaluate_every_n_epochs=0)
    with pytest.raises(TypeError, match="model_saver: expected an EarlyStoppingModelSaver"):
        EarlyStoppingConfiguration(
            epoch_termination_conditions=[MaxEpochsTerminationCondition(2)],
            score_calculator=calc, model_saver=str(tmp_path))
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(2)], score_calculator=calc)
    with pytest.raises(TypeError, match="train_iterator: a generator can be read only once"):
        EarlyStoppingTrainer(cfg, _net(), (DataSet(x, y) for _ in range(2)))
    with pytest.raises(TypeError, match="DataSetLossCalculator.iterator: a generator"):
        DataSetLossCalculator(DataSet(x, y) for _ in range(2))
    with pytest.raises(TypeError, match="net: expected an ndws.nn.MultiLayerNetwork"):
        EarlyStoppingTrainer(cfg, "net", _iter(x, y))
    with pytest.raises(RuntimeError, match="call init"):
        EarlyStoppingTrainer(cfg, MultiLayerNetwork(_net().conf), _iter(x, y))
    with pytest.raises(ValueError, match="ClassificationScoreCalculator.metric: unknown metric"):
        ClassificationScoreCalculator("AUC", _iter(x, y))
    with pytest.raises(ValueError, match="ROCScoreCalculator.roc_type: unknown ROC type"):
        ROCScoreCalculator("PR", _iter(x, y))
    with pytest.raises(TypeError, match="DataSetLossCalculator.average"):
        DataSetLossCalculator(_iter(x, y), average="yes")
