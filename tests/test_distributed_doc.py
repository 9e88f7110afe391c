"""docs/distributed.md's training script, run as its reader would: copied from the page into a
fresh folder and launched with ``mpiexec -n 2 python -m mpi4py train.py`` (the ``mpi`` extra's
mpiexec, as tests/test_mpi.py launches its jobs)."""
from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import child_env
from ndws.nn import MultiLayerNetwork

PAGE = Path(__file__).resolve().parent.parent / "docs" / "distributed.md"
MPIEXEC = (str(Path(sys.executable).parent / "mpiexec")
           if (Path(sys.executable).parent / "mpiexec").exists() else shutil.which("mpiexec"))


def page_script() -> str:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    scripts = [b for b in blocks if b.startswith("# train.py\n")]
    assert len(scripts) == 1, "docs/distributed.md has one '# train.py' script"
    return scripts[0]


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None or MPIEXEC is None,
                    reason="mpi4py or mpiexec not found (pip install 'ndws[mpi]')")
def test_the_training_script_of_docs_distributed_runs_as_written(tmp_path):
    (tmp_path / "train.py").write_text(page_script(), encoding="utf-8")
    env = child_env(OMP_NUM_THREADS="1")
    proc = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "mpi4py", "train.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    # rank 0 alone reports: 1797 digits in global batches of 64 are 29 steps an epoch, 290 in
    # all; PerformanceListener(20) reports at iterations 20, 40, ... 280
    perf = [line for line in out.splitlines() if line.startswith("ETL: ")]
    assert len(perf) == 14 and all("; communication: " in line for line in perf)
    # the folder the page names did not exist: CheckpointListener made it, one file an epoch
    saved = sorted((tmp_path / "checkpoints").iterdir())
    assert len(saved) == 10 and out.count("Model checkpoint saved: checkpoints") == 10
    scores = re.findall(r"^\[(.*)\]$", out, re.M)
    assert len(scores) == 1                                 # printed by the root only
    epoch_scores = [float(v) for v in scores[0].split(",")]
    assert len(epoch_scores) == 10 and epoch_scores[-1] < epoch_scores[0] / 4
    last = MultiLayerNetwork.load(tmp_path / "checkpoints" / "checkpoint_9_iter290_epoch10.zip")
    assert (last.iteration, last.epoch) == (290, 10)
