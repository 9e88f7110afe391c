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
