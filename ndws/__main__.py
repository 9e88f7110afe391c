"""Command line: ``ndws train`` (the main job), ``ndws demo`` and ``ndws config`` (also as
``python -m ndws ...``).

``train`` trains a network on the bundled digits with a progress bar, prints each epoch's score
and held-out accuracy and the final evaluation, then compares the workspace modes on the same
network: a multi-layer perceptron, or with ``--model`` another network of the table `MODELS`
(``lstm``: an LSTM that reads each 8x8 digit row by row, 8 steps of 8 features; ``lenet``: a
LeNet of two convolutions and poolings on each digit as a 1x8x8 image; ``resnet``: a
residual ComputationGraph on the same images). ``train --mpi``, run under ``mpiexec -n N``,
trains the MLP data-parallel on the N processes (`ndws.parallel.MPITrainer`,
docs/distributed.md). Ctrl-C stops it, saying where, with exit status 130.

The demo runs two cyclic workloads with a workspace and without, and prints for each the time
per iteration, the heap allocations of array data and the page faults per iteration, then the
workspace statistics table. The first (a small forward pass) shows what a workspace removes:
every allocation, but no time, because malloc recycles small blocks from its free lists. The
second (standardising a large batch) shows where that pays: each temporary there is larger
than glibc's largest mmap threshold (32 MiB), so without a workspace it comes fresh from the
kernel every iteration, page by page.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Callable, Sequence

import numpy as np

import ndws

__all__ = ["Interrupted", "MODELS", "main", "run_demo", "run_train", "run_train_mpi"]

try:                                   # page faults per iteration, where the OS counts them
    import resource

    def _page_faults() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
except ImportError:                    # Windows
    resource = None                    # type: ignore[assignment]

    def _page_faults() -> int:
        return 0


def _workload(batch: int, features: int, hidden: int, classes: int, seed: int
              ) -> Callable[[], float]:
    rng = np.random.default_rng(seed)
    # Parameters and data live outside every workspace, as a model's weights do.
    x = ndws.from_numpy(rng.standard_normal((batch, features)).astype(np.float32))
    w1 = ndws.from_numpy((rng.standard_normal((features, hidden)) * 0.1).astype(np.float32))
    w2 = ndws.from_numpy((rng.standard_normal((hidden, classes)) * 0.1).astype(np.float32))
    labels = ndws.from_numpy(np.eye(classes, dtype=np.float32)[rng.integers(0, classes, batch)])

    def step() -> float:
        h = ndws.maximum(x @ w1, 0.0)                 # linear + ReLU
        logits = h @ w2
        shifted = logits - logits.max(axis=1, keepdims=True)
        e = ndws.exp(shifted)
        log_p = shifted - ndws.log(e.sum(axis=1, keepdims=True))
        loss = -(labels * log_p).sum() / batch        # softmax cross-entropy
        return loss.item()
    return step


def _large_workload(rows: int, features: int, seed: int) -> Callable[[], float]:
    # a data-pipeline step over a large batch: standardise, then clip; each of its three
    # temporaries is rows * features * 4 bytes
    rng = np.random.default_rng(seed)
    x = ndws.from_numpy(rng.standard_normal((rows, features)).astype(np.float32))
    mean = ndws.from_numpy(rng.standard_normal(features).astype(np.float32))
    inv_std = ndws.from_numpy((rng.random(features) + 0.5).astype(np.float32))

    def step() -> float:
        z = (x - mean) * inv_std
        return ndws.clip(z, -3.0, 3.0).sum().item()
    return step


def _run(step: Callable[[], float], iterations: int, ws: ndws.Workspace | None
         ) -> dict:
    """Medians of the per-iteration time and page faults, heap allocations in the first
    iteration and per later one, checksum."""
    mm = ndws.get_memory_manager()
    times, faults = [], []
    checksum = 0.0
    first_allocs = 0
    before = mm.allocation_statistics()["allocations"]
    with mm.gc_paused():
        for i in range(iterations):
            f0 = _page_faults()
            t0 = time.perf_counter()
            if ws is None:
                checksum += step()
            else:
                with ws:
                    checksum += step()
            times.append(time.perf_counter() - t0)
            faults.append(_page_faults() - f0)
            if i == 0:
                first_allocs = mm.allocation_statistics()["allocations"] - before
    total = mm.allocation_statistics()["allocations"] - before
    return {"median_us": statistics.median(times) * 1e6,
            "allocations_first_iteration": first_allocs,
            "allocations_per_iteration_after_first": (total - first_allocs)
                                                     / max(iterations - 1, 1),
            "page_faults_per_iteration": statistics.median(faults),
            "checksum": checksum}


def _compare(step: Callable[[], float], iterations: int, ws_id: str) -> dict:
    conf = ndws.WorkspaceConfiguration(policy_learning=ndws.LearningPolicy.FIRST_LOOP)
    ws = ndws.workspace(ws_id, conf)
    step()  # warm NumPy's caches so neither run pays for first use
    return {name: _run(step, iterations, target)
            for name, target in (("without workspace", None), ("with workspace", ws))}


def _table(results: dict, out: Any) -> None:
    faults = "page faults" if resource is not None else ""
    print(f"{'':<20} {'time/iteration':>16} {'heap allocations of array data':>34} "
          f"{faults:>14}", file=out)
    print(f"{'':<20} {'(median)':>16} {'first iteration':>17} {'per later one':>16} "
          f"{'(median)' if faults else '':>14}", file=out)
    for name, r in results.items():
        shown = (f"{r['page_faults_per_iteration']:>14,.0f}" if faults else "")
        print(f"{name:<20} {_us(r['median_us']):>16} {r['allocations_first_iteration']:>17d} "
              f"{r['allocations_per_iteration_after_first']:>16.2f} {shown}", file=out)


def _us(value: float) -> str:
    return f"{value:,.1f} us" if value < 10_000 else f"{value / 1000:,.1f} ms"


def _speedup(results: dict) -> float:
    return results["without workspace"]["median_us"] / results["with workspace"]["median_us"]


def run_demo(iterations: int = 1000, batch: int = 64, features: int = 256, hidden: int = 128,
             classes: int = 10, seed: int = 0, large_rows: int = 9216,
             large_features: int = 1024, large_iterations: int = 20, out=None) -> dict:
    """Run the demo and print its report; returns the measured figures: ``{"small": ...,
    "large": ...}``, each ``{"without workspace": ..., "with workspace": ...}``."""
    out = out or sys.stdout
    small = _compare(_workload(batch, features, hidden, classes, seed), iterations,
                     "DEMO_LOOP")
    large = _compare(_large_workload(large_rows, large_features, seed), large_iterations,
                     "DEMO_LARGE")
    temp = large_rows * large_features * 4
    print("ndws demo: cyclic workloads with a workspace and without, float32\n", file=out)
    print(f"1. small arrays: {iterations} iterations of a {features}-{hidden}-{classes} forward "
          f"pass and softmax cross-entropy, batch {batch}", file=out)
    _table(small, out)
    print(f"\n2. large arrays: {large_iterations} iterations of standardising and clipping "
          f"{large_rows} x {large_features} values (three temporaries of "
          f"{temp / 2**20:,.1f} MiB each)", file=out)
    _table(large, out)
    print(file=out)
    ndws.get_workspace_manager().print_allocation_statistics_for_current_thread(file=out)
    same = all(np.isclose(r["with workspace"]["checksum"], r["without workspace"]["checksum"],
                          rtol=1e-6) for r in (small, large))
    plain = small["without workspace"]
    print(f"\nSmall arrays: the workspace removes every allocation "
          f"({plain['allocations_per_iteration_after_first']:.0f} per iteration, 0 with it) "
          f"but no time ({_speedup(small):.2f}x): malloc hands small blocks back from its free "
          f"lists, and the matrix products take the time.", file=out)
    faults = large["without workspace"]["page_faults_per_iteration"]
    why = (f"; without it each temporary is mapped fresh from the kernel and zeroed page by "
           f"page ({faults:,.0f} page faults per iteration)" if faults else "")
    print(f"Large arrays: {_speedup(large):.2f}x with the workspace, which keeps reusing the "
          f"memory of the first iteration{why}.", file=out)
    print(f"speed-up with the workspace: {_speedup(large):.2f}x on large arrays, "
          f"{_speedup(small):.2f}x on small ones; checksums "
          f"{'match' if same else 'DIFFER'}", file=out)
    ndws.destroy_all_workspaces_for_current_thread()
    return {"small": small, "large": large}


def _digits(seed: int):
    from ndws.datasets import load_digits
    x, y = load_digits()
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order] / 16.0, y[order]
    return x[:1400], y[:1400], x[1400:], y[1400:]


def _digits_conf(hidden: int, seed: int, mode: str = "ENABLED"):
    from ndws.nn import Adam, DenseLayer, MultiLayerConfiguration, OutputLayer
    return MultiLayerConfiguration(
        [DenseLayer(n_in=64, n_out=hidden, activation="relu"),
         DenseLayer(n_out=hidden, activation="relu"),
         OutputLayer(n_out=10, activation="softmax", loss_function="MCXENT")],
        seed=seed, updater=Adam(3e-3), training_workspace_mode=mode,
        inference_workspace_mode=mode)


def _lstm_conf(hidden: int, seed: int, mode: str = "ENABLED"):
    # each digit as a time series of its 8 rows (8 features each); the LSTM's state after the
    # last row classifies it
    from ndws.nn import (LSTM, Adam, InputType, LastTimeStep, MultiLayerConfiguration,
                         OutputLayer)
    return MultiLayerConfiguration(
        [LastTimeStep(LSTM(n_out=hidden, activation="tanh")),
         OutputLayer(n_out=10, activation="softmax", loss_function="MCXENT")],
        input_type=InputType.recurrent(8, 8), seed=seed, updater=Adam(1e-2),
        training_workspace_mode=mode, inference_workspace_mode=mode)


def _lenet_conf(hidden: int, seed: int, mode: str = "ENABLED"):
    # DL4J's LeNet scaled to the 8x8 digits: 3x3 convolutions with SAME padding (5x5 would
    # leave nothing of 8x8 after the first pooling), each followed by 2x2 max pooling, then a
    # dense layer of HIDDEN units
    from ndws.nn import (Adam, ConvolutionLayer, DenseLayer, InputType,
                         MultiLayerConfiguration, OutputLayer, SubsamplingLayer)
    return MultiLayerConfiguration(
        [ConvolutionLayer(kernel_size=3, n_out=16, activation="relu"),
         SubsamplingLayer(pooling_type="max", kernel_size=2, stride=2),
         ConvolutionLayer(kernel_size=3, n_out=32, activation="relu"),
         SubsamplingLayer(pooling_type="max", kernel_size=2, stride=2),
         DenseLayer(n_out=hidden, activation="relu"),
         OutputLayer(n_out=10, activation="softmax", loss_function="MCXENT")],
        input_type=InputType.convolutional(8, 8, 1), convolution_mode="same", seed=seed,
        updater=Adam(3e-3), training_workspace_mode=mode, inference_workspace_mode=mode)


def _resnet_conf(hidden: int, seed: int, mode: str = "ENABLED", image: tuple = (8, 8, 1)):
    # a residual network (a ComputationGraph) on each digit as a 1x8x8 image (bench_graph's
    # on 32x32x3 ones: `image` is (height, width, channels)): a 3x3 convolution stem, three
    # residual blocks of two 3x3 convolutions added to the block's input (ElementWiseVertex
    # ADD, then ReLU), global average pooling, softmax; HIDDEN / 8 channels (16 for the
    # default 128)
    from ndws.nn import (ActivationLayer, Adam, ComputationGraphConfiguration,
                         ConvolutionLayer, ElementWiseVertex, GlobalPoolingLayer, InputType,
                         OutputLayer)
    width = max(1, hidden // 8)
    b = (ComputationGraphConfiguration.builder(
        seed=seed, updater=Adam(1e-2), activation="relu", convolution_mode="Same",
        training_workspace_mode=mode, inference_workspace_mode=mode)
        .add_inputs("image")
        .add_layer("stem", ConvolutionLayer(n_out=width, kernel_size=(3, 3)), "image"))
    prev = "stem"
    for k in range(3):
        b.add_layer(f"block{k}_a", ConvolutionLayer(n_out=width, kernel_size=(3, 3)), prev)
        b.add_layer(f"block{k}_b", ConvolutionLayer(n_out=width, kernel_size=(3, 3),
                                                    activation="identity"), f"block{k}_a")
        b.add_vertex(f"block{k}_add", ElementWiseVertex("ADD"), f"block{k}_b", prev)
        b.add_layer(f"block{k}", ActivationLayer(activation="relu"), f"block{k}_add")
        prev = f"block{k}"
    b.add_layer("pool", GlobalPoolingLayer(pooling_type="AVG"), prev)
    b.add_layer("out", OutputLayer(n_out=10, activation="softmax", loss_function="MCXENT"),
                "pool")
    return b.set_outputs("out").set_input_types(InputType.convolutional(*image)).build()


def _network(conf):
    # the network a MODELS configuration describes: a graph or a stack of layers
    from ndws.nn import ComputationGraph, ComputationGraphConfiguration, MultiLayerNetwork
    net = (ComputationGraph if isinstance(conf, ComputationGraphConfiguration)
           else MultiLayerNetwork)(conf)
    net.init()
    return net


def _rows_as_images(x: np.ndarray) -> np.ndarray:
    # (n, 64) pixels -> (n, 1, 8, 8): NCHW images of one channel
    return np.ascontiguousarray(x.reshape(-1, 1, 8, 8))


def _rows_as_steps(x: np.ndarray) -> np.ndarray:
    # (n, 64) pixels -> (n, 8 features, 8 steps): step t is row t of the image
    return np.ascontiguousarray(x.reshape(-1, 8, 8).transpose(0, 2, 1))


#: the networks ``ndws train --model`` trains: name -> (what it is, its configuration from
#: (hidden, seed, mode), the digits' pixels as its input)
MODELS: dict[str, tuple[str, Callable, Callable]] = {
    "mlp": ("a 64-HIDDEN-HIDDEN-10 MLP (ReLU, softmax, Adam)", _digits_conf, lambda x: x),
    "lstm": ("an LSTM of HIDDEN units reading each digit row by row (8 steps of 8 features), "
             "its last step classified (softmax, Adam)", _lstm_conf, _rows_as_steps),
    "lenet": ("LeNet on each digit as a 1x8x8 image: two 3x3 convolutions (16, 32 channels, "
              "SAME, ReLU) each followed by 2x2 max pooling, a dense layer of HIDDEN units, "
              "softmax (Adam)", _lenet_conf, _rows_as_images),
    "resnet": ("a residual ComputationGraph on each digit as a 1x8x8 image: a 3x3 convolution "
               "stem and three residual blocks of two 3x3 convolutions of HIDDEN/8 channels "
               "(ElementWiseVertex ADD), global average pooling, softmax (Adam)",
               _resnet_conf, _rows_as_images),
}


def _accuracy(net, x, y) -> float:
    out = net.output(x)
    out = out[0] if isinstance(out, list) else out       # a graph's outputs are a list
    return float((out.numpy().argmax(axis=1) == y).mean())


class Interrupted(KeyboardInterrupt):
    """Ctrl-C inside `run_train` / `run_train_mpi`, saying where it stopped (`where`); still a
    KeyboardInterrupt for any caller."""

    def __init__(self, where: str) -> None:
        super().__init__(where)
        self.where = where


def _epoch_lines(epochs: int, out: Any) -> Any:
    from ndws.nn.history import write_above_bar
    from ndws.nn.listeners import TrainingListener

    class EpochLines(TrainingListener):
        # a line per epoch from the fit's History (its validation included), printed above
        # the progress bar
        def on_epoch_end(self, model: Any) -> None:
            h = model.history
            held = (f"held-out accuracy {h.validation_accuracy[-1]:.4f}"
                    if h.validation_accuracy else f"held-out loss {h.validation_scores[-1]:.4f}")
            write_above_bar(f"epoch {model.epoch:>3}/{epochs}: score {h.epoch_scores[-1]:.4f}, "
                            f"{held} ({h.epoch_seconds[-1]:.2f} s)", file=out)
    return EpochLines()


def _fit_early_stopping(net: Any, x: np.ndarray, y: np.ndarray, xt: np.ndarray,
                        yt: np.ndarray, batch_size: int, epochs: int, patience: int, seed: int,
                        progress: bool | None, out: Any) -> tuple:
    # train --early-stopping: at most `epochs` epochs, stopping after `patience` epochs
    # without a better held-out loss; returns (the best network, its History, the result)
    from ndws.data.iterators import ArrayDataSetIterator
    from ndws.nn import ComputationGraph
    from ndws.nn.earlystopping import (DataSetLossCalculator, EarlyStoppingConfiguration,
                                       EarlyStoppingGraphTrainer, EarlyStoppingTrainer,
                                       MaxEpochsTerminationCondition,
                                       ScoreImprovementEpochTerminationCondition)
    onehot = np.eye(10, dtype=np.float32)
    config = EarlyStoppingConfiguration(
        epoch_termination_conditions=[MaxEpochsTerminationCondition(epochs),
                                      ScoreImprovementEpochTerminationCondition(patience)],
        score_calculator=DataSetLossCalculator(
            ArrayDataSetIterator(xt, onehot[yt], batch_size=max(len(xt), 1))))
    train = ArrayDataSetIterator(x, onehot[y], batch_size=batch_size, shuffle=True, seed=seed)
    # a graph (--model resnet) has its own trainer, as in DL4J; both read the same DataSets
    trainer = (EarlyStoppingGraphTrainer if isinstance(net, ComputationGraph)
               else EarlyStoppingTrainer)
    result = trainer(config, net, train).fit(progress=progress)
    if result.error is not None:
        raise result.error
    print(f"\nearly stopping: {result.termination_details} after {result.total_epochs} "
          f"epochs; best epoch {result.best_model_epoch + 1} (held-out loss "
          f"{result.best_model_score:.4f})", file=out)
    return result.get_best_model(), result.history, result


def run_train(epochs: int = 15, batch_size: int = 32, hidden: int = 128, seed: int = 1,
              progress: bool | None = None, mode_epochs: int = 5, out=None,
              model: str = "mlp", early_stopping: int | None = None,
              tensorboard: str | None = None) -> dict:
    """Train `model` (a name of `MODELS`) on the digits, print the report and the
    workspace-mode table; returns the figures. `early_stopping`: stop after that many epochs
    without a better held-out loss and keep the best network (`epochs` at most);
    `tensorboard`: a folder for TensorBoard's event files. Ctrl-C raises `Interrupted` (a
    KeyboardInterrupt) saying where it stopped."""
    from ndws.data.dataset import DataSet
    if model not in MODELS:
        raise ValueError(f"model: expected one of {', '.join(MODELS)}, got {model!r:.40}")
    _, make, features = MODELS[model]
    out = out or sys.stdout
    x, y, xt, yt = _digits(seed)
    x, xt = features(x), features(xt)
    net = _network(make(hidden, seed))
    print(f"ndws train: digits (8x8, 10 classes), {len(x)} training / {len(xt)} held-out "
          f"examples, batch {batch_size}, {epochs} epochs, model {model}\n", file=out)
    print(net.summary(batch_size), file=out)
    print(file=out)
    per_epoch = -(-len(x) // batch_size)
    board = None
    if tensorboard is not None:
        from ndws.nn.listeners import TensorBoardListener
        # histograms once an epoch: the scalars every iteration
        board = TensorBoardListener(tensorboard, frequency=1, histograms_every=per_epoch)
    net.set_listeners(_epoch_lines(epochs, out), *([board] if board is not None else []))
    started = time.perf_counter()
    trained = net
    try:
        if early_stopping is not None:
            trained, history, _ = _fit_early_stopping(net, x, y, xt, yt, batch_size, epochs,
                                                      early_stopping, seed, progress, out)
        else:
            # one fit: one progress bar over every epoch, a shuffled order per epoch (from
            # the configuration's seed), the held-out data scored after each
            history = net.fit(x, y, batch_size=batch_size, epochs=epochs, progress=progress,
                              shuffle=True, validation_data=(xt, yt))
    except KeyboardInterrupt:
        done = net.iteration - net.epoch * per_epoch
        raise Interrupted(f"in epoch {net.epoch + 1}/{epochs}, after iteration {done} of its "
                          f"{per_epoch} ({net.iteration} in all)") from None
    finally:
        net.set_listeners()
        if board is not None:
            board.close()
    net = trained
    accuracy = (history.validation_accuracy[-1] if history.validation_accuracy
                else _accuracy(net, xt, yt))
    if board is not None:
        print(f"TensorBoard event files in {board.log_dir}: open them with "
              f"tensorboard --logdir {board.log_dir}", file=out)
    onehot = np.eye(10, dtype=np.float32)[yt]
    ev = net.evaluate([DataSet(xt[i:i + 100], onehot[i:i + 100]) for i in range(0, len(xt), 100)])
    print(f"\ntrained in {time.perf_counter() - started:.1f} s\n", file=out)
    print(ev.stats(), file=out)
    try:
        modes = _compare_modes(x, y, xt, yt, batch_size, hidden, seed, mode_epochs, make)
    except KeyboardInterrupt:
        raise Interrupted("while comparing the workspace modes, after the training") from None
    print(f"\nWorkspace modes, the same network and seed, {mode_epochs} epochs each:", file=out)
    print(f"{'mode':<10}{'time/iteration':>16}{'peak workspace':>17}{'heap allocs/iter':>18}"
          f"{'held-out acc.':>15}", file=out)
    for name, r in modes.items():
        print(f"{name:<10}{r['us_per_iteration']:>13.1f} us{r['workspace_bytes']:>15,} B"
              f"{r['allocations_per_iteration']:>18.2f}{r['accuracy']:>15.4f}", file=out)
    print("time/iteration: a training step's median; peak workspace: the bytes its workspaces "
          "hold; heap allocs/iter: array allocations from the heap per step once warm.",
          file=out)
    print("Every mode trains the same parameters: keep ENABLED (the default: SEPARATE's small "
          "memory for training, SINGLE for inference); SINGLE if memory is plentiful.", file=out)
    ndws.destroy_all_workspaces_for_current_thread()
    return {"accuracy": accuracy, "history": history, "evaluation": ev, "modes": modes}


def run_train_mpi(epochs: int = 15, batch_size: int = 32, hidden: int = 128, seed: int = 1,
                  progress: bool | None = None, out=None) -> dict:
    """`run_train` data-parallel over MPI (run under ``mpiexec -n N``): every rank trains on
    its shard of the digits, batches of `batch_size` per rank; rank 0 prints the report.
    Returns the figures (on every rank)."""
    import os

    from ndws.data import ArrayDataSetIterator
    from ndws.data.dataset import DataSet
    from ndws.nn import MultiLayerNetwork
    from ndws.nn.listeners import TrainingListener
    from ndws.parallel.mpi import MPITrainer

    class CommTime(TrainingListener):
        # rank 0's milliseconds in MPI calls over an epoch (the trainer sets last_comm_time
        # before the listeners run)
        ms = 0.0

        def iteration_done(self, model, iteration, epoch):
            self.ms += model.last_comm_time

    x, y, xt, yt = _digits(seed)
    net = MultiLayerNetwork(_digits_conf(hidden, seed))
    net.init()
    comm_time = CommTime()
    net.set_listeners(comm_time)
    with MPITrainer(net) as trainer:
        rank, size = trainer.rank, trainer.size
        devnull = open(os.devnull, "w") if out is None and rank else None   # rank 0 reports
        out = out or devnull or sys.stdout
        from mpi4py import MPI
        library = " ".join(MPI.Get_library_version().splitlines()[0].split())
        ranks = f"{size} rank{'s' if size > 1 else ''}"
        print(f"ndws train --mpi: {ranks} ({library}), {trainer.kernel_threads} kernel "
              f"thread(s) each; digits (8x8, 10 classes), {len(x)} training / {len(xt)} "
              f"held-out examples, batch {batch_size} per rank ({batch_size * size} per "
              f"step), {epochs} epochs\n", file=out)
        print(net.summary(batch_size), file=out)
        print(file=out)
        shard = ArrayDataSetIterator(x, y, batch_size, shuffle=True, seed=seed).shard(rank, size)
        started = time.perf_counter()
        accuracy = 0.0
        for e in range(epochs):
            comm_time.ms = 0.0
            try:
                history = trainer.fit(shard, progress=progress)
            except KeyboardInterrupt:
                raise Interrupted(f"in epoch {e + 1}/{epochs}") from None
            seconds = history.epoch_seconds[-1]
            if rank == 0:                      # every rank holds the same parameters
                accuracy = _accuracy(net, xt, yt)
            print(f"epoch {e + 1:>3}/{epochs}: score {history.epoch_scores[-1]:.4f}, held-out "
                  f"accuracy {accuracy:.4f} ({seconds:.2f} s, "
                  f"{history.samples_per_second[-1]:,.0f} samples/s, "
                  f"{comm_time.ms / 1000 / seconds * 100:.0f}% communicating)", file=out)
        print(f"\ntrained in {time.perf_counter() - started:.1f} s\n", file=out)
        ev = None
        if rank == 0:
            onehot = np.eye(10, dtype=np.float32)[yt]
            ev = net.evaluate([DataSet(xt[i:i + 100], onehot[i:i + 100])
                               for i in range(0, len(xt), 100)])
            print(ev.stats(), file=out)
    net.set_listeners()
    if devnull is not None:
        devnull.close()
    ndws.destroy_all_workspaces_for_current_thread()
    return {"accuracy": accuracy, "evaluation": ev, "rank": rank, "size": size}


def _compare_modes(x, y, xt, yt, batch_size, hidden, seed, epochs, make=_digits_conf) -> dict:
    from ndws._memory import allocation_counters
    from ndws.data.dataset import DataSet
    batches = [DataSet(x[i:i + batch_size], y[i:i + batch_size])
               for i in range(0, len(x), batch_size)]
    results = {}
    for mode in ("NONE", "SINGLE", "SEPARATE", "ENABLED"):
        ndws.destroy_all_workspaces_for_current_thread()
        net = _network(make(hidden, seed, mode))
        net.fit(batches, progress=False)                # warm-up: the workspaces learn
        times = []
        before = allocation_counters()["allocations"]
        for _ in range(epochs - 1):
            for ds in batches:
                t0 = time.perf_counter()
                net.fit(ds, progress=False)
                times.append(time.perf_counter() - t0)
        allocs = allocation_counters()["allocations"] - before
        peak = sum(ws.current_size for ws in
                   ndws.get_workspace_manager().get_all_workspaces_for_current_thread())
        results[mode] = {"us_per_iteration": statistics.median(times) * 1e6,
                         "workspace_bytes": peak,
                         "allocations_per_iteration": allocs / max(len(times), 1),
                         "accuracy": _accuracy(net, xt, yt)}
    return results


def _int_arg(low: int, high: int, why: str = "") -> Callable[[str], int]:
    # an int option in [low, high]: a bad or huge value is argparse's usage error (exit 2),
    # never a traceback from deep inside (a 2**31-unit layer, a 4 TiB batch)
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be in [{low}, {high}]{why}, got {value}")
        return value
    parse.__name__ = "int"          # argparse's messages name the type
    return parse


class _Help(argparse.HelpFormatter):
    # each option's default after its description, unless it has none to show (a switch)
    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        shown = not any(action.default is v for v in (None, False, argparse.SUPPRESS))
        if action.option_strings and shown and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ndws", description="ND-arrays in memory workspaces, with a DL4J-style network "
        "stack. Also runs as `python -m ndws`.", epilog="`ndws COMMAND --help` describes a "
        "command's options; docs/networks.md the networks it trains.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    train = sub.add_parser(
        "train", formatter_class=_Help, help="the main job: train a network on the bundled "
        "digits, evaluate it, and compare the workspace modes",
        description="Train a network on the bundled 8x8 digits with a progress bar, a line per "
        "epoch (score, held-out accuracy) and the final evaluation, then compare the workspace "
        "modes on the same network (time per iteration, workspace bytes, heap allocations, "
        "accuracy). --model picks it: " + "; ".join(f"{name}: {what}" for name, (what, _, _)
                                                    in MODELS.items())
        + ". Ctrl-C stops it (exit status 130).")
    train.add_argument("--model", choices=list(MODELS), default="mlp",
                       help="the network to train")
    train.add_argument("--epochs", type=_int_arg(1, 100_000), default=15,
                       help="passes over the 1,400 training examples")
    train.add_argument("--batch-size", type=_int_arg(1, 1400, " (the training examples)"),
                       default=32, help="examples per training step (per process with --mpi)")
    train.add_argument("--hidden", type=_int_arg(1, 4096, " (4096 already makes 17M "
                                                          "weights)"),
                       default=128, help="units in each of the two hidden layers (the LSTM's "
                                         "units, LeNet's dense layer; resnet: 8 per channel)")
    train.add_argument("--seed", type=_int_arg(0, 2**63 - 1), default=1,
                       help="seeds the weights, the split and the order of the examples")
    train.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                       help="show a progress bar (default: on a terminal or in a notebook)")
    train.add_argument("--early-stopping", type=_int_arg(0, 100_000), default=None,
                       metavar="PATIENCE",
                       help="stop once the held-out loss has not improved for PATIENCE "
                            "epochs (at most --epochs) and keep the best network "
                            "(docs/training-tools.md)")
    train.add_argument("--tensorboard", default=None, metavar="DIR",
                       help="write TensorBoard event files to DIR (score, learning rate, "
                            "samples/s, each workspace's memory, histograms once an epoch; "
                            "needs pip install 'ndws[tensorboard]')")
    train.add_argument("--mpi", action="store_true",
                       help="train data-parallel on the processes of `mpiexec -n N ndws train "
                            "--mpi` (needs pip install 'ndws[mpi]'; docs/distributed.md)")
    demo = sub.add_parser(
        "demo", formatter_class=_Help, help="time cyclic workloads with and without a "
        "workspace: allocations, page faults, time",
        description="Run two cyclic workloads with a workspace and without: a small forward "
        "pass (every allocation goes, no time is saved: malloc recycles small blocks) and "
        "standardising a large batch (each temporary is mapped fresh from the kernel without "
        "a workspace: that costs time). Prints time, heap allocations and page faults per "
        "iteration, and the workspace statistics.")
    demo.add_argument("--iterations", type=_int_arg(1, 10_000_000), default=1000,
                      help="iterations of the small workload")
    demo.add_argument("--batch", type=_int_arg(1, 65536), default=64,
                      help="rows of the small workload's batch (256 features)")
    demo.add_argument("--large-iterations", type=_int_arg(1, 100_000), default=20,
                      help="iterations of the large workload")
    demo.add_argument("--large-rows", type=_int_arg(1, 65536), default=9216,
                      help="rows of the large workload's batch (1,024 features: 4 KiB a row)")
    demo.add_argument("--seed", type=_int_arg(0, 2**63 - 1), default=0,
                      help="seeds the data and weights")
    sub.add_parser("config", help="show versions, build options and threads",
                   description="Show the versions, the build options (OpenMP, the GEMM "
                   "kernels for this CPU) and the threads.")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "config":
            ndws.show_config()
        elif args.command == "train" and args.mpi:
            from ndws.parallel.mpi import INSTALL_HINT, mpi_available
            if args.model != "mlp":
                parser.error("--mpi trains the MLP only (--model mlp)")
            if args.early_stopping is not None or args.tensorboard is not None:
                parser.error("--early-stopping and --tensorboard train on one process "
                             "(not with --mpi)")
            if not mpi_available():
                parser.error(f"--mpi needs mpi4py and an MPI library: {INSTALL_HINT}")
            run_train_mpi(args.epochs, args.batch_size, args.hidden, args.seed, args.progress)
        elif args.command == "train":
            if args.tensorboard is not None:
                from ndws.nn._tensorboard import _tensorboardx
                from ndws._fileio import output_directory
                try:
                    _tensorboardx()
                    output_directory("--tensorboard", args.tensorboard)
                except (ImportError, OSError, ValueError) as exc:
                    parser.error(str(exc) if str(exc).startswith("--") else
                                 f"--tensorboard: {exc}")
            run_train(args.epochs, args.batch_size, args.hidden, args.seed, args.progress,
                      model=args.model, early_stopping=args.early_stopping,
                      tensorboard=args.tensorboard)
        else:
            run_demo(args.iterations, args.batch, seed=args.seed, large_rows=args.large_rows,
                     large_iterations=args.large_iterations)
    except KeyboardInterrupt as exc:
        where = f" {exc.where}" if isinstance(exc, Interrupted) else ""
        print(f"\nndws {args.command}: interrupted (Ctrl-C){where}; nothing was saved",
              file=sys.stderr)
        return 130                     # 128 + SIGINT, as a shell reports it
    return 0


if __name__ == "__main__":
    sys.exit(main())
