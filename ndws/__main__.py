"""Command line: ``python -m ndws demo`` (or ``ndws demo``) and ``ndws config``.

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

__all__ = ["main", "run_demo"]


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ndws", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a cyclic workload with and without a workspace")
    demo.add_argument("--iterations", type=int, default=1000)
    demo.add_argument("--batch", type=int, default=64)
    demo.add_argument("--seed", type=int, default=0)
    sub.add_parser("config", help="show versions, build options and threads")
    args = parser.parse_args(argv)
    if args.command == "config":
        ndws.show_config()
        return 0
    if args.iterations < 1:
        parser.error("--iterations must be at least 1")
    if args.batch < 1:
        parser.error("--batch must be at least 1")
    run_demo(args.iterations, args.batch, seed=args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
