"""ndws.nn.listeners and the network's evaluation: hook order, the stale-after-callback rule,
DL4J's log lines, checkpoints, evaluation with no per-batch allocation."""
import logging
import os
import re

import numpy as np
import pytest

import ndws
from ndws._memory import allocation_counters
from ndws.data.dataset import DataSet
from ndws.evaluation import Evaluation, RegressionEvaluation, ROCMultiClass
from ndws.nn import Adam, DenseLayer, MultiLayerConfiguration, MultiLayerNetwork, OutputLayer
from ndws.nn.listeners import (CheckpointListener, CollectScoresListener, EvaluativeListener,
                               PerformanceListener, ScoreIterationListener, TrainingListener)


@pytest.fixture(autouse=True)
def _clean():
    yield
    ndws.destroy_all_workspaces_for_current_thread()


def net_and_batches(rng, mode="ENABLED", n_batches=3):
    conf = MultiLayerConfiguration([DenseLayer(n_in=6, n_out=8, activation="relu"),
                                    OutputLayer(n_out=3, activation="softmax")],
                                   seed=5, updater=Adam(1e-2), training_workspace_mode=mode,
                                   inference_workspace_mode=mode)
    net = MultiLayerNetwork(conf)
    net.init()
    batches = []
    for _ in range(n_batches):
        x = rng.standard_normal((10, 6)).astype(np.float32)
        batches.append(DataSet(x, np.eye(3, dtype=np.float32)[rng.integers(0, 3, 10)]))
    return net, batches


class Recorder(TrainingListener):
    def __init__(self):
        self.events, self.kept = [], []

    def on_epoch_start(self, model):
        self.events.append(("epoch_start", model.epoch))

    def on_epoch_end(self, model):
        self.events.append(("epoch_end", model.epoch))

    def on_forward_pass(self, model, activations):
        self.events.append(("forward", [a.shape for a in activations]))
        self.kept.append(activations[-1])

    def on_backward_pass(self, model):
        self.events.append(("backward",))

    def on_gradient_calculation(self, model):
        self.events.append(("gradient",))

    def iteration_done(self, model, iteration, epoch):
        self.events.append(("iteration_done", iteration, epoch))


def test_hooks_run_in_dl4j_order(rng):
    net, batches = net_and_batches(rng, n_batches=2)
    rec = Recorder()
    net.set_listeners(rec)
    net.fit(batches, epochs=2)
    one_iter = [("forward", [(10, 6), (10, 8), (10, 3)]), ("backward",), ("gradient",)]
    assert rec.events == (
        [("epoch_start", 0)] + one_iter + [("iteration_done", 0, 0)] + one_iter
        + [("iteration_done", 1, 0), ("epoch_end", 1), ("epoch_start", 1)] + one_iter
        + [("iteration_done", 2, 1)] + one_iter + [("iteration_done", 3, 1), ("epoch_end", 2)])
    assert net.get_listeners() == [rec]


@pytest.mark.parametrize("mode", ["NONE", "SINGLE", "SEPARATE", "ENABLED"])
def test_listener_arrays_are_valid_only_during_the_call(mode, rng):
    net, batches = net_and_batches(rng, mode)
    rec = Recorder()
    net.set_listeners(rec)
    net.fit(batches[:1])
    with pytest.raises(ndws.WorkspaceError, match="leaked|outdated"):
        rec.kept[0] + 1


def test_score_iteration_listener_line(rng, caplog):
    net, batches = net_and_batches(rng)
    net.set_listeners(ScoreIterationListener(2))
    with caplog.at_level(logging.INFO, logger="ndws"):
        net.fit(batches)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert re.fullmatch(r"Score at iteration 0 is [0-9.e-]+", lines[0])
    assert lines[1] == f"Score at iteration 2 is {net.score()}"
    assert repr(ScoreIterationListener(2)) == "ScoreIterationListener(2)"


def test_performance_listener_fields_in_order(rng, caplog):
    net, batches = net_and_batches(rng, n_batches=4)
    perf = PerformanceListener(1, report_score=True, report_gc=True)
    net.set_listeners(perf)
    with caplog.at_level(logging.INFO, logger="ndws"):
        net.fit(batches)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3                               # no report before a first interval
    pattern = (r"ETL: \d+ ms; iteration (\d+); iteration time: \d+ ms; samples/sec: [\d.]+; "
               r"batches/sec: [\d.]+; score: [0-9.e-]+;")
    assert re.fullmatch(pattern, lines[0]) and re.match(pattern, lines[1])
    assert re.search(r" GC: \[gen0: \d+ \(\d+ms\)\], \[gen1: \d+ \(\d+ms\)\], "
                     r"\[gen2: \d+ \(\d+ms\)\];$", lines[2])
    quiet = PerformanceListener(2, report_etl=False, report_time=False)
    net.set_listeners(quiet)
    net.fit(batches)
    assert re.fullmatch(r"iteration \d+; samples/sec: [\d.]+; batches/sec: [\d.]+;",
                        quiet.last_line)


@pytest.mark.parametrize("make, exc, msg", [
    (lambda: PerformanceListener(0), ValueError, r"^Invalid frequency, must be > 0: Got 0$"),
    (lambda: ScoreIterationListener(-3), ValueError, r"^Invalid frequency, must be > 0: Got -3$"),
    (lambda: CollectScoresListener(1.5), TypeError, r"^CollectScoresListener.frequency: expected"),
    (lambda: CheckpointListener("/nonexistent/dir", every_n_epochs=1), FileNotFoundError,
     r"not a directory"),
    (lambda: CheckpointListener(".", keep_last=2), ValueError, r"give every_n_iterations or"),
    (lambda: EvaluativeListener([], 1), ValueError, r"at least one evaluation"),
    (lambda: EvaluativeListener([], 1, Evaluation(), invocation="later"), ValueError,
     r"invocation: expected"),
])
def test_listener_arguments_are_checked(make, exc, msg):
    with pytest.raises(exc, match=msg):
        make()


def test_set_listeners_refuses_other_objects(rng):
    net, _ = net_and_batches(rng)
    with pytest.raises(TypeError, match=r"^listeners\[1\]: expected an ndws.nn.listeners."
                                        r"TrainingListener, got builtin_function_or_method$"):
        net.set_listeners(ScoreIterationListener(), print)
    assert net.get_listeners() == []


def test_collect_scores_and_checkpoints(rng, tmp_path):
    net, batches = net_and_batches(rng)
    col = CollectScoresListener(2)
    ckpt = CheckpointListener(tmp_path, every_n_iterations=2, keep_last=2)
    net.set_listeners(col, ckpt)
    net.fit(batches, epochs=2)                           # iterations 0..5
    assert col.iterations == [0, 2, 4] and len(col.scores) == 3
    # (the epoch count moves on after an epoch's last iteration_done)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_1_iter4_epoch1.zip",
                                            "checkpoint_2_iter6_epoch1.zip"]
    last = MultiLayerNetwork.load(ckpt.saved[-1])
    np.testing.assert_array_equal(last.params().numpy(), net.params().numpy())
    assert last.iteration == 6


def test_evaluative_listener_at_epoch_end(rng):
    net, batches = net_and_batches(rng)
    ev = Evaluation()
    listener = EvaluativeListener(batches, 1, ev, invocation="epoch_end")
    net.set_listeners(listener)
    net.fit(batches, epochs=2)
    assert listener.last is ev
    assert np.asarray(ev.get_confusion_matrix()).sum() == 30   # reset before each run


def test_do_evaluation_returns_the_objects_and_allocates_nothing_per_batch(rng):
    net, batches = net_and_batches(rng, n_batches=6)
    net.fit(batches, epochs=3)
    ev, roc = Evaluation(), ROCMultiClass()
    assert net.do_evaluation(batches, ev, roc) == (ev, roc)
    assert net.do_evaluation(batches, ev) is ev
    before = allocation_counters()["allocations"]
    again = net.evaluate(batches)
    assert allocation_counters()["allocations"] == before
    preds = np.concatenate([net.output(b.features).numpy() for b in batches]).argmax(1)
    labels = np.concatenate([b.labels.numpy() for b in batches]).argmax(1)
    assert again.accuracy() == pytest.approx((preds == labels).mean())
    assert 0.0 <= net.evaluate_roc_multi_class(batches).calculate_average_auc() <= 1.0
    assert ndws.current_workspace() is None


def test_evaluate_regression(rng):
    conf = MultiLayerConfiguration([DenseLayer(n_in=4, n_out=8, activation="tanh"),
                                    OutputLayer(n_out=2, activation="identity",
                                                loss_function="MSE")], seed=1, updater=Adam(1e-2))
    net = MultiLayerNetwork(conf)
    net.init()
    x = rng.standard_normal((50, 4)).astype(np.float32)
    t = np.stack([x[:, 0] + x[:, 1], x[:, 2] - x[:, 3]], axis=1)
    net.fit(x, t, batch_size=10, epochs=40)
    reg = net.evaluate_regression([DataSet(x, t)])
    assert isinstance(reg, RegressionEvaluation)
    pred = net.output(x).numpy()
    assert reg.mean_squared_error(0) == pytest.approx(((pred[:, 0] - t[:, 0]) ** 2).mean(),
                                                      rel=1e-5)


def test_do_evaluation_progress_bar(rng, capsys):
    net, batches = net_and_batches(rng, n_batches=3)
    net.do_evaluation(batches, Evaluation(), progress=True)
    err = capsys.readouterr().err
    assert "evaluating:" in err and "/3 [" in err
    net.do_evaluation(batches, Evaluation())             # off a terminal: nothing
    assert capsys.readouterr().err == ""
    with pytest.raises(TypeError, match=r"^progress: expected True, False or None"):
        net.do_evaluation(batches, Evaluation(), progress=1)
