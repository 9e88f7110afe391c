"""The command line: `ndws train` (the main job), `ndws demo` and `ndws config`, also as
`python -m ndws`: their reports, their help, their usage errors and Ctrl-C."""
from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

from ndws.__main__ import Interrupted, main, run_demo


def test_demo_measures_zero_steady_state_allocations_with_a_workspace():
    out = io.StringIO()
    results = run_demo(iterations=30, batch=8, large_rows=64, large_iterations=3, out=out)
    text = out.getvalue()
    for part in ("small", "large"):
        ws, plain = results[part]["with workspace"], results[part]["without workspace"]
        assert ws["allocations_per_iteration_after_first"] == 0
        assert ws["allocations_first_iteration"] > 0          # the learning cycle spills
        # without a workspace every array-producing op allocates, every iteration
        assert (plain["allocations_per_iteration_after_first"]
                == plain["allocations_first_iteration"] > 0)
        assert ws["checksum"] == pytest.approx(plain["checksum"], rel=1e-6)
    assert "Workspace statistics: ---------------------------------" in text
    assert "DEMO_LOOP:" in text and "DEMO_LARGE:" in text
    last = text.rstrip("\n").splitlines()[-1]
    speedup = results["large"]["without workspace"]["median_us"] / \
        results["large"]["with workspace"]["median_us"]
    assert last.startswith(f"speed-up with the workspace: {speedup:.2f}x on large arrays, ")
    assert last.endswith("checksums match")


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="glibc's malloc maps an array over 32 MiB fresh from the kernel")
def test_demo_large_arrays_page_fault_only_without_a_workspace():
    # three temporaries of 36 MiB, each over glibc's largest mmap threshold: without a
    # workspace each is mapped and zeroed page by page every iteration; with one, never again
    out = io.StringIO()
    results = run_demo(iterations=2, batch=8, large_iterations=5, out=out)["large"]
    pages = 3 * 9216 * 1024 * 4 // 4096
    assert results["without workspace"]["page_faults_per_iteration"] >= pages
    assert results["with workspace"]["page_faults_per_iteration"] < pages // 100
    assert f"{results['without workspace']['page_faults_per_iteration']:,.0f} page faults per " \
           f"iteration" in out.getvalue()


def test_cli_demo_and_config_entry_points(capsys):
    assert main(["demo", "--iterations", "5", "--batch", "4"]) == 0
    assert "with workspace" in capsys.readouterr().out
    assert main(["config"]) == 0
    assert "openmp" in capsys.readouterr().out


@pytest.mark.parametrize("args, msg", [
    (["demo", "--iterations", "0"], "argument --iterations: must be in [1, 10000000], got 0"),
    (["demo", "--batch", "2147483648"], "argument --batch: must be in [1, 65536], got "
                                        "2147483648"),
    (["demo", "--large-rows", "-3"], "argument --large-rows: must be in [1, 65536], got -3"),
    (["demo", "--large-iterations", "1e3"], "argument --large-iterations: expected an integer, "
                                            "got '1e3'"),
    (["demo", "--seed", "x"], "argument --seed: expected an integer, got 'x'"),
    (["train", "--epochs", "0"], "argument --epochs: must be in [1, 100000], got 0"),
    (["train", "--epochs", "99999999999999999999"], "argument --epochs: must be in [1, 100000]"),
    (["train", "--batch-size", "0"], "argument --batch-size: must be in [1, 1400] (the "
                                     "training examples), got 0"),
    (["train", "--hidden", "2147483648"], "argument --hidden: must be in [1, 4096] (4096 "
                                          "already makes 17M weights), got 2147483648"),
    (["train", "--hidden", "12.5"], "argument --hidden: expected an integer, got '12.5'"),
    (["train", "--seed", "-1"], "argument --seed: must be in [0, 9223372036854775807], got -1"),
    (["train", "--seed", str(2**63)], "argument --seed: must be in [0, 9223372036854775807]"),
    (["bogus"], "argument COMMAND: invalid choice: 'bogus'"),
    (["train", "--model", "gru"], "argument --model: invalid choice: 'gru' (choose from 'mlp', "
                                  "'lstm', 'lenet', 'resnet'"),
    (["train", "--model", "lenet", "--mpi"], "--mpi trains the MLP only (--model mlp)"),
    (["train", "--model", "lstm", "--mpi"], "--mpi trains the MLP only (--model mlp)"),
    (["train", "--early-stopping", "-1"], "argument --early-stopping: must be in [0, 100000], "
                                          "got -1"),
    (["train", "--mpi", "--early-stopping", "2"], "--early-stopping and --tensorboard train on "
                                                  "one process (not with --mpi)"),
])
def test_bad_arguments_are_usage_errors_not_tracebacks(args, msg, capsys):
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ndws") and msg in err and "Traceback" not in err


def test_python_dash_m_runs():
    proc = subprocess.run([sys.executable, "-m", "ndws", "demo", "--iterations", "3",
                           "--large-rows", "16", "--large-iterations", "2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "speed-up with the workspace" in proc.stdout


def test_help_is_whole_and_describes_every_option():
    top = subprocess.run([sys.executable, "-m", "ndws", "--help"], capture_output=True,
                         text=True, timeout=60)
    assert top.returncode == 0
    text = " ".join(top.stdout.split())
    assert ("ND-arrays in memory workspaces, with a DL4J-style network stack. Also runs as "
            "`python -m ndws`.") in text
    for command in ("train", "demo", "config"):
        assert re.search(rf"^    {command} ", top.stdout, re.M)
    train = subprocess.run([sys.executable, "-m", "ndws", "train", "--help"],
                           capture_output=True, text=True, timeout=60).stdout
    text = " ".join(train.split())
    for option, described in [("--epochs EPOCHS", "passes over the 1,400 training examples "
                                                  "(default: 15)"),
                              ("--batch-size BATCH_SIZE", "examples per training step (per "
                                                          "process with --mpi) (default: 32)"),
                              ("--model {mlp,lstm,lenet,resnet}", "the network to train "
                                                            "(default: mlp)"),
                              ("--hidden HIDDEN", "units in each of the two hidden layers "
                                                  "(the LSTM's units, LeNet's dense layer; "
                                                  "resnet: 8 per channel) "
                                                  "(default: 128)"),
                              ("--seed SEED", "(default: 1)"),
                              ("--progress, --no-progress", "show a progress bar (default: on "
                                                            "a terminal or in a notebook)"),
                              ("--early-stopping PATIENCE", "stop once the held-out loss has "
                                                            "not improved for PATIENCE epochs"),
                              ("--tensorboard DIR", "write TensorBoard event files to DIR"),
                              ("--mpi", "train data-parallel")]:
        assert f"{option} {described}" in text or (option in text and described in text), option
    assert "Ctrl-C stops it (exit status 130)" in text and "(default: None)" not in text
    demo = " ".join(subprocess.run([sys.executable, "-m", "ndws", "demo", "--help"],
                                   capture_output=True, text=True, timeout=60).stdout.split())
    assert "--large-rows LARGE_ROWS rows of the large workload's batch" in demo
    assert "(default: 9216)" in demo and "(default: 0)" in demo       # the seed's 0 is shown


def test_train_reports_epochs_evaluation_and_the_mode_table():
    from ndws.__main__ import run_train
    out = io.StringIO()
    results = run_train(epochs=4, mode_epochs=2, progress=False, out=out)
    text = out.getvalue()
    assert results["accuracy"] >= 0.93
    history = results["history"]
    for e in range(4):                                     # one line per epoch, from 1
        assert (f"epoch {e + 1:>3}/4: score {history.epoch_scores[e]:.4f}, held-out accuracy "
                f"{history.validation_accuracy[e]:.4f} (") in text
    assert results["accuracy"] == history.validation_accuracy[-1]
    assert "Accuracy:" in text and "Confusion Matrix" in text      # Evaluation.stats()
    modes = results["modes"]
    assert list(modes) == ["NONE", "SINGLE", "SEPARATE", "ENABLED"]
    assert modes["NONE"]["allocations_per_iteration"] > 0
    assert all(modes[m]["allocations_per_iteration"] == 0 for m in ("SINGLE", "SEPARATE",
                                                                      "ENABLED"))
    assert modes["NONE"]["workspace_bytes"] == 0
    assert modes["SEPARATE"]["workspace_bytes"] < modes["SINGLE"]["workspace_bytes"]
    accs = {m["accuracy"] for m in modes.values()}
    assert len(accs) == 1                                   # every mode: the same network
    assert "total parameters: 26,122" in text
    assert "train B (32)" in text                          # summary with memory per layer
    table = text[text.index("Workspace modes, the same network"):].splitlines()
    assert table[-2].startswith("time/iteration: a training step's median; peak workspace: ")
    assert table[-1].startswith("Every mode trains the same parameters: keep ENABLED")


def test_train_lstm_reads_the_digits_row_by_row():
    from ndws.__main__ import MODELS, run_train
    out = io.StringIO()
    results = run_train(epochs=8, mode_epochs=2, progress=False, out=out, model="lstm")
    text = out.getvalue()
    assert "model lstm" in text and "LastTimeStep" in text and "Confusion Matrix" in text
    assert results["accuracy"] >= 0.9
    x = MODELS["lstm"][2](np.arange(2 * 64, dtype=np.float32).reshape(2, 64))
    assert x.shape == (2, 8, 8) and x[0, :, 1].tolist() == list(range(8, 16))   # step 1: row 1
    modes = results["modes"]
    assert all(modes[m]["allocations_per_iteration"] == 0 for m in ("SINGLE", "SEPARATE",
                                                                      "ENABLED"))
    assert len({m["accuracy"] for m in modes.values()}) == 1
    with pytest.raises(ValueError, match="model: expected one of mlp, lstm, lenet, resnet, "
                                         "got 'gru'"):
        run_train(epochs=1, model="gru", out=io.StringIO())


def test_train_resnet_trains_a_residual_graph_on_the_digits_as_images():
    from ndws.__main__ import MODELS, run_train
    out = io.StringIO()
    results = run_train(epochs=8, mode_epochs=2, progress=False, out=out, model="resnet",
                        hidden=64)
    text = out.getvalue()
    assert "model resnet" in text and "block2_add  ElementWiseVertex" in text
    assert "train B (32)" in text and "Confusion Matrix" in text
    assert results["accuracy"] >= 0.75
    x = MODELS["resnet"][2](np.arange(2 * 64, dtype=np.float32).reshape(2, 64))
    assert x.shape == (2, 1, 8, 8) and x[0, 0, 1].tolist() == list(range(8, 16))
    modes = results["modes"]
    assert all(modes[m]["allocations_per_iteration"] == 0 for m in ("SINGLE", "SEPARATE",
                                                                      "ENABLED"))
    assert len({m["accuracy"] for m in modes.values()}) == 1


def test_train_progress_bar_goes_to_stderr(capsys):
    assert main(["train", "--epochs", "2", "--progress"]) == 0
    captured = capsys.readouterr()
    # one bar over the fit (44 batches of 32 per epoch), numbered like the lines
    assert "epoch 1/2:" in captured.err and "epoch 2/2: 100%" in captured.err
    assert "| 88/88 [" in captured.err and "epoch 0" not in captured.err
    assert "epoch   1/2: score" in captured.out and "epoch   2/2: score" in captured.out


def _sigint_default():
    # A shell starts background jobs with SIGINT ignored, and Python keeps an ignored SIGINT
    # ignored: a suite run as `... &` would give the child nothing to interrupt it with
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_says_where_training_stopped_and_exits_130():
    proc = subprocess.Popen([sys.executable, "-m", "ndws", "train", "--epochs", "100000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"),
                            preexec_fn=_sigint_default)
    try:
        for line in proc.stdout:                       # training has started: an epoch ended
            if line.startswith("epoch   1/100000: score"):
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()                         # reaped, its pipes closed
    assert proc.returncode == 130
    assert re.fullmatch(r"\nndws train: interrupted \(Ctrl-C\) in epoch \d+/100000, after "
                        r"iteration \d+ of its 44 \(\d+ in all\); nothing was saved\n", err), err
    assert "Traceback" not in err


def test_run_train_raises_a_keyboard_interrupt_that_says_where(monkeypatch):
    from ndws.__main__ import run_train
    from ndws.nn import MultiLayerNetwork
    real_fit = MultiLayerNetwork.fit

    def interrupted_fit(self, *args, **kwargs):
        from ndws.nn.listeners import TrainingListener

        class CtrlC(TrainingListener):
            def iteration_done(self, model, iteration, epoch):
                if iteration == 50:                      # in the second epoch, its 7th batch
                    raise KeyboardInterrupt

        self.add_listeners(CtrlC())
        return real_fit(self, *args, **kwargs)

    monkeypatch.setattr(MultiLayerNetwork, "fit", interrupted_fit)
    with pytest.raises(KeyboardInterrupt) as info:
        run_train(epochs=3, progress=False, out=io.StringIO())
    assert isinstance(info.value, Interrupted)
    assert info.value.where == "in epoch 2/3, after iteration 7 of its 44 (51 in all)"


def test_python_m_ndws_train_runs():
    proc = subprocess.run([sys.executable, "-m", "ndws", "train", "--epochs", "2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Workspace modes" in proc.stdout and proc.stderr == ""   # no bar off a terminal


def _assert_stopped_by_patience(text, history, patience, max_epochs):
    # the run stopped `patience` epochs past its best held-out loss, before `max_epochs`, and
    # said so; each epoch's line shows its held-out loss
    epochs = len(history.epochs)
    assert patience + 1 <= epochs < max_epochs
    best = min(range(epochs), key=lambda e: history.validation_scores[e])
    assert (f"early stopping: ScoreImprovementEpochTerminationCondition("
            f"max_epochs_with_no_improvement={patience}, min_improvement=0.0) after {epochs} "
            f"epochs; best epoch {best + 1} (held-out loss "
            f"{history.validation_scores[best]:.4f})") in text
    assert epochs == best + 1 + patience
    for e in range(epochs):
        assert f"held-out loss {history.validation_scores[e]:.4f} (" in text


def test_train_early_stopping_and_tensorboard(tmp_path, capsys):
    from ndws.__main__ import run_train
    out = io.StringIO()
    board = tmp_path / "tb"
    results = run_train(epochs=40, early_stopping=2, mode_epochs=2, progress=False, out=out,
                        tensorboard=str(board), hidden=32)
    text = out.getvalue()
    history = results["history"]
    _assert_stopped_by_patience(text, history, 2, 40)
    assert results["accuracy"] >= 0.9
    assert f"tensorboard --logdir {board}" in text
    files = [p.name for p in board.iterdir()]
    assert len(files) == 1 and files[0].startswith("events.out.tfevents.")
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    acc = ea.EventAccumulator(str(board), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    assert len(acc.Scalars("score")) == len(history.scores)
    assert [e.value for e in acc.Scalars("validation_score")] == pytest.approx(
        history.validation_scores, rel=1e-6)


def test_train_early_stopping_trains_the_resnet_graph():
    # --model resnet is a ComputationGraph: EarlyStoppingGraphTrainer trains it, and the
    # network it keeps is the best epoch's, a graph, not the last one
    from ndws.__main__ import run_train
    from ndws.nn import ComputationGraph
    from ndws.nn.earlystopping import EarlyStoppingGraphTrainer, EarlyStoppingTrainer
    used = []
    real = EarlyStoppingGraphTrainer.fit

    def spy(self, *args, **kwargs):
        used.append(type(self))
        return real(self, *args, **kwargs)

    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(EarlyStoppingGraphTrainer, "fit", spy)
        mp.setattr(EarlyStoppingTrainer, "fit", spy)
        results = run_train(epochs=60, early_stopping=2, mode_epochs=2, progress=False,
                            out=out, model="resnet", hidden=64)
    assert used == [EarlyStoppingGraphTrainer]
    text = out.getvalue()
    _assert_stopped_by_patience(text, results["history"], 2, 60)
    assert "model resnet" in text and "Confusion Matrix" in text
    # the accuracy and the evaluation are the best graph's, which is a graph. The run is short
    # and stops on a noisy held-out loss, so its accuracy moves with the rounding of any
    # kernel: five summation orders of the stem's few-channel weight gradient (all correct to
    # the last bits of float32) gave 0.864-0.965
    assert results["accuracy"] == pytest.approx(results["evaluation"].accuracy())
    assert results["accuracy"] >= 0.85


def test_train_tensorboard_refuses_a_file(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(SystemExit) as info:
        main(["train", "--tensorboard", str(f)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"--tensorboard: {str(f)!r} exists and is not a directory" in err


def test_train_lenet_sees_the_digits_as_images():
    from ndws.__main__ import MODELS, run_train
    out = io.StringIO()
    results = run_train(epochs=6, mode_epochs=2, progress=False, out=out, model="lenet")
    text = out.getvalue()
    assert "model lenet" in text and "Confusion Matrix" in text
    summary = [line.split() for line in text.splitlines() if "Layer" in line]
    assert [row[1] for row in summary] == ["ConvolutionLayer", "SubsamplingLayer",
                                           "ConvolutionLayer", "SubsamplingLayer",
                                           "DenseLayer", "OutputLayer"]
    assert summary[0][4] == "16x8x8" and summary[3][4] == "32x2x2"     # SAME, then pooled
    # seed 1 measured 0.9547 after 3 epochs, 0.9849 after 6 (held-out)
    assert results["accuracy"] >= 0.97
    x = MODELS["lenet"][2](np.arange(2 * 64, dtype=np.float32).reshape(2, 64))
    assert x.shape == (2, 1, 8, 8) and x[1, 0, 2].tolist() == list(range(80, 88))  # row 2
    modes = results["modes"]
    assert modes["NONE"]["allocations_per_iteration"] > 0
    assert all(modes[m]["allocations_per_iteration"] == 0 for m in ("SINGLE", "SEPARATE",
                                                                      "ENABLED"))
    assert len({m["accuracy"] for m in modes.values()}) == 1   # the same bits in every mode
