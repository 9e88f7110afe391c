"""MPITrainer (docs/distributed.md): real MPI jobs of 2 ranks (``mpiexec`` of the ``mpi``
extra, launched in a subprocess with a timeout) run the scenarios of tests/mpi/checks.py and
report what each rank saw; the oracles (one process on the concatenated batches, averaging by
hand) are computed here, without MPI. The in-process tests use ``MPI.COMM_SELF``."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import child_env
from ndws.data import ArrayDataSetIterator
from ndws.data.dataset import DataSet
from ndws.nn.listeners import PerformanceListener

MPI_DIR = Path(__file__).resolve().parent / "mpi"
sys.path.insert(0, str(MPI_DIR))
import common  # noqa: E402  (the scenarios' networks and data)

HAVE_MPI4PY = importlib.util.find_spec("mpi4py") is not None


def _mpiexec():
    # the venv's (the mpich wheel installs it next to the interpreter), else the PATH's
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else shutil.which("mpiexec")


MPIEXEC = _mpiexec()
needs_mpi4py = pytest.mark.skipif(not HAVE_MPI4PY,
                                  reason="mpi4py is not installed (pip install 'ndws[mpi]')")
needs_mpiexec = pytest.mark.skipif(not HAVE_MPI4PY or MPIEXEC is None,
                                   reason="mpi4py or mpiexec not found (pip install "
                                          "'ndws[mpi]')")

TOL = {"rtol": 1e-5, "atol": 1e-6}


def launch(scenario, out, ranks=2, abort_on_exception=True, timeout=300):
    """``mpiexec -n ranks python [-m mpi4py] checks.py scenario out`` (``-m mpi4py`` aborts
    the job on an uncaught exception, so a broken scenario fails instead of hanging)."""
    env = child_env(OMP_NUM_THREADS="1")
    cmd = [MPIEXEC, "-n", str(ranks), sys.executable]
    cmd += ["-m", "mpi4py"] if abort_on_exception else []
    cmd += [str(MPI_DIR / "checks.py"), scenario, str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def load(out, name, rank):
    with np.load(out / f"{name}_rank{rank}.npz") as z:
        return {k: json.loads(str(v)) if v.dtype.kind == "U" else v for k, v in z.items()}


def both(out, name):
    return [load(out, name, r) for r in (0, 1)]


def comm_self():
    from mpi4py import MPI
    return MPI.COMM_SELF


def one_process(updater, x, y, batch, epochs, shuffle=False, seed=None, **net_options):
    net = common.network(updater, **net_options)
    net.fit(ArrayDataSetIterator(x, y, batch, shuffle=shuffle, seed=seed), epochs=epochs,
            progress=False)
    return net


def as_parallel_wrapper(net, x, y, seed):
    """`net` trained for 2 epochs by ParallelWrapper's SHARED_GRADIENTS on two workers, worker
    i fed the batches rank i's shard gets (BATCH rows, shuffled with `seed`): what a 2-rank
    job does, running statistics averaged after each step included."""
    from ndws.parallel import ParallelWrapper
    shards = [ArrayDataSetIterator(x, y, common.BATCH, shuffle=True, seed=seed).shard(r, 2)
              for r in range(2)]
    dealt = []
    for _ in range(2):
        for pair in zip(*shards):
            dealt += [DataSet(ds.features.numpy(), ds.labels.numpy()) for ds in pair]
        for s in shards:
            s.reset()
    with ParallelWrapper(net, workers=2, training_mode="SHARED_GRADIENTS",
                         prefetch_buffer=0) as pw:
        pw.fit(dealt, progress=False)
    return net


# -- the 2-rank job ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """One ``mpiexec -n 2`` run of every scenario of checks.MAIN; before it, a checkpoint
    written by one process (COMM_SELF) for the job to resume on 2 ranks."""
    if not HAVE_MPI4PY or MPIEXEC is None:
        pytest.skip("mpi4py or mpiexec not found (pip install 'ndws[mpi]')")
    from ndws.parallel import MPITrainer
    out = tmp_path_factory.mktemp("mpi")
    x, y = common.data(64)
    with MPITrainer(common.network("adam"), comm_self()) as trainer:
        trainer.fit(ArrayDataSetIterator(x, y, 2 * common.BATCH), epochs=1)
        trainer.save(out / "saved_by_1.zip")
    proc = launch("main", out)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.count(": done") == 2
    return out


@needs_mpiexec
def test_rank_0_broadcasts_parameters_updater_state_and_counters(job):
    r0, r1 = both(job, "broadcast")
    assert not np.array_equal(r0["before_params"], r1["before_params"])     # really differed
    for key in ("params", "updater", "counters", "score"):
        np.testing.assert_array_equal(r0[f"after_{key}"], r0[f"before_{key}"])
        np.testing.assert_array_equal(r1[f"after_{key}"], r0[f"before_{key}"])
    assert r1["after_counters"].tolist() == [2, 1]
    assert r0["repr"] == "<MPITrainer rank 0 of 2, SHARED_GRADIENTS, open>"
    assert r1["repr"] == "<MPITrainer rank 1 of 2, SHARED_GRADIENTS, open>"


@needs_mpiexec
@pytest.mark.parametrize("n", common.SHARED_SIZES)
@pytest.mark.parametrize("variant", list(common.SHARED_VARIANTS))
@pytest.mark.parametrize("updater", common.UPDATERS)
def test_shared_gradients_on_2_ranks_train_like_one_process_on_the_global_batch(
        job, n, variant, updater):
    # 2 ranks x 4 rows = one process on batches of 8 from the same shuffled order; the last
    # global batch has 3 rows (2 + 1: weighted by rows) or 1 (rank 1 contributes 0 rows)
    x, y = common.data(n)
    oracle = common.network(updater, regularised=True)
    history = oracle.fit(ArrayDataSetIterator(x, y, 2 * common.BATCH, shuffle=True, seed=5),
                         epochs=2, progress=False)
    r0, r1 = both(job, f"shared_{n}_{variant}_{updater}")
    np.testing.assert_array_equal(r0["params"], r1["params"])      # identical on every rank
    np.testing.assert_array_equal(r0["updater"], r1["updater"])
    np.testing.assert_allclose(r0["params"], oracle.params().numpy(), **TOL)
    np.testing.assert_allclose(r0["updater"], oracle._updater_state_flat(), rtol=1e-4,
                               atol=1e-7)
    assert r0["counters"].tolist() == r1["counters"].tolist() == [oracle.iteration, 2]
    np.testing.assert_allclose(r0["scores"], history.scores, rtol=1e-5)
    np.testing.assert_array_equal(r0["scores"], r1["scores"])
    assert r0["iterations"].tolist() == history.iterations
    buckets = r0["buckets"]
    assert len(buckets) == (3 if variant == "per_layer" else 1)
    assert buckets[0][2] == oracle.num_params() and buckets[-1][1] == 0     # covers them all
    # the ranks share this machine: the default sums in shared memory
    assert bool(r0["shared_memory"]) == ("shared_memory" not in common.SHARED_VARIANTS[variant])


@needs_mpiexec
def test_ranks_with_uneven_data_step_while_any_has_a_batch(job):
    # no shard: rank 0 has 2 batches of 4 rows, rank 1 has 4; steps 3 and 4 are rank 1's alone
    x, y = common.data(64)
    steps = [slice(0, 8), slice(8, 16), slice(20, 24), slice(28, 32)]
    oracle = common.network("sgd")
    history = oracle.fit([DataSet(x[s], y[s]) for s in steps], epochs=2, progress=False)
    r0, r1 = both(job, "uneven")
    for r in (r0, r1):
        np.testing.assert_allclose(r["params"], oracle.params().numpy(), **TOL)
        assert r["iterations"].tolist() == list(range(8))
        np.testing.assert_allclose(r["scores"], history.scores, rtol=1e-5)


@needs_mpiexec
def test_batch_normalization_trains_as_parallel_wrapper_on_two_threads(job):
    # the running statistics (parameters no updater changes) go their own way on each rank
    # during a step and are averaged after it: what ParallelWrapper's SHARED_GRADIENTS does
    # with two workers fed the same batches (worker i gets rank i's)
    oracle = as_parallel_wrapper(common.network("adam", batchnorm=True), *common.data(48), 2)
    r0, r1 = both(job, "batchnorm")
    np.testing.assert_array_equal(r0["params"], r1["params"])
    np.testing.assert_allclose(r0["params"], oracle.params().numpy(), **TOL)
    running = [s for layer, name, _, s, size in oracle._layout
               if not layer.trainable(name)]
    assert running                                # the test covers running statistics


@needs_mpiexec
@pytest.mark.parametrize("variant", list(common.CNN_VARIANTS))
def test_a_cnn_on_2_ranks_trains_like_one_process_on_the_global_batch(job, variant):
    x, y = common.image_data(common.CNN_N)
    oracle = common.cnn()
    history = oracle.fit(ArrayDataSetIterator(x, y, 2 * common.BATCH, shuffle=True, seed=7),
                         epochs=2, progress=False)
    r0, r1 = both(job, f"cnn_{variant}_False")
    np.testing.assert_array_equal(r0["params"], r1["params"])
    np.testing.assert_allclose(r0["params"], oracle.params().numpy(), **TOL)
    np.testing.assert_allclose(r0["updater"], oracle._updater_state_flat(), rtol=1e-4,
                               atol=1e-7)
    np.testing.assert_allclose(r0["scores"], history.scores, rtol=1e-5)
    assert r0["counters"].tolist() == [oracle.iteration, 2] == [8, 2]


@needs_mpiexec
@pytest.mark.parametrize("variant", list(common.CNN_VARIANTS))
def test_a_cnn_with_batch_normalization_trains_as_parallel_wrapper(job, variant):
    # per-channel running statistics of 4-D input, averaged over the ranks after each step as
    # ParallelWrapper's SHARED_GRADIENTS averages its two workers' (worker i gets rank i's
    # batches)
    oracle = as_parallel_wrapper(common.cnn(batchnorm=True), *common.image_data(common.CNN_N),
                                 7)
    r0, r1 = both(job, f"cnn_{variant}_True")
    np.testing.assert_array_equal(r0["params"], r1["params"])
    np.testing.assert_allclose(r0["params"], oracle.params().numpy(), **TOL)
    bn = oracle.get_layer(1)
    assert not np.array_equal(bn.params["mean"].numpy(), np.zeros(4))    # the statistics moved


@needs_mpiexec
@pytest.mark.parametrize("frequency", common.AVERAGING_FREQUENCIES)
@pytest.mark.parametrize("average_updaters", [True, False])
def test_averaging_matches_two_networks_averaged_by_hand(job, frequency, average_updaters):
    x, y = common.data(common.AVERAGING_N)
    nets = [common.network("adam") for _ in range(2)]
    shards = [ArrayDataSetIterator(x, y, common.BATCH).shard(r, 2) for r in range(2)]
    scores = []

    def average():
        mean = (nets[0].params().numpy() + nets[1].params().numpy()) / 2
        for net in nets:
            net.set_params(mean)
        if average_updaters:
            state = (nets[0]._updater_state_flat() + nets[1]._updater_state_flat()) / 2
            for net in nets:
                net._set_updater_state_flat(state, "mean")

    for _ in range(2):
        steps = 0
        for batches in zip(*shards):
            for net, ds in zip(nets, batches):
                net.fit(ds, progress=False)
            scores.append((nets[0].score() + nets[1].score()) / 2)
            steps += 1
            if steps % frequency == 0:
                average()
        if steps % frequency:
            average()                      # each epoch ends averaged
        for s in shards:
            s.reset()
    r0, r1 = both(job, f"averaging_{frequency}_{average_updaters}")
    for r in (r0, r1):
        np.testing.assert_allclose(r["params"], nets[0].params().numpy(), **TOL)
        np.testing.assert_allclose(r["updater"], nets[0]._updater_state_flat()
                                   if average_updaters else r["updater"], rtol=1e-4,
                                   atol=1e-7)
        np.testing.assert_allclose(r["scores"], scores, rtol=1e-5)
        assert r["counters"].tolist() == [16, 2]
    np.testing.assert_array_equal(r0["params"], r1["params"])
    if not average_updaters:             # each rank kept its own moments
        assert not np.array_equal(r0["updater"], r1["updater"])


@needs_mpiexec
def test_checkpoints_resume_on_any_number_of_ranks(job):
    from ndws.parallel import MPITrainer
    x, y = common.data(64)
    oracle = one_process("adam", x, y, 2 * common.BATCH, epochs=2)
    r0, r1 = both(job, "checkpoints_continuous")
    np.testing.assert_allclose(r0["params"], oracle.params().numpy(), **TOL)
    # rank 0 alone ran the CheckpointListener
    assert [Path(p).name for p in r0["saved"]] == ["checkpoint_0_iter8_epoch1.zip",
                                                    "checkpoint_1_iter16_epoch2.zip"]
    assert len(r1["saved"]) == 0
    assert os.listdir(job / "listener_rank1") == []
    # saved by 2 ranks or by 1, resumed on 2: the continuous run's parameters
    for source in ("saved_by_2", "saved_by_1"):
        for r in both(job, f"resumed_{source}"):
            np.testing.assert_allclose(r["params"], oracle.params().numpy(), **TOL)
            np.testing.assert_allclose(r["updater"], oracle._updater_state_flat(), rtol=1e-4,
                                       atol=1e-7)
            assert r["counters"].tolist() == [16, 2]
    # saved by 2 ranks (the trainer's save or the listener's file), resumed on 1
    for path in (job / "saved_by_2.zip", Path(r0["saved"][0])):
        with MPITrainer.load(path, comm_self()) as trainer:
            assert (trainer.model.iteration, trainer.model.epoch) == (8, 1)
            trainer.fit(ArrayDataSetIterator(x, y, 2 * common.BATCH))
            np.testing.assert_allclose(trainer.model.params().numpy(),
                                       oracle.params().numpy(), **TOL)
    e0, e1 = both(job, "load_missing")
    assert e0["error"].startswith("FileNotFoundError: path: no such file")
    assert e1["error"].startswith("RuntimeError: MPITrainer.load: rank 0 could not read")
    assert "FileNotFoundError" in e1["error"]


@needs_mpiexec
def test_listeners_progress_bar_and_logs_on_rank_0_only(job):
    r0, r1 = both(job, "listeners")
    # 40 rows, global batches of 8: 5 steps per epoch, 2 epochs
    assert [c for c in r0["calls"] if c[0] == "iteration_done"] == [
        ["iteration_done", i] for i in range(10)]
    assert ["on_epoch_end", 2] in r0["calls"] and len(r1["calls"]) == 0
    assert ["on_gradient_calculation", 9] in r0["calls"]
    assert len(r0["scores"]) == 10 and len(r1["scores"]) == 0
    assert r0["history_scores"].tolist() == r1["history_scores"].tolist()
    assert r0["same_listeners"] and r1["same_listeners"]        # rank 1's are given back
    # one bar over the fit, its epochs numbered from 1
    assert "epoch 1/2" in r0["bar"] and "epoch 2/2" in r0["bar"] and r1["bar"] == ""
    assert "communication: " in r0["perf_line"] and "samples/sec" in r0["perf_line"]
    assert r0["log"].count("communication: ") == 9 and r1["log"] == ""
    assert r0["hook_after"] == r1["hook_after"] == "None"       # the hook is removed


@needs_mpiexec
def test_each_bucket_starts_before_the_layers_below_backpropagate(job):
    # trace=True, a bucket per layer: bucket k (layer 2 - k) starts right after that layer's
    # backprop, before the next layer down's; all are waited for after backprop, then the
    # update (the timeline of the last step)
    for r in both(job, "listeners"):
        assert r["buckets"] == [[2, 248, 275], [1, 112, 248], [0, 0, 112]]
        events = [[kind, index] for _, kind, index in r["timeline"]]
        started = [e for e in events if e[0] in ("backprop done", "allreduce started")]
        assert started == [["backprop done", 2], ["allreduce started", 0],
                           ["backprop done", 1], ["allreduce started", 1],
                           ["backprop done", 0], ["allreduce started", 2]]
        finished = [index for kind, index in events if kind.startswith("allreduce done")
                    or kind == "allreduce waited"]
        assert sorted(finished) == [0, 1, 2] and events[-1] == ["updated", 0]
        times = [t for t, _, _ in r["timeline"]]
        assert times == sorted(times)


def _graph_oracle():
    # the two-branch graph trained by one process on the global batches of 8
    from ndws.data import MultiDataSet
    a, b, y = common.graph_data(common.GRAPH_N)
    g = common.graph()
    g.fit([MultiDataSet([a[s:s + 8], b[s:s + 8]], [y[s:s + 8]])
           for s in range(0, common.GRAPH_N, 8)], epochs=2, progress=False)
    return g


@needs_mpiexec
def test_a_graphs_buckets_start_during_its_backward_pass(job):
    # a bucket per vertex with parameters, in the order the backward pass finishes them
    # (reverse topological: out, h, db, da), each started right after its vertex's backprop,
    # before the vertices below have backpropagated
    oracle = _graph_oracle()
    spans = {}
    for k, owner in enumerate(oracle._owners()):
        for lay, _, _, start, size in oracle._layout:
            if lay is owner:
                lo, hi = spans.get(k, (start, start))
                spans[k] = (min(lo, start), max(hi, start + size))
    for r in both(job, "graph_per_vertex"):
        order = r["backward_order"].tolist()
        assert order == sorted(order, reverse=True)         # the layout's order, reversed
        with_params = [i for i in order if i in spans and spans[i][1] > spans[i][0]]
        assert [list(b) for b in r["buckets"]] == [[i, *spans[i]] for i in with_params]
        events = [[kind, index] for _, kind, index in r["timeline"]]
        started = [e for e in events if e[0] in ("backprop done", "allreduce started")]
        expected = []
        for i in order:
            expected.append(["backprop done", i])
            if i in with_params:
                expected.append(["allreduce started", with_params.index(i)])
        assert started == expected
        last_backprop = max(j for j, e in enumerate(events) if e[0] == "backprop done")
        assert sum(e[0] == "allreduce started" for e in events[:last_backprop]) == \
            len(with_params) - 1
        assert events[-1] == ["updated", 0]


@needs_mpiexec
def test_a_graph_trains_to_the_same_bits_in_buckets_as_in_one(job):
    per, one = both(job, "graph_per_vertex"), both(job, "graph_one_bucket")
    oracle = _graph_oracle()
    for r in per + one:
        np.testing.assert_array_equal(r["params"], per[0]["params"])
        np.testing.assert_array_equal(r["updater"], per[0]["updater"])
        np.testing.assert_array_equal(r["scores"], per[0]["scores"])
    assert len(one[0]["buckets"]) == 1 and len(per[0]["buckets"]) == 4
    np.testing.assert_allclose(per[0]["params"], oracle.params().numpy(), **TOL)
    assert per[0]["counters"].tolist() == [oracle.iteration, 2]
    # a network and its to_computation_graph(): the same buckets, the same bits
    net, graph = both(job, "graph_form_network"), both(job, "graph_form_graph")
    for r in net + graph:
        np.testing.assert_array_equal(r["params"], net[0]["params"])
        np.testing.assert_array_equal(r["updater"], net[0]["updater"])
    assert graph[0]["buckets"] == net[0]["buckets"]
    assert len(net[0]["buckets"]) == 3


@needs_mpiexec
def test_ranks_that_disagree_on_arguments_fail_together_and_change_nothing(job):
    r0, r1 = (r["results"] for r in both(job, "disagree"))
    assert r1["frequency"] == "ValueError: averaging_frequency: must be at least 1, got 0"
    assert r0["frequency"] == ("RuntimeError: MPITrainer: rank 1 of 2 refused its arguments: "
                               "ValueError: averaging_frequency: must be at least 1, got 0")
    for r in (r0, r1):
        assert r["configuration"].startswith("ValueError: MPITrainer: the ranks' networks or "
                                             "options differ")
        assert r["options"] == r["configuration"]
        assert r["fit_ok"] == "no error"
    assert r1["fit_epochs"] == "ValueError: epochs: expected an int >= 1, got 0"
    assert r0["fit_epochs"].startswith("RuntimeError: MPITrainer.fit: rank 1 of 2 refused")
    assert r1["fit_batch_size"] == "ValueError: batch_size: expected an int >= 1, got 0"
    assert r0["fit_batch_size"].endswith("refused its arguments: ValueError: batch_size: "
                                         "expected an int >= 1, got 0")
    assert r1["fit_data"] == ("TypeError: data: expected a DataSet, an iterable of DataSets "
                              "or arrays, got int")
    assert r0["fit_data"].startswith("RuntimeError: MPITrainer.fit: rank 1 of 2 refused")
    assert load(job, "disagree", 0)["iteration"] == 4                 # only fit_ok trained


@needs_mpiexec
def test_a_failing_rank_ends_the_job_with_its_message(tmp_path):
    # rank 1's data raises at its 4th batch while rank 0 waits in the step's collective: the
    # trainer reports rank 1's error and aborts, instead of leaving rank 0 blocked forever
    proc = launch("failing_rank", tmp_path, abort_on_exception=False, timeout=120)
    assert proc.returncode != 0
    assert "rank 0 training" in proc.stdout and "not expected" not in proc.stdout
    assert ("ndws MPITrainer: rank 1 of 2 failed: RuntimeError: data trouble on rank 1 at "
            "batch 3 (at iteration 3, epoch 0)") in proc.stderr
    assert "aborts the job (MPI_Abort)" in proc.stderr


@needs_mpiexec
def test_a_stuck_rank_is_reported_when_the_timeout_passes(tmp_path):
    # rank 1 sleeps (in no collective) at its 3rd batch; rank 0 waits 1 s for the step's
    # counts, then aborts the job, naming the collective
    proc = launch("stuck_rank", tmp_path, abort_on_exception=False, timeout=120)
    assert proc.returncode != 0 and "not expected" not in proc.stdout
    assert ("ndws MPITrainer: rank 0 of 2 waited more than 1 s for the step's row counts; "
            "another rank is stuck, has died, or failed outside the trainer (at iteration 2, "
            "epoch 0)") in proc.stderr


@needs_mpiexec
def test_ndws_train_mpi_reports_once_from_rank_0(tmp_path):
    cmd = [MPIEXEC, "-n", "2", sys.executable, "-m", "mpi4py", "-m", "ndws", "train", "--mpi",
           "--epochs", "3", "--batch-size", "16"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert out.count("ndws train --mpi: 2 ranks (") == 1
    assert "batch 16 per rank (32 per step), 3 epochs" in out
    assert out.count("epoch   3/3: score") == 1 and "communicating" in out
    accuracy = float(out.split("held-out accuracy ")[-1].split()[0])
    assert accuracy > 0.9
    assert out.count("Confusion Matrix") == 1


# -- in one process ---------------------------------------------------------------------------

@pytest.mark.parametrize("regularised", [False, True], ids=["compiled", "general"])
def test_the_backward_hook_sees_each_layers_final_gradients_in_order(rng, regularised):
    net = common.network("sgd", regularised=regularised)
    x, y = common.data(8)
    ds = DataSet(x, y)
    # a plain dense network trains on the compiled iteration, an l2 one on the general path:
    # the hook is called at the same point in both
    assert (net._compiled(ds) is None) == regularised
    net.compute_gradient_and_score(ds)
    final = net.gradient().numpy()
    seen = []

    def hook(i):
        # layer i's gradients are complete; the layers below have not been reached
        layer = net.layers[i]
        for name, g in layer.grads.items():
            seen.append((i, name, np.array_equal(g.numpy(), _part(net, final, layer, name))))
    for layer in net.layers:
        for g in layer.grads.values():
            g.fill(np.nan)
    net._after_layer_gradients = hook
    net.compute_gradient_and_score(ds)
    net._after_layer_gradients = None
    assert [(i, n) for i, n, _ in seen] == [(2, "W"), (2, "b"), (1, "W"), (1, "b"), (0, "W"),
                                            (0, "b")]
    assert all(ok for _, _, ok in seen)


def _part(net, flat, layer, name):
    for lay, n, shape, start, size in net._layout:
        if lay is layer and n == name:
            return flat[start:start + size].reshape(shape)
    raise KeyError(name)


def test_importing_ndws_never_needs_mpi4py():
    code = ("import sys; sys.modules['mpi4py'] = None\n"
            "import ndws, ndws.parallel, ndws.nn\n"
            "from ndws.parallel import MPITrainer\n"
            "from ndws.parallel.mpi import mpi_available\n"
            "print(mpi_available())\n"
            "try:\n"
            "    MPITrainer(None)\n"
            "except ImportError as e:\n"
            "    print(e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "False"
    assert lines[1].startswith("ndws.parallel.MPITrainer needs mpi4py and an MPI library: pip "
                               "install 'ndws[mpi]' (mpi4py and the mpich wheel from PyPI")
    proc = subprocess.run([sys.executable, "-c", "import sys; sys.modules['mpi4py'] = None\n"
                           "from ndws.__main__ import main; main(['train', '--mpi'])"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--mpi needs mpi4py" in proc.stderr


@needs_mpi4py
def test_one_process_trains_exactly_as_fit():
    from ndws.parallel import MPITrainer
    x, y = common.data(37)
    for mode in ("SHARED_GRADIENTS", "AVERAGING"):
        for updater in common.UPDATERS:
            oracle = common.network(updater, regularised=True)
            oracle.fit(x, y, batch_size=8, epochs=2, progress=False)
            net = common.network(updater, regularised=True)
            with MPITrainer(net, comm_self(), training_mode=mode) as trainer:
                history = trainer.fit(x, y, batch_size=8, epochs=2)
            np.testing.assert_array_equal(net.params().numpy(), oracle.params().numpy())
            assert (net.iteration, net.epoch) == (oracle.iteration, oracle.epoch) == (10, 2)
            assert len(history.iterations) == 10 and history.epochs == [0, 1]


@needs_mpi4py
def test_performance_listener_shows_the_communication_time():
    from ndws.parallel import MPITrainer
    x, y = common.data(16)
    net = common.network("sgd")
    perf = PerformanceListener(1)
    net.set_listeners(perf)
    with MPITrainer(net, comm_self()) as trainer:
        trainer.fit(x, y, batch_size=4)
    assert "; communication: " in perf.last_line
    assert perf.last_line.index("iteration time") < perf.last_line.index("communication")
    assert not hasattr(net, "last_comm_time")             # only while the trainer fits
    net.fit(x, y, batch_size=4, progress=False)
    assert "communication" not in perf.last_line


def _hostile_constructions(MPI, net):
    from ndws.nn import MultiLayerNetwork
    fresh = MultiLayerNetwork(common.network("sgd").conf)       # never initialised
    return [
        (lambda: _make(None), TypeError, "MPITrainer: model must be an ndws.nn."
                                         "MultiLayerNetwork or ComputationGraph, got NoneType"),
        (lambda: _make(fresh), ValueError, "model is not initialised; call model.init()"),
        (lambda: _make(net, comm="world"), TypeError, "comm: expected an mpi4py communicator "
                                                      "(e.g. MPI.COMM_WORLD), got str"),
        (lambda: _make(net, comm=3), TypeError, "comm: expected an mpi4py communicator"),
        (lambda: _make(net, comm=MPI.COMM_NULL), ValueError, "comm: MPI.COMM_NULL"),
        (lambda: _make(net, comm=MPI.Comm()), ValueError, "comm: MPI.COMM_NULL"),
        (lambda: _make(net, averaging_frequency=0), ValueError,
         "averaging_frequency: must be at least 1, got 0"),
        (lambda: _make(net, averaging_frequency=True), TypeError,
         "averaging_frequency: expected an int, got bool"),
        (lambda: _make(net, averaging_frequency=2.0), TypeError,
         "averaging_frequency: expected an int, got float"),
        (lambda: _make(net, training_mode="bogus"), ValueError,
         "training_mode: unknown TrainingMode 'bogus'"),
        (lambda: _make(net, average_updaters=1), TypeError,
         "average_updaters: expected True or False, got 1"),
        (lambda: _make(net, overlap="yes"), TypeError, "overlap: expected True or False"),
        (lambda: _make(net, shared_memory=1), TypeError,
         "shared_memory: expected True or False, got 1"),
        (lambda: _make(net, bucket_bytes=-1), ValueError, "bucket_bytes: must be at least 0"),
        (lambda: _make(net, bucket_bytes=True), TypeError,
         "bucket_bytes: expected an int >= 0, got bool"),
        (lambda: _make(net, timeout=0), ValueError, "timeout: expected a finite number of "
                                                    "seconds > 0 or None, got 0"),
        (lambda: _make(net, timeout=float("nan")), ValueError, "timeout: expected a finite"),
        (lambda: _make(net, timeout=-1.0), ValueError, "timeout: expected a finite"),
        (lambda: _make(net, timeout="1"), TypeError, "timeout: expected seconds (a number > "
                                                     "0) or None, got str '1'"),
        (lambda: _make(net, timeout=True), TypeError, "timeout: expected seconds"),
        (lambda: _make(net, abort_on_error=None), TypeError, "abort_on_error: expected True"),
        (lambda: _make(net, kernel_threads=0), ValueError, "kernel_threads: must be at least 1"),
        (lambda: _make(net, trace="no"), TypeError, "trace: expected True or False"),
        (lambda: _make(net, bogus=1), TypeError, "unexpected keyword argument 'bogus'"),
    ]


def _make(model, comm="self", **options):
    from ndws.parallel import MPITrainer
    return MPITrainer(model, comm_self() if comm == "self" else comm, **options)


@needs_mpi4py
def test_hostile_arguments_are_refused_by_name_and_leave_the_model_alone():
    from mpi4py import MPI
    net = common.network("adam")
    x, y = common.data(16)
    net.fit(x, y, batch_size=8, progress=False)
    listeners = net.get_listeners()
    before = (net.params().numpy(), net._updater_state_flat(), net.iteration, net.epoch)
    for make, exc, message in _hostile_constructions(MPI, net):
        with pytest.raises(exc) as info:
            make()
        assert message in str(info.value), (message, str(info.value))
    trainer = _make(net)
    for kwargs, exc, message in [
            ({"epochs": 0}, ValueError, "epochs: expected an int >= 1, got 0"),
            ({"epochs": True}, ValueError, "epochs: expected an int >= 1, got True"),
            ({"epochs": "2"}, ValueError, "epochs: expected an int >= 1, got '2'"),
            ({"progress": "yes"}, TypeError, "progress: expected True, False or None"),
            ({"batch_size": 0}, ValueError, "batch_size: expected an int >= 1, got 0")]:
        with pytest.raises(exc, match=message):
            trainer.fit(x, y, **kwargs)
    with pytest.raises(TypeError, match="data: expected a DataSet, an iterable"):
        trainer.fit(42)
    after = (net.params().numpy(), net._updater_state_flat(), net.iteration, net.epoch)
    np.testing.assert_array_equal(after[0], before[0])
    np.testing.assert_array_equal(after[1], before[1])
    assert after[2:] == before[2:] and net.get_listeners() == listeners
    assert net._after_layer_gradients is None
    trainer.close()
    trainer.close()                                        # idempotent
    with pytest.raises(RuntimeError, match="MPITrainer: the trainer is closed"):
        trainer.fit(x, y)
    with pytest.raises(RuntimeError, match="MPITrainer: the trainer is closed"):
        trainer.save("nowhere.zip")


@needs_mpi4py
def test_a_busy_network_is_refused(tmp_path):
    import threading
    net = common.network("sgd")
    trainer = _make(net)
    x, y = common.data(16)
    inside, release = threading.Event(), threading.Event()

    class Hold(PerformanceListener):
        def iteration_done(self, model, iteration, epoch):
            inside.set()
            release.wait(10)

    net.set_listeners(Hold())
    worker = threading.Thread(target=net.fit, args=(x, y), kwargs={"batch_size": 16,
                                                                    "progress": False})
    worker.start()
    assert inside.wait(10)
    try:
        with pytest.raises(RuntimeError, match="the network is in use by another thread"):
            trainer.fit(x, y, batch_size=4)
    finally:
        release.set()
        worker.join()
    trainer.fit(x, y, batch_size=4)                       # free again
    trainer.close()


@needs_mpi4py
def test_a_trainer_is_not_built_around_a_model_fitting_in_another_thread():
    from busy_helpers import WAIT, Hold, start
    net = common.network("adam")
    x, y = common.data(16)
    hold = Hold("iteration_done", 1)
    net.set_listeners(hold)
    fitter, fitted = start(lambda: net.fit(x, y, batch_size=8, progress=False))
    assert hold.inside.wait(WAIT)
    try:
        before = net.params().numpy().copy()
        with pytest.raises(RuntimeError, match=r"^MPITrainer: the network is in use by another "
                                               r"thread \(MultiLayerNetwork\.fit\)"):
            _make(net)
        np.testing.assert_array_equal(net.params().numpy(), before)   # nothing broadcast
    finally:
        hold.go.set()
        fitter.join(WAIT)
    assert "error" not in fitted
    _make(net).close()                                        # free again


@needs_mpi4py
@pytest.mark.parametrize("mode", ["SHARED_GRADIENTS", "AVERAGING"])
def test_a_copy_during_an_mpi_fit_is_taken_at_a_step_boundary(mode, tmp_path):
    from busy_helpers import Hold, clone_during
    net = common.network("adam")
    x, y = common.data(32)
    trainer = _make(net, training_mode=mode)
    hold = Hold("on_gradient_calculation", 1)
    saved = []

    class Save(PerformanceListener):
        def iteration_done(self, model, iteration, epoch):
            model.save(tmp_path / f"step{iteration}.zip")        # the training thread
            saved.append(model.params().numpy().copy())

    net.set_listeners(hold, Save())
    clone = clone_during(net, hold, lambda: trainer.fit(x, y, batch_size=8, progress=False))
    np.testing.assert_array_equal(clone.params().numpy(), hold.boundaries[2])
    np.testing.assert_array_equal(saved[1], hold.boundaries[2])
    from ndws.nn import MultiLayerNetwork
    np.testing.assert_array_equal(
        MultiLayerNetwork.load(tmp_path / "step1.zip").params().numpy(), saved[1])
    trainer.close()


@needs_mpi4py
def test_save_and_load_errors_are_raised(tmp_path):
    from ndws.parallel import MPITrainer
    trainer = _make(common.network("sgd"))
    with pytest.raises(IsADirectoryError):
        trainer.save(tmp_path)
    with pytest.raises(TypeError, match="path: expected a str or os.PathLike"):
        trainer.save(3)
    trainer.close()
    with pytest.raises(FileNotFoundError, match="path: no such file"):
        MPITrainer.load(tmp_path / "missing.zip", comm_self())
    (tmp_path / "junk.zip").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not an ndws network file"):
        MPITrainer.load(tmp_path / "junk.zip", comm_self())
    with pytest.raises(TypeError, match="comm: expected an mpi4py communicator"):
        MPITrainer.load(tmp_path / "junk.zip", "world")
