#!/usr/bin/env python
"""Recurrent networks: ndws against PyTorch eager and against the GEMM floor (the same GEMMs
alone, on ndws' GEMM), 1 and 2 threads, quiet and with a busy neighbour: every row of
docs/recurrent.md's benchmark table from one run.

Rows:

* char model, one fit() segment: DL4J's character model (two LSTM layers of 200, tanh, an
  RnnOutputLayer softmax over 77 characters, MCXENT, Adam), batch 32, truncated BPTT of 50:
  one `fit` of a 50-step batch is one segment (forward, backward, update). PyTorch: ``nn.LSTM``
  of two layers + ``nn.Linear`` + cross-entropy (summed over the steps, DL4J's score), Adam,
  eager. Floor: the segment's products (each layer's input projection, 50 recurrent products
  forward and 50 backward with the recurrent weights packed once, dW, dRW, the second layer's
  input error; the output layer's three). Targets: faster than PyTorch, <= 1.25x the floor.
* LSTM 512 forward and forward+backward: a single LSTM of 512 at batch 64 over 100 steps
  (`lstm_forward` / `lstm_backward`, float32, no input gradient, as PyTorch computes none for
  an input that does not require it) against ``torch.nn.LSTM`` with the same weights (gate
  blocks permuted: DL4J's g, f, o, i are PyTorch's i, f, g, o in another order; the warm-up
  checks both give the same outputs and dW) and the floor (the input projection, one recurrent
  product per step; backward: the recurrent errors, dW, dRW, db). Target >= 1.0x PyTorch.
* rnn_time_step: the char model, batch 1, one step with the state carried, against PyTorch's
  two-layer LSTM + Linear + softmax with carried state under ``no_grad``. Target: ndws' latency
  <= 0.5x PyTorch's.
* Modes: heap allocations per char-model fit() segment at a fixed length in SINGLE, SEPARATE
  and ENABLED (target 0), the bytes of the thread's workspaces after the fits and the memory
  report's total for the mode.

ndws runs the kernels the way a network runs them (workspace cycles, DL4J's RNN loop
workspace configuration). Each thread count runs in a fresh interpreter with OMP_NUM_THREADS /
MKL_NUM_THREADS set and ``torch.set_num_threads`` equal; contenders take turns in rounds, each
after the previous one's library threads stopped spinning (bench_gemm's `settle`), so a noisy
phase of the machine slows all alike; glibc's malloc keeps what it frees (bench_gemm's
`keep_freed_memory`: PyTorch at its best, no page faults; the page faults per call are
printed for every row); figures are medians (p10-p90 of the samples) and every
ratio compares numbers from the same run.

Usage::

    python bench/bench_rnn.py            # 1 and 2 threads, quiet
    python bench/bench_rnn.py --noisy    # also with a neighbour busy 4 ms / idle 4 ms on a core
    python bench/bench_rnn.py --quick    # fewer samples, noisier

A miss is printed, never hidden (the exit status is 0).
"""
from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for p in (ROOT, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)

from bench_gemm import (banner, harness_parser, minor_faults, run_role, run_worker,  # noqa: E402
                        sweep, timed, worker_threads)

B, N_IN, N, T = 64, 512, 512, 100
TARGET = 1.0
# DL4J's character model (docs/recurrent.md)
CB, CV, CN, CT = 32, 77, 200, 50
FLOOR_TARGET = 1.25
STEP_TARGET = 0.5
MODES = ("SINGLE", "SEPARATE", "ENABLED")
PERM = [2, 1, 3, 0]          # DL4J's blocks (g, f, o, i) taken from PyTorch's (i, f, g, o)


def char_net(mode="ENABLED"):
    """DL4J's character model as a ndws network (the workspace mode for training and
    inference)."""
    from ndws.nn import (LSTM, Adam, InputType, MultiLayerConfiguration, MultiLayerNetwork,
                         RnnOutputLayer)
    conf = MultiLayerConfiguration(
        [LSTM(n_out=CN, activation="tanh"), LSTM(n_out=CN, activation="tanh"),
         RnnOutputLayer(n_out=CV, activation="softmax", loss_function="mcxent")],
        input_type=InputType.recurrent(CV), seed=0, updater=Adam(1e-3),
        backprop_type="TRUNCATED_BPTT", tbptt_fwd_length=CT, tbptt_back_length=CT,
        training_workspace_mode=mode, inference_workspace_mode=mode)
    net = MultiLayerNetwork(conf)
    net.init()
    return net


def char_batch(rng):
    """One batch of one-hot characters (batch, 77, 50) and its next-character labels."""
    import numpy as np
    ids = rng.integers(0, CV, (CB, CT + 1))
    eye = np.eye(CV, dtype=np.float32)
    x = np.ascontiguousarray(eye[ids[:, :-1]].transpose(0, 2, 1))
    y = np.ascontiguousarray(eye[ids[:, 1:]].transpose(0, 2, 1))
    return ids, x, y


def char_rows(threads, torch, rng):
    """The char model's rows: one fit() segment and rnn_time_step at batch 1."""
    import numpy as np

    import ndws
    import ndws._linalg as la
    from ndws.data.dataset import DataSet
    f32 = np.float32
    ids, x, y = char_batch(rng)
    ds = DataSet(x, y)
    net = char_net()
    rows = {"char fit segment": {"ndws": lambda: net.fit(ds)}}

    # the floor: the segment's products on ndws' GEMM, recurrent weights packed once per pass
    def mats(*shape):
        return ndws.asarray((rng.standard_normal(shape) * 0.01).astype(f32))
    TB, K = CT * CB, 4 * CN
    xin = [mats(TB, CV), mats(TB, CN)]
    Wl = [mats(CV, K), mats(CN, K)]
    RWl = [(rng.standard_normal((CN, K)) * 0.01).astype(f32) for _ in range(2)]
    proj = ndws.empty((TB, K), dtype=f32)
    hs = (rng.standard_normal((CT, CB, CN)) * 0.1).astype(f32)
    S = np.empty((CB, K), f32)
    R = np.empty((CB, CN), f32)
    dz_np = (rng.standard_normal((CT, CB, K)) * 0.01).astype(f32)
    dz = ndws.asarray(dz_np.reshape(TB, K))
    dWl = [ndws.empty((CV, K), dtype=f32), ndws.empty((CN, K), dtype=f32)]
    dRW = ndws.empty((CN, K), dtype=f32)
    dX1 = ndws.empty((TB, CN), dtype=f32)
    hs_n = ndws.asarray(hs.reshape(TB, CN))
    Wo, zo, dzo = mats(CN, CV), ndws.empty((TB, CV), dtype=f32), mats(TB, CV)
    dWo, dho = ndws.empty((CN, CV), dtype=f32), ndws.empty((TB, CN), dtype=f32)

    def floor_segment():
        for layer in range(2):
            ndws.gemm(xin[layer], Wl[layer], out=proj)
            packed = la._pack_b(RWl[layer])
            for t in range(CT):
                la._gemm_packed_b(hs[t], packed, K, 0.0, S, threads)
        ndws.gemm(hs_n, Wo, out=zo)
        ndws.gemm(hs_n, dzo, trans_a=True, out=dWo)
        ndws.gemm(dzo, Wo, trans_b=True, out=dho)
        for layer in (1, 0):
            packed = la._pack_b(RWl[layer].T)
            for t in range(CT):
                la._gemm_packed_b(dz_np[t], packed, CN, 0.0, R, threads)
            ndws.gemm(xin[layer], dz, trans_a=True, out=dWl[layer])
            ndws.gemm(hs_n, dz, trans_a=True, out=dRW)
            if layer == 1:
                ndws.gemm(dz, Wl[1], trans_b=True, out=dX1)

    rows["char fit segment"]["GEMM floor"] = floor_segment
    # rnn_time_step: one character at batch 1, the state carried from call to call
    x1 = x[:1, :, 0].copy()
    net.rnn_clear_previous_state()
    rows["rnn_time_step"] = {"ndws": lambda: net.rnn_time_step(x1)}
    if torch is not None:
        torch.manual_seed(0)
        lstm = torch.nn.LSTM(CV, CN, num_layers=2)
        dense = torch.nn.Linear(CN, CV)
        opt = torch.optim.Adam(list(lstm.parameters()) + list(dense.parameters()), lr=1e-3)
        loss_fn = torch.nn.CrossEntropyLoss(reduction="sum")
        xt = torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1)))    # (T, B, 77)
        yt = torch.from_numpy(ids[:, 1:].T.reshape(-1).copy())

        def torch_segment():
            opt.zero_grad(set_to_none=True)
            out, _ = lstm(xt)
            loss = loss_fn(dense(out).reshape(TB, CV), yt) / CB       # DL4J's score
            loss.backward()
            opt.step()

        rows["char fit segment"]["torch"] = torch_segment
        x1t = torch.from_numpy(x1[None])                                 # (1, 1, 77)
        state = [None]

        def torch_step():
            with torch.no_grad():
                out, state[0] = lstm(x1t, state[0])
                torch.softmax(dense(out[0]), dim=1)

        rows["rnn_time_step"]["torch"] = torch_step
    return rows


def modes_info(rng, fits):
    """Per workspace mode: heap allocations per fit() segment after the warm-up, the thread's
    workspace bytes after the fits, the memory report's total."""
    import ndws
    from ndws.data.dataset import DataSet
    _, x, y = char_batch(rng)
    ds = DataSet(x, y)
    mm = ndws.get_memory_manager()
    out = {}
    for mode in MODES:
        ndws.destroy_all_workspaces_for_current_thread()
        net = char_net(mode)
        for _ in range(3):
            net.fit(ds)
        before = mm.allocation_statistics()["allocations"]
        for _ in range(fits):
            net.fit(ds)
        allocs = (mm.allocation_statistics()["allocations"] - before) / fits
        ws_bytes = sum(w.current_size for w in
                       ndws.get_workspace_manager().get_all_workspaces_for_current_thread())
        report = net.memory_report(CB, sequence_length=CT)
        out[mode] = {"allocs": allocs, "workspace_bytes": ws_bytes,
                     "report_bytes": report.total_bytes(getattr(ndws.WorkspaceMode, mode))}
    ndws.destroy_all_workspaces_for_current_thread()
    return out


def timed_rows(rows, quick, rounds, per_round=2):
    """timed() of each row, with the page faults per call of each contender."""
    per_round = 1 if quick else per_round
    result = {}
    for row, contenders in rows.items():
        inner = 50 if row == "rnn_time_step" else 1
        result[row] = timed(contenders, rounds, per_round, inner=inner)
        for name, fn in contenders.items():
            f0 = minor_faults()
            for _ in range(3):
                fn()
            result[row][name]["faults"] = (None if f0 is None else
                                           (minor_faults() - f0) / 3)
    return result


def worker(threads, quick):
    import numpy as np

    import ndws
    import ndws._linalg as la
    import ndws.nn.functional as F
    torch = worker_threads(threads)
    rng = np.random.default_rng(0)
    f32 = np.float32
    # the char model's rows: 10 rounds of 2 samples (a segment takes 60 ms)
    result = timed_rows(char_rows(threads, torch, rng), quick, 5 if quick else 10)
    # weights: PyTorch's LSTM when there is one (its initialisation), permuted into DL4J's
    if torch is not None:
        torch.manual_seed(0)
        lstm = torch.nn.LSTM(N_IN, N)
        wih = lstm.weight_ih_l0.detach().numpy()
        whh = lstm.weight_hh_l0.detach().numpy()
        bb = (lstm.bias_ih_l0 + lstm.bias_hh_l0).detach().numpy()
        W = np.ascontiguousarray(np.concatenate([wih[p * N:(p + 1) * N].T for p in PERM], 1))
        RW = np.ascontiguousarray(np.concatenate([whh[p * N:(p + 1) * N].T for p in PERM], 1))
        b = np.concatenate([bb[p * N:(p + 1) * N] for p in PERM])
    else:
        W = (rng.standard_normal((N_IN, 4 * N)) * 0.04).astype(f32)
        RW = (rng.standard_normal((N, 4 * N)) * 0.04).astype(f32)
        b = np.zeros(4 * N, f32)
    x_tm = rng.standard_normal((T, B, N_IN)).astype(f32)      # time-major, as PyTorch's
    x = x_tm.transpose(1, 2, 0)                                 # its NCW view: no copy
    gy = rng.standard_normal((T, B, N)).astype(f32)
    gy_ncw = gy.transpose(1, 2, 0)
    h = np.zeros((B, N), f32)
    c = np.zeros((B, N), f32)
    dW, dRW, db = np.empty_like(W), np.empty_like(RW), np.empty_like(b)

    conf = ndws.WorkspaceConfiguration(policy_spill="REALLOCATE")
    work = ndws.workspace("WS_LAYER", conf)
    loop = ndws.workspace("WS_RNN_LOOP_WORKING_MEM", ndws.WorkspaceConfiguration(
        overallocation_limit=0.05, policy_spill="REALLOCATE"))
    cache_shape = F.lstm_cache_shape(T, B, N, activation="tanh")

    def ndws_forward():
        with work:
            y = ndws.empty((T, B, N), dtype=f32).T.transpose(1, 0, 2)   # NCW over time-major
            F.lstm_forward(x, W, RW, b, activation="tanh", out=y, h_out=h, c_out=c,
                           loop_workspace=loop)

    def ndws_train():
        with work:
            y = ndws.empty((T, B, N), dtype=f32).T.transpose(1, 0, 2)
            cache = ndws.empty(cache_shape, dtype=f32)
            F.lstm_forward(x, W, RW, b, activation="tanh", out=y, h_out=h, c_out=c,
                           cache=cache, loop_workspace=loop)
            F.lstm_backward(x, W, RW, cache, gy_ncw, activation="tanh", need_input=False,
                            grad_W=dW, grad_RW=dRW, grad_b=db, loop_workspace=loop)

    # the GEMM floor: the kernel's products alone, on ndws' GEMM (the recurrent ones with the
    # weights packed once per call, as the kernel does)
    A = ndws.asarray(x_tm.reshape(T * B, N_IN))
    Wn = ndws.asarray(W)
    proj = ndws.empty((T * B, 4 * N), dtype=f32)
    hs = rng.standard_normal((T, B, N)).astype(f32)
    S = np.empty((B, 4 * N), dtype=f32)
    dz_np = (rng.standard_normal((T * B, 4 * N)) * 0.01).astype(f32)
    dz = ndws.asarray(dz_np)
    R = np.empty((B, N), dtype=f32)
    dWn, dRWn = ndws.empty((N_IN, 4 * N), dtype=f32), ndws.empty((N, 4 * N), dtype=f32)
    ones = ndws.ones((1, T * B), dtype=f32)
    dbn = ndws.empty((1, 4 * N), dtype=f32)
    hs_n = ndws.asarray(hs.reshape(T * B, N))

    def floor_forward():
        ndws.gemm(A, Wn, out=proj)
        packed = la._pack_b(RW)
        for t in range(T):
            la._gemm_packed_b(hs[t], packed, 4 * N, 0.0, S, threads)

    def floor_backward():
        packed = la._pack_b(RW.T)
        for t in range(T):
            la._gemm_packed_b(dz_np[t * B:(t + 1) * B], packed, N, 0.0, R, threads)
        ndws.gemm(A, dz, trans_a=True, out=dWn)
        ndws.gemm(hs_n, dz, trans_a=True, out=dRWn)
        ndws.gemm(ones, dz, out=dbn)

    def floor_train():
        floor_forward()
        floor_backward()

    rows = {"forward": {"ndws": ndws_forward, "GEMM floor": floor_forward},
            "forward+backward": {"ndws": ndws_train, "GEMM floor": floor_train}}
    if torch is not None:
        xt = torch.from_numpy(x_tm)
        gyt = torch.from_numpy(gy)

        def torch_forward():
            with torch.no_grad():
                lstm(xt)

        def torch_train():
            lstm.zero_grad(set_to_none=True)
            out, _ = lstm(xt)
            out.backward(gyt)

        rows["forward"]["torch"] = torch_forward
        rows["forward+backward"]["torch"] = torch_train
        # the same numbers: outputs within float32 rounding, and the same weight gradient
        y_ref, _ = lstm(xt)
        with work:
            y = ndws.empty((T, B, N), dtype=f32).T.transpose(1, 0, 2)
            cache = ndws.empty(cache_shape, dtype=f32)
            F.lstm_forward(x, W, RW, b, activation="tanh", out=y, cache=cache,
                           loop_workspace=loop)
            err = np.abs(y.numpy() - y_ref.detach().numpy().transpose(1, 2, 0)).max()
            assert err < 1e-4, err
            F.lstm_backward(x, W, RW, cache, gy_ncw, activation="tanh", need_input=False,
                            grad_W=dW, grad_RW=dRW, grad_b=db, loop_workspace=loop)
        torch_train()
        gih = lstm.weight_ih_l0.grad.numpy()
        ref = np.concatenate([gih[p * N:(p + 1) * N].T for p in PERM], 1)
        assert np.abs(dW - ref).max() <= 1e-3 * np.abs(ref).max(), "dW differs from torch"
    rows = {"LSTM 512 forward": rows["forward"],
            "LSTM 512 fwd+bwd": rows["forward+backward"]}
    # one sample per round: the turns change every call (0.3-1.2 s here), so a slow phase of a
    # shared machine lasting a few seconds falls on all contenders rather than on one's block
    result.update(timed_rows(rows, quick, 3 if quick else 12, per_round=1))
    mm = ndws.get_memory_manager()
    before = mm.allocation_statistics()["allocations"]
    ndws_train()
    info = {"threads": threads, "torch": None if torch is None else torch.__version__,
            "mkldnn": None if torch is None else bool(torch.backends.mkldnn.is_available()),
            "numpy": np.__version__, "loop_cycles": loop.cycles_count,
            "heap_allocations_per_training_step":
                mm.allocation_statistics()["allocations"] - before}
    modes = modes_info(rng, 3 if quick else 5)
    print(json.dumps({"info": info, "rows": result, "modes": modes}))


def run(threads, quick, noisy):
    return run_worker(__file__, threads, quick, noisy)


def _targets(row, nd, th, fl):
    """(label, met) of each target of a row."""
    out = []
    if row == "rnn_time_step":
        if th:
            out.append((f"ndws <= {STEP_TARGET}x torch", nd <= STEP_TARGET * th))
        return out
    if th:
        out.append((f"torch/ndws >= {TARGET}", th / nd >= TARGET))
    if row == "char fit segment" and fl:
        out.append((f"ndws/floor <= {FLOOR_TARGET}", nd / fl <= FLOOR_TARGET))
    return out


def report(threads, condition, out):
    info = out["info"]
    print(f"\n## {threads} thread(s), {condition}; torch {info['torch'] or 'absent'}")
    head = (f"{'row':<18} {'ndws ms':>9} {'p10-p90':>15} {'torch ms':>9} {'p10-p90':>15} "
            f"{'floor ms':>9} {'torch/ndws':>10} {'ndws/floor':>10}  targets")
    print(head + "\n" + "-" * len(head))
    passes = misses = 0
    for row, res in out["rows"].items():
        nd, fl, th = res["ndws"], res.get("GEMM floor"), res.get("torch")
        line = f"{row:<18} {nd['ms']:9.3f} {nd['spread'][0]:7.3f}-{nd['spread'][1]:<7.3f}"
        line += (f" {th['ms']:9.3f} {th['spread'][0]:7.3f}-{th['spread'][1]:<7.3f}" if th
                 else f" {'-':>9} {'':15}")
        line += f" {fl['ms']:9.3f}" if fl else f" {'-':>9}"
        line += f" {th['ms'] / nd['ms']:10.2f}" if th else f" {'-':>10}"
        line += f" {nd['ms'] / fl['ms']:10.2f}" if fl else f" {'-':>10}"
        marks = []
        for label, ok in _targets(row, nd["ms"], th and th["ms"], fl and fl["ms"]):
            passes += ok
            misses += not ok
            marks.append(f"{'PASS' if ok else 'MISS'} ({label})")
        print(line + "  " + ", ".join(marks))
    print("\nminor page faults per call:")
    for row, res in out["rows"].items():
        print(f"  {row:<18} " + ", ".join(f"{name} {r['faults']:.0f}" for name, r in res.items()
                                          if r.get("faults") is not None))
    print(f"\nchar model fit() segment per workspace mode (batch {CB}, {CT} steps):")
    print(f"{'mode':<10} {'heap allocs/iter':>16} {'workspaces (B)':>15} {'report total (B)':>17}"
          f"  target")
    for mode, m in out["modes"].items():
        ok = m["allocs"] == 0
        passes += ok
        misses += not ok
        print(f"{mode:<10} {m['allocs']:16.1f} {m['workspace_bytes']:15,} "
              f"{m['report_bytes'] or 0:17,}  {'PASS' if ok else 'MISS'} (0 allocations)")
    return passes, misses


def main():
    ap = harness_parser(__doc__)
    args = ap.parse_args()
    if run_role(args, worker):
        return
    banner("bench_rnn", args.quick)
    passes, misses = sweep(args, run, report)
    print(f"\n# medians of the samples (p10-p90: fastest to slowest decile); target rows: "
          f"{passes} PASS, {misses} MISS")


if __name__ == "__main__":
    main()
