"""ndws.nn.listeners and the network's evaluation: hook order, the stale-after-callback rule,
DL4J's report lines and where they go, checkpoints, evaluation with no per-batch
allocation."""
import io
import logging
import os
import re
import sys

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
    ms = r"(?:0|0\.0*[1-9]\d{0,2}|[1-9][\d.]*)"               # three significant digits
    pattern = (rf"ETL: {ms} ms; iteration (\d+); iteration time: {ms} ms; samples/sec: [\d.]+; "
               r"batches/sec: [\d.]+; score: [0-9.e-]+;")
    assert re.fullmatch(pattern, lines[0]) and re.match(pattern, lines[1])
    assert re.search(rf" GC: \[gen0: \d+ \({ms}ms\)\], \[gen1: \d+ \({ms}ms\)\], "
                     rf"\[gen2: \d+ \({ms}ms\)\];$", lines[2])
    # a 6-8-3 network's iteration takes well under a millisecond: shown, not rounded to 0
    time_ms = float(re.search(r"iteration time: ([\d.]+) ms", lines[0]).group(1))
    assert 0 < time_ms
    quiet = PerformanceListener(2, report_etl=False, report_time=False)
    net.set_listeners(quiet)
    net.fit(batches)
    assert re.fullmatch(r"iteration \d+; samples/sec: [\d.]+; batches/sec: [\d.]+;",
                        quiet.last_line)


def test_milliseconds_keep_three_significant_digits():
    from ndws.nn.listeners import _ms
    assert [_ms(v) for v in (0.0412, 0.412, 4.12, 41.2, 412.0, 4123.4, 0.0, float("nan"))] == [
        "0.0412", "0.412", "4.12", "41.2", "412", "4123", "0", "0"]


@pytest.mark.parametrize("make, exc, msg", [
    (lambda: PerformanceListener(0), ValueError,
     r"^PerformanceListener.frequency: expected an int > 0, got 0$"),
    (lambda: ScoreIterationListener(-3), ValueError,
     r"^ScoreIterationListener.print_iterations: expected an int > 0, got -3$"),
    (lambda: ScoreIterationListener(True), TypeError,
     r"^ScoreIterationListener.print_iterations: expected an int > 0, got bool$"),
    (lambda: CollectScoresListener(1.5), TypeError, r"^CollectScoresListener.frequency: expected"),
    (lambda: CollectScoresListener(log_score="yes"), TypeError,
     r"^CollectScoresListener.log_score: expected True or False, got 'yes'$"),
    (lambda: PerformanceListener(report_score="no"), TypeError,
     r"^PerformanceListener.report_score: expected True or False, got 'no'$"),
    (lambda: PerformanceListener(report_gc=1), TypeError,
     r"^PerformanceListener.report_gc: expected True or False, got 1$"),
    (lambda: PerformanceListener(printer="stdout"), TypeError,
     r"^PerformanceListener.printer: expected None \(the terminal\), False \(silent\) or a "
     r"callable taking a str, got str$"),
    (lambda: CheckpointListener(".", keep_last=2), ValueError, r"give every_n_iterations or"),
    (lambda: CheckpointListener(".", every_n_epochs=1, keep_last=0), ValueError,
     r"^CheckpointListener.keep_last: expected an int >= 1 \(the newest checkpoints kept\) or "
     r"None \(keep all\), got 0$"),
    (lambda: CheckpointListener(".", every_n_epochs=1, keep_last=np.bool_(True)), TypeError,
     r"^CheckpointListener.keep_last: expected an int >= 1"),
    (lambda: CheckpointListener(".", every_n_epochs=0), ValueError,
     r"^CheckpointListener.every_n_epochs: expected an int > 0, got 0$"),
    (lambda: CheckpointListener(".", every_n_iterations=-1), ValueError,
     r"^CheckpointListener.every_n_iterations: expected an int > 0, got -1$"),
    (lambda: CheckpointListener(".", every_n_epochs=1, save_updater=None), TypeError,
     r"^CheckpointListener.save_updater: expected True or False, got None$"),
    (lambda: CheckpointListener(3, every_n_epochs=1), TypeError,
     r"^CheckpointListener.directory: expected a path, got int$"),
    (lambda: CheckpointListener("", every_n_epochs=1), ValueError,
     r"^CheckpointListener.directory: expected a folder name, got ''$"),
    (lambda: EvaluativeListener([], 1), ValueError, r"at least one evaluation"),
    (lambda: EvaluativeListener([], 0, Evaluation()), ValueError,
     r"^EvaluativeListener.frequency: expected an int > 0, got 0$"),
    (lambda: EvaluativeListener([], 1, Evaluation(), invocation="later"), ValueError,
     r"invocation: expected"),
])
def test_listener_arguments_are_checked(make, exc, msg):
    with pytest.raises(exc, match=msg):
        make()


def test_numpy_integers_are_accepted_for_every_int_argument(tmp_path):
    i = np.int64
    assert ScoreIterationListener(i(5)).print_iterations == 5
    assert type(PerformanceListener(np.int32(3)).frequency) is int
    assert CollectScoresListener(np.uint8(2)).frequency == 2
    ckpt = CheckpointListener(tmp_path, every_n_iterations=i(2), every_n_epochs=i(1),
                              keep_last=i(3), save_updater=np.bool_(False))
    assert (ckpt.every_n_iterations, ckpt.every_n_epochs, ckpt.keep_last) == (2, 1, 3)
    assert all(type(v) is int for v in (ckpt.every_n_iterations, ckpt.keep_last))
    assert EvaluativeListener([], i(4), Evaluation()).frequency == 4


def test_checkpoint_folder_is_created_and_a_file_in_the_way_is_refused(rng, tmp_path):
    folder = tmp_path / "runs" / "today"
    with pytest.raises(ValueError, match="keep_last"):
        CheckpointListener(folder, every_n_epochs=1, keep_last=0)
    assert not (tmp_path / "runs").exists()                 # nothing made for a refused one
    ckpt = CheckpointListener(folder, every_n_epochs=1, printer=False)
    assert folder.is_dir()
    net, batches = net_and_batches(rng)
    net.set_listeners(ckpt)
    net.fit(batches)
    assert os.listdir(folder) == ["checkpoint_0_iter3_epoch1.zip"]
    CheckpointListener(folder, every_n_epochs=1)            # an existing folder is fine
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match=r"^CheckpointListener.directory: '.*file' "
                                                 r"exists and is not a directory$"):
        CheckpointListener(tmp_path / "file", every_n_epochs=1)
    with pytest.raises(NotADirectoryError, match=r"^\[Errno 20\] CheckpointListener.directory: "
                                                 r"cannot create '.*file/sub'"):
        CheckpointListener(tmp_path / "file" / "sub", every_n_epochs=1)


# -- where reports go --------------------------------------------------------------------------

def test_reports_reach_stdout_by_default_and_can_be_silenced_or_redirected(rng, capsys,
                                                                           tmp_path):
    net, batches = net_and_batches(rng)
    net.set_listeners(ScoreIterationListener(2), PerformanceListener(2),
                      CollectScoresListener(2, log_score=True),
                      CheckpointListener(tmp_path, every_n_epochs=1))
    net.fit(batches, progress=False)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == out[1] and re.fullmatch(r"Score at iteration 0 is [0-9.e-]+", out[0])
    assert out[2] == out[4] == f"Score at iteration 2 is {net.score()}"
    assert re.match(r"ETL: [\d.]+ ms; iteration 2; ", out[3])
    assert out[5:] == [f"Model checkpoint saved: {tmp_path / 'checkpoint_0_iter3_epoch1.zip'}"]
    lines = []
    perf = PerformanceListener(1, printer=lines.append)
    net.set_listeners(ScoreIterationListener(1, printer=False), perf)
    net.fit(batches, progress=False)
    assert capsys.readouterr().out == ""
    assert len(lines) == 2 and lines[-1] == perf.last_line    # the first has no interval


def test_evaluative_listener_reports_its_stats_through_its_printer(rng, capsys):
    # the evaluation runs from iteration_done through the public do_evaluation (re-entrant
    # for the fitting thread), with no bar of its own; its stats reach stdout by default
    net, batches = net_and_batches(rng)
    ev = Evaluation()
    net.set_listeners(EvaluativeListener(batches, 2, ev))
    net.fit(batches, progress=False)
    out = capsys.readouterr().out
    assert out.startswith("Evaluation at iteration 1:\n") and out.count("Evaluation at") == 2
    assert ev.stats() in out
    lines = []
    net.set_listeners(EvaluativeListener(batches, 2, Evaluation(), printer=lines.append))
    net.fit(batches, progress=False)
    assert capsys.readouterr().out == "" and len(lines) == 1       # iterations 3, 4, 5: 4
    assert lines[0].startswith("Evaluation at iteration 5:\n")
    with pytest.raises(TypeError, match=r"^EvaluativeListener.printer: expected None"):
        EvaluativeListener(batches, 1, Evaluation(), printer="stdout")


def test_a_configured_ndws_logger_takes_the_reports(rng, caplog, capsys):
    net, batches = net_and_batches(rng)
    net.set_listeners(ScoreIterationListener(1))
    with caplog.at_level(logging.INFO, logger="ndws"):         # a level on the ndws logger
        net.fit(batches, progress=False)
    assert [r.getMessage() for r in caplog.records][-1] == f"Score at iteration 2 is {net.score()}"
    assert capsys.readouterr().out == ""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ndws"):      # ... which silences them all
        net.fit(batches, progress=False)
    assert caplog.records == [] and capsys.readouterr().out == ""


def _after_last_carriage_return(text):
    # what a terminal shows of each line: the bar redraws itself after a carriage return
    return [line.rsplit("\r", 1)[-1] for line in text.split("\n")]


def test_reports_and_console_logs_do_not_break_the_progress_bar(rng, monkeypatch):
    # the terminal: stdout and stderr are one stream, as in a console
    term = io.StringIO()
    monkeypatch.setattr(sys, "stdout", term)
    monkeypatch.setattr(sys, "stderr", term)
    net, batches = net_and_batches(rng, n_batches=4)
    net.set_listeners(ScoreIterationListener(1))
    net.fit(batches, epochs=2, progress=True)
    shown = _after_last_carriage_return(term.getvalue())
    scores = [line for line in shown if "Score at iteration" in line]
    assert len(scores) == 8 and all(line.startswith("Score at iteration") for line in scores)
    assert "epoch 2/2: 100%" in term.getvalue()
    # the same through logging, a console handler on the ndws logger: written above the bar
    logger = logging.getLogger("ndws")
    handler = logging.StreamHandler(sys.stderr)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        term.seek(0)
        term.truncate()
        net.fit(batches, epochs=2, progress=True)
        assert logger.handlers == [handler]                  # given back as it was
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    shown = _after_last_carriage_return(term.getvalue())
    scores = [line for line in shown if "Score at iteration" in line]
    assert len(scores) == 8 and all(line.startswith("Score at iteration") for line in scores)


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
