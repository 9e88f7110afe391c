"""EarlyStoppingGraphTrainer: DL4J's TestEarlyStoppingCompGraph ported (Iris-like termination on
max epochs, bad tuning, no improvement, listeners, the evaluation calculators), a two-input
graph scored over MultiDataSets, the savers with a graph, hostile input; and the fit loop both
network types share (a graph's fit is the same epochs, shuffled or not)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ndws.data.dataset import DataSet, MultiDataSet
from ndws.data.iterators import ArrayDataSetIterator, ArrayMultiDataSetIterator
from ndws.evaluation import Evaluation, RegressionMetric
from ndws.nn import (ComputationGraph, ComputationGraphConfiguration, DenseLayer, InputType,
                     MultiLayerConfiguration, MultiLayerNetwork, OutputLayer, Sgd)
from ndws.nn.earlystopping import (ClassificationScoreCalculator, DataSetLossCalculator,
                                   EarlyStoppingConfiguration, EarlyStoppingGraphTrainer,
                                   EarlyStoppingListener, EarlyStoppingTrainer,
                                   InMemoryModelSaver, LocalFileGraphSaver, LocalFileModelSaver,
                                   MaxEpochsTerminationCondition,
                                   MaxScoreIterationTerminationCondition,
                                   MaxTimeIterationTerminationCondition,
                                   RegressionScoreCalculator,
                                   ScoreImprovementEpochTerminationCondition,
                                   TerminationReason)


def _data(rng, n=150, classes=3):
    y = rng.integers(0, classes, n)
    x = (rng.standard_normal((n, 4)) * 0.5 + y[:, None]).astype(np.float32)
    return x, np.eye(classes, dtype=np.float32)[y]


def _graph(lr=0.1, seed=12345, n_out=3, activation="softmax", loss="MCXENT"):
    conf = (ComputationGraphConfiguration.builder(seed=seed, updater=Sgd(lr))
            .add_inputs("in")
            .add_layer("0", DenseLayer(n_out=8, activation="tanh"), "in")
            .add_layer("1", OutputLayer(n_out=n_out, activation=activation, loss_function=loss),
                       "0")
            .set_outputs("1").set_input_types(InputType.feed_forward(4)).build())
    g = ComputationGraph(conf)
    g.init()
    return g


def _mlp(seed):
    # the network _graph is the graph of
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=4, n_out=8, activation="tanh"),
         OutputLayer(n_out=3, activation="softmax", loss_function="MCXENT")],
        seed=seed, updater=Sgd(0.1)))
    net.init()
    return net


def _two_inputs(seed=3):
    conf = (ComputationGraphConfiguration.builder(seed=seed, updater=Sgd(0.1))
            .add_inputs("a", "b")
            .add_layer("da", DenseLayer(n_out=6, activation="tanh"), "a")
            .add_layer("db", DenseLayer(n_out=6, activation="tanh"), "b")
            .add_layer("out", OutputLayer(n_out=3, activation="softmax"), "da", "db")
            .add_layer("reg", OutputLayer(n_out=1, activation="identity", loss_function="MSE"),
                       "db")
            .set_outputs("out", "reg")
            .set_input_types(InputType.feed_forward(4), InputType.feed_forward(2)).build())
    g = ComputationGraph(conf)
    g.init()
    return g


def _iter(x, y, batch=50):
    return ArrayDataSetIterator(x, y, batch_size=batch)


def test_early_stopping_iris(rng):
    # DL4J: testEarlyStoppingIris
    x, y = _data(rng)
    g = _graph()
    saver = InMemoryModelSaver()
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(5)],
        iteration_termination_conditions=[MaxTimeIterationTerminationCondition(1, "MINUTES")],
        score_calculator=DataSetLossCalculator(_iter(x, y)), model_saver=saver)
    result = EarlyStoppingGraphTrainer(cfg, g, _iter(x, y)).fit(progress=False)
    assert result.termination_reason is TerminationReason.EpochTerminationCondition
    assert result.termination_details == "MaxEpochsTerminationCondition(5)"
    assert result.total_epochs == 5 and g.epoch == 5 and g.iteration == 15
    assert sorted(result.score_vs_epoch) == [0, 1, 2, 3, 4]
    best = min(result.score_vs_epoch, key=result.score_vs_epoch.get)
    assert result.best_model_epoch == best
    model = result.get_best_model()
    assert isinstance(model, ComputationGraph) and model is not g
    assert DataSetLossCalculator(_iter(x, y)).calculate_score(model) == result.best_model_score
    # the loss over DataSets is the graph's score, weighted by rows
    xs, ys = x[:100], y[:100]
    mean = (g.score(DataSet(xs[:50], ys[:50])) + g.score(DataSet(xs[50:], ys[50:]))) / 2
    assert DataSetLossCalculator(_iter(xs, ys)).calculate_score(g) == pytest.approx(mean,
                                                                                    rel=1e-12)
    assert g.history is result.history
    assert g.history.validation_scores == [result.score_vs_epoch[e] for e in range(5)]


def test_same_run_as_the_network(rng):
    # a graph of a network trains to the same bits under the same early stopping run
    x, y = _data(rng)
    net = _mlp(12345)
    g = net.to_computation_graph()

    def run(trainer, model):
        cfg = EarlyStoppingConfiguration(
            epoch_termination_conditions=[MaxEpochsTerminationCondition(4)],
            score_calculator=DataSetLossCalculator(_iter(x, y)))
        return trainer(cfg, model, _iter(x, y)).fit(progress=False)

    a, b = run(EarlyStoppingTrainer, net), run(EarlyStoppingGraphTrainer, g)
    assert a.score_vs_epoch == b.score_vs_epoch
    np.testing.assert_array_equal(net.params().numpy(), g.params().numpy())


def test_bad_tuning(rng):
    # DL4J: testBadTuning (the score over a huge learning rate passes the limit)
    x, y = _data(rng)
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(5000)],
        iteration_termination_conditions=[MaxScoreIterationTerminationCondition(0.0)],
        score_calculator=DataSetLossCalculator(_iter(x, y)))
    g = _graph(lr=5.0)
    result = EarlyStoppingGraphTrainer(cfg, g, _iter(x, y)).fit(progress=False)
    assert result.termination_reason is TerminationReason.IterationTerminationCondition
    assert result.termination_details == "MaxScoreIterationTerminationCondition(0.0)"
    assert result.total_epochs == 0 and result.best_model_epoch == -1
    assert g.iteration == 1 and result.get_best_model() is g


def test_no_improvement_n_epochs(rng):
    # DL4J: testNoImprovementNEpochsTermination (learning rate 0: the score never improves)
    x, y = _data(rng)
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(100),
                                      ScoreImprovementEpochTerminationCondition(5)],
        iteration_termination_conditions=[MaxScoreIterationTerminationCondition(50)],
        score_calculator=DataSetLossCalculator(_iter(x, y)))
    result = EarlyStoppingGraphTrainer(cfg, _graph(lr=0.0), _iter(x, y)).fit(progress=False)
    assert result.total_epochs == 6 and result.best_model_epoch == 0
    assert result.termination_reason is TerminationReason.EpochTerminationCondition
    assert result.termination_details == repr(ScoreImprovementEpochTerminationCondition(5))


def test_listeners(rng):
    # DL4J: testListeners
    x, y = _data(rng)
    calls = {"start": 0, "epoch": [], "done": 0}

    class L(EarlyStoppingListener):
        def on_start(self, config, net):
            calls["start"] += 1

        def on_epoch(self, epoch, score, config, net):
            calls["epoch"].append(epoch)

        def on_completion(self, result):
            calls["done"] += 1

    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(5)],
        score_calculator=DataSetLossCalculator(_iter(x, y)))
    EarlyStoppingGraphTrainer(cfg, _graph(), _iter(x, y), listener=L()).fit(progress=False)
    assert calls == {"start": 1, "epoch": [0, 1, 2, 3, 4], "done": 1}


def test_evaluation_calculators(rng):
    # DL4J: testClassificationScoreFunctionSimple / testRegressionScoreFunctionSimple; the
    # graph's first output, held-out data as an iterator or (features, labels) arrays
    x, y = _data(rng)
    g = _graph()
    acc = ClassificationScoreCalculator(Evaluation.Metric.ACCURACY, (x, y))
    ev = g.evaluate(DataSet(x, y))
    assert acc.calculate_score(g) == ev.accuracy()
    assert ClassificationScoreCalculator("ACCURACY", _iter(x, y)).calculate_score(g) == \
        ev.accuracy()
    t = rng.standard_normal((150, 3)).astype(np.float32)
    r = _graph(n_out=3, activation="identity", loss="MSE")
    mse = RegressionScoreCalculator(RegressionMetric.MSE, (x, t)).calculate_score(r)
    out = r.output_single(x).numpy().astype(np.float64)
    assert mse == pytest.approx(((out - t) ** 2).mean(), rel=1e-5)
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(3)],
        score_calculator=RegressionScoreCalculator("MSE", (x, t)))
    result = EarlyStoppingGraphTrainer(cfg, r, _iter(x, t)).fit(progress=False)
    assert result.total_epochs == 3 and len(result.score_vs_epoch) == 3


def test_two_inputs_multidatasets(rng):
    # a graph of two inputs and two outputs: trained on a MultiDataSetIterator, scored on
    # MultiDataSets and on (features, labels) lists, its score the sum of both outputs' losses
    n = 120
    a = rng.standard_normal((n, 4)).astype(np.float32)
    b = rng.standard_normal((n, 2)).astype(np.float32)
    cls = np.eye(3, dtype=np.float32)[rng.integers(0, 3, n)]
    reg = rng.standard_normal((n, 1)).astype(np.float32)
    train = ArrayMultiDataSetIterator([a, b], [cls, reg], batch_size=40)
    held = [MultiDataSet([a[:60], b[:60]], [cls[:60], reg[:60]]),
            MultiDataSet([a[60:], b[60:]], [cls[60:], reg[60:]])]
    g = _two_inputs()
    lists = DataSetLossCalculator(([a, b], [cls, reg]))
    mds = DataSetLossCalculator(held)
    expected = (g.score(held[0]) + g.score(held[1])) / 2
    assert mds.calculate_score(g) == pytest.approx(expected, rel=1e-12)
    assert lists.calculate_score(g) == pytest.approx(
        g.score(MultiDataSet([a, b], [cls, reg])), rel=1e-6)
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(3)],
        score_calculator=mds, save_last_model=True)
    result = EarlyStoppingGraphTrainer(cfg, g, train).fit(progress=False)
    assert result.total_epochs == 3 and g.iteration == 9
    best = result.get_best_model()
    assert mds.calculate_score(best) == result.best_model_score
    latest = cfg.model_saver.get_latest_model()
    np.testing.assert_array_equal(latest.params().numpy(), g.params().numpy())
    # a single MultiDataSet is the training data too
    result = EarlyStoppingGraphTrainer(cfg, _two_inputs(), held[0]).fit(progress=False)
    assert result.total_epochs == 3


def test_local_file_graph_saver(rng, tmp_path):
    x, y = _data(rng)
    saver = LocalFileGraphSaver(tmp_path / "es")
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(3)],
        score_calculator=DataSetLossCalculator(_iter(x, y)), model_saver=saver)
    result = EarlyStoppingGraphTrainer(cfg, _graph(), _iter(x, y)).fit(progress=False)
    best = result.get_best_model()
    assert isinstance(best, ComputationGraph)
    assert DataSetLossCalculator(_iter(x, y)).calculate_score(best) == pytest.approx(
        result.best_model_score, rel=1e-6)
    # another process reads the directory: a graph by default for LocalFileGraphSaver; the
    # network's saver names the type the file holds
    loaded = LocalFileGraphSaver(tmp_path / "es").get_best_model()
    np.testing.assert_array_equal(loaded.params().numpy(), best.params().numpy())
    with pytest.raises(ValueError, match="holds a ComputationGraph, not a MultiLayerNetwork"):
        LocalFileModelSaver(tmp_path / "es").get_best_model()
    # a graph through the network's saver in the same run loads as a graph
    plain = LocalFileModelSaver(tmp_path / "plain")
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(1)],
        score_calculator=DataSetLossCalculator(_iter(x, y)), model_saver=plain)
    assert isinstance(EarlyStoppingGraphTrainer(cfg, _graph(), _iter(x, y)).fit(
        progress=False).get_best_model(), ComputationGraph)


def test_nan_score_stops(rng):
    x, y = _data(rng)
    x[3, 1] = np.nan
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(10)],
        score_calculator=DataSetLossCalculator(_iter(*_data(rng))))
    g = _graph()
    result = EarlyStoppingGraphTrainer(cfg, g, _iter(x, y)).fit(progress=False)
    assert result.termination_reason is TerminationReason.IterationTerminationCondition
    assert result.termination_details == "InvalidScoreIterationTerminationCondition()"
    assert g.iteration == 1 and math.isnan(g.score())


def test_training_error_ends_with_reason_error(rng):
    x, y = _data(rng)
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(3)],
        score_calculator=DataSetLossCalculator(_iter(x, y)))
    bad = [DataSet(x[:10], y[:10]), DataSet(x[:10, :3], y[:10])]
    result = EarlyStoppingGraphTrainer(cfg, _graph(), bad).fit(progress=False)
    assert result.termination_reason is TerminationReason.Error
    assert isinstance(result.error, ValueError) and result.total_epochs == 0


def test_hostile_input(rng):
    x, y = _data(rng)
    cfg = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(3)],
        score_calculator=DataSetLossCalculator(_iter(x, y)))
    g = _graph()
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [OutputLayer(n_in=4, n_out=3, activation="softmax")]))
    net.init()
    with pytest.raises(TypeError, match="net: expected an ndws.nn.ComputationGraph, got "
                                        "MultiLayerNetwork"):
        EarlyStoppingGraphTrainer(cfg, net, _iter(x, y))
    with pytest.raises(TypeError, match="net: expected an ndws.nn.MultiLayerNetwork, got "
                                        "ComputationGraph"):
        EarlyStoppingTrainer(cfg, g, _iter(x, y))
    with pytest.raises(TypeError, match="train_iterator: expected a MultiDataSetIterator"):
        EarlyStoppingGraphTrainer(cfg, g, 3)
    with pytest.raises(TypeError, match="train_iterator"):
        EarlyStoppingGraphTrainer(cfg, g, (ds for ds in [DataSet(x, y)]))
    with pytest.raises(TypeError, match="config: expected an EarlyStoppingConfiguration"):
        EarlyStoppingGraphTrainer(None, g, _iter(x, y))
    fresh = ComputationGraph(g.conf)
    with pytest.raises(RuntimeError, match="call init"):
        EarlyStoppingGraphTrainer(cfg, fresh, _iter(x, y))
    with pytest.raises(TypeError, match="item 0 is a str, not a DataSet or a MultiDataSet"):
        DataSetLossCalculator(["x"]).calculate_score(g)
    with pytest.raises(ValueError, match="no features arrays"):
        DataSetLossCalculator(([], [y])).calculate_score(g)
    before = g.params().numpy()
    assert g.iteration == 0
    np.testing.assert_array_equal(before, g.params().numpy())


def test_graph_fit_shuffles_through_the_shared_loop(rng):
    # the fit loop both network types share: a graph's shuffled fit of a network's graph
    # draws the network's orders (same bits), and an iterator is reset each epoch
    x, y = _data(rng)
    net = _mlp(7)
    g = net.to_computation_graph()
    net.fit(x, y, batch_size=32, epochs=3, shuffle=True, seed=5, progress=False)
    h = g.fit(x, y, batch_size=32, epochs=3, shuffle=True, seed=5, progress=False)
    np.testing.assert_array_equal(net.params().numpy(), g.params().numpy())
    assert g.epoch == 3 and g.iteration == 15 and len(h.epoch_scores) == 3
