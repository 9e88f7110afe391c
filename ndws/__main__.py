"""Command line: ``ndws train`` (the main job), ``ndws demo`` and ``ndws config`` (also as
``python -m ndws ...``).

``train`` trains a multi-layer perceptron on the bundled digits with a progress bar, prints each
epoch's score and held-out accuracy and the final evaluation, then compares the workspace modes
on the same network. ``train --mpi``, run under ``mpiexec -n N``, trains the same network
data-parallel on the N processes (`ndws.parallel.MPITrainer`, docs/distributed.md).

The demo runs the same cyclic workload (a small two-layer forward pass with a softmax and a
loss, as in a training or inference loop) with a workspace and without, and prints the
workspace statistics table, heap allocations of array data per iteration and time per
iteration for both.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Callable, Sequence

import numpy as np

import ndws

__all__ = ["main", "run_demo", "run_train", "run_train_mpi"]


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


def _run(step: Callable[[], float], iterations: int, ws: ndws.Workspace | None
         ) -> tuple[list[float], int, int, float]:
    """Per-iteration times, allocations in the first iteration and in the rest, checksum."""
    mm = ndws.get_memory_manager()
    times = []
    checksum = 0.0
    first_allocs = 0
    before = mm.allocation_statistics()["allocations"]
    with mm.gc_paused():
        for i in range(iterations):
            t0 = time.perf_counter()
            if ws is None:
                checksum += step()
            else:
                with ws:
                    checksum += step()
            times.append(time.perf_counter() - t0)
            if i == 0:
                first_allocs = mm.allocation_statistics()["allocations"] - before
    total = mm.allocation_statistics()["allocations"] - before
    return times, first_allocs, total - first_allocs, checksum


def run_demo(iterations: int = 1000, batch: int = 64, features: int = 256, hidden: int = 128,
             classes: int = 10, seed: int = 0, out=None) -> dict:
    """Run the demo and print its report; returns the measured figures."""
    out = out or sys.stdout
    step = _workload(batch, features, hidden, classes, seed)
    conf = ndws.WorkspaceConfiguration(policy_learning=ndws.LearningPolicy.FIRST_LOOP)
    ws = ndws.workspace("DEMO_LOOP", conf)
    step()  # warm NumPy's caches so neither run pays for first use
    results = {}
    for name, target in (("without workspace", None), ("with workspace", ws)):
        times, first, rest, checksum = _run(step, iterations, target)
        results[name] = {
            "median_us": statistics.median(times) * 1e6,
            "allocations_first_iteration": first,
            "allocations_per_iteration_after_first": rest / max(iterations - 1, 1),
            "checksum": checksum,
        }
    print(f"ndws demo: {iterations} iterations of a {features}-{hidden}-{classes} forward pass "
          f"and softmax cross-entropy, batch {batch}, float32\n", file=out)
    ndws.get_workspace_manager().print_allocation_statistics_for_current_thread(file=out)
    print(file=out)
    print(f"{'':<20} {'time/iteration':>16} {'heap allocations of array data':>34}", file=out)
    print(f"{'':<20} {'(median)':>16} {'first iteration':>17} {'per later one':>16}", file=out)
    for name, r in results.items():
        print(f"{name:<20} {r['median_us']:>13.1f} us {r['allocations_first_iteration']:>17d} "
              f"{r['allocations_per_iteration_after_first']:>16.2f}", file=out)
    same = np.isclose(results["with workspace"]["checksum"],
                      results["without workspace"]["checksum"], rtol=1e-6)
    ratio = results["without workspace"]["median_us"] / results["with workspace"]["median_us"]
    print(f"\nspeed-up with the workspace: {ratio:.2f}x; "
          f"loss checksums {'match' if same else 'DIFFER'} "
          f"({results['with workspace']['checksum']:.6f})", file=out)
    ndws.destroy_all_workspaces_for_current_thread()
    return results


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


def _accuracy(net, x, y) -> float:
    return float((net.output(x).numpy().argmax(axis=1) == y).mean())


def run_train(epochs: int = 15, batch_size: int = 32, hidden: int = 128, seed: int = 1,
              progress: bool | None = None, mode_epochs: int = 5, out=None) -> dict:
    """Train on the digits, print the report and the workspace-mode table; returns the
    figures."""
    from ndws.data.dataset import DataSet
    from ndws.nn import MultiLayerNetwork
    out = out or sys.stdout
    x, y, xt, yt = _digits(seed)
    net = MultiLayerNetwork(_digits_conf(hidden, seed))
    net.init()
    print(f"ndws train: digits (8x8, 10 classes), {len(x)} training / {len(xt)} held-out "
          f"examples, batch {batch_size}, {epochs} epochs\n", file=out)
    print(net.summary(batch_size), file=out)
    print(file=out)
    started = time.perf_counter()
    accuracy = 0.0
    for e in range(epochs):
        t0 = time.perf_counter()
        history = net.fit(x, y, batch_size=batch_size, progress=progress)
        accuracy = _accuracy(net, xt, yt)
        print(f"epoch {e + 1:>3}/{epochs}: score {history.epoch_scores[-1]:.4f}, held-out "
              f"accuracy {accuracy:.4f} ({time.perf_counter() - t0:.2f} s)", file=out)
    onehot = np.eye(10, dtype=np.float32)[yt]
    ev = net.evaluate([DataSet(xt[i:i + 100], onehot[i:i + 100]) for i in range(0, len(xt), 100)])
    print(f"\ntrained in {time.perf_counter() - started:.1f} s\n", file=out)
    print(ev.stats(), file=out)
    modes = _compare_modes(x, y, xt, yt, batch_size, hidden, seed, mode_epochs)
    print(f"\nWorkspace modes, the same network and seed, {mode_epochs} epochs each:", file=out)
    print(f"{'mode':<10}{'time/iteration':>16}{'peak workspace':>17}{'heap allocs/iter':>18}"
          f"{'held-out acc.':>15}", file=out)
    for name, r in modes.items():
        print(f"{name:<10}{r['us_per_iteration']:>13.1f} us{r['workspace_bytes']:>15,} B"
              f"{r['allocations_per_iteration']:>18.2f}{r['accuracy']:>15.4f}", file=out)
    ndws.destroy_all_workspaces_for_current_thread()
    return {"accuracy": accuracy, "evaluation": ev, "modes": modes}


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
            history = trainer.fit(shard, progress=progress)
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


def _compare_modes(x, y, xt, yt, batch_size, hidden, seed, epochs) -> dict:
    from ndws._memory import allocation_counters
    from ndws.data.dataset import DataSet
    from ndws.nn import MultiLayerNetwork
    batches = [DataSet(x[i:i + batch_size], y[i:i + batch_size])
               for i in range(0, len(x), batch_size)]
    results = {}
    for mode in ("NONE", "SINGLE", "SEPARATE", "ENABLED"):
        ndws.destroy_all_workspaces_for_current_thread()
        net = MultiLayerNetwork(_digits_conf(hidden, seed, mode))
        net.init()
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ndws", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a cyclic workload with and without a workspace")
    demo.add_argument("--iterations", type=int, default=1000)
    demo.add_argument("--batch", type=int, default=64)
    demo.add_argument("--seed", type=int, default=0)
    train = sub.add_parser("train", help="train an MLP on the bundled digits and compare the "
                                         "workspace modes")
    train.add_argument("--epochs", type=int, default=15)
    train.add_argument("--batch-size", type=int, default=32)
    train.add_argument("--hidden", type=int, default=128)
    train.add_argument("--seed", type=int, default=1)
    train.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                       help="show a progress bar (default: on a terminal)")
    train.add_argument("--mpi", action="store_true",
                       help="train data-parallel on the processes of `mpiexec -n N ndws train "
                            "--mpi` (batch size per process; needs pip install 'ndws[mpi]')")
    sub.add_parser("config", help="show versions, build options and threads")
    args = parser.parse_args(argv)
    if args.command == "config":
        ndws.show_config()
        return 0
    if args.command == "train":
        for name in ("epochs", "batch_size", "hidden"):
            if getattr(args, name) < 1:
                parser.error(f"--{name.replace('_', '-')} must be at least 1")
        if not 0 <= args.seed < 2**63:
            parser.error("--seed must be in [0, 2**63)")
        if args.mpi:
            from ndws.parallel.mpi import mpi_available, INSTALL_HINT
            if not mpi_available():
                parser.error(f"--mpi needs mpi4py and an MPI library: {INSTALL_HINT}")
            run_train_mpi(args.epochs, args.batch_size, args.hidden, args.seed, args.progress)
            return 0
        run_train(args.epochs, args.batch_size, args.hidden, args.seed, args.progress)
        return 0
    if args.iterations < 1:
        parser.error("--iterations must be at least 1")
    if args.batch < 1:
        parser.error("--batch must be at least 1")
    run_demo(args.iterations, args.batch, seed=args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
