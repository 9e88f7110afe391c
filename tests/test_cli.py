"""The main job: `python -m ndws demo` / `ndws demo`, and `ndws config`."""
from __future__ import annotations

import io
import subprocess
import sys

import pytest

from ndws.__main__ import main, run_demo


def test_demo_measures_zero_steady_state_allocations_with_a_workspace():
    out = io.StringIO()
    results = run_demo(iterations=30, batch=8, out=out)
    text = out.getvalue()
    ws, plain = results["with workspace"], results["without workspace"]
    assert ws["allocations_per_iteration_after_first"] == 0
    assert ws["allocations_first_iteration"] > 0          # the learning cycle spills
    # without a workspace every array-producing op allocates, every iteration
    assert plain["allocations_per_iteration_after_first"] == plain["allocations_first_iteration"] > 0
    assert ws["checksum"] == pytest.approx(plain["checksum"], rel=1e-6)
    assert "Workspace statistics: ---------------------------------" in text
    assert "DEMO_LOOP:" in text
    assert "loss checksums match" in text


def test_cli_demo_and_config_entry_points(capsys):
    assert main(["demo", "--iterations", "5", "--batch", "4"]) == 0
    assert "with workspace" in capsys.readouterr().out
    assert main(["config"]) == 0
    assert "openmp" in capsys.readouterr().out


def test_cli_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit) as info:
        main(["demo", "--iterations", "0"])
    assert info.value.code == 2
    assert "--iterations must be at least 1" in capsys.readouterr().err


def test_python_dash_m_runs():
    proc = subprocess.run([sys.executable, "-m", "ndws", "demo", "--iterations", "3"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "speed-up with the workspace" in proc.stdout


def test_train_reports_epochs_evaluation_and_the_mode_table():
    from ndws.__main__ import run_train
    out = io.StringIO()
    results = run_train(epochs=4, mode_epochs=2, progress=False, out=out)
    text = out.getvalue()
    assert results["accuracy"] >= 0.93
    assert "epoch   4/4: score" in text and "held-out accuracy" in text
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


def test_train_progress_bar_goes_to_stderr(capsys):
    assert main(["train", "--epochs", "1", "--progress"]) == 0
    captured = capsys.readouterr()
    assert "epoch 0:" in captured.err and "/44 [" in captured.err     # 44 batches of 32
    assert "epoch   1/1" in captured.out


@pytest.mark.parametrize("args, msg", [
    (["train", "--epochs", "0"], "--epochs must be at least 1"),
    (["train", "--batch-size", "0"], "--batch-size must be at least 1"),
    (["train", "--seed", "-1"], "--seed must be in"),
])
def test_train_rejects_bad_arguments(args, msg, capsys):
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    assert msg in capsys.readouterr().err


def test_python_m_ndws_train_runs():
    proc = subprocess.run([sys.executable, "-m", "ndws", "train", "--epochs", "2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Workspace modes" in proc.stdout and proc.stderr == ""   # no bar off a terminal
