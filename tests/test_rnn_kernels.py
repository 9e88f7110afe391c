"""The recurrent time loops of ndws.nn.functional (ndws.nn._rnn): LSTM, GravesLSTM (peepholes)
and SimpleRnn, forward and backward, against an independent NumPy reference of each cell, against
PyTorch's nn.LSTM / nn.RNN where it is installed, and by central differences; masks, initial
state, truncated windows, thread counts, the loop workspace's statistics and hostile input."""
from __future__ import annotations

import numpy as np
import pytest

import ndws
import ndws._linalg as la
import ndws.nn.functional as F
from ndws import _arena

#: (rtol, atol) of a float32 kernel against the float64 reference (data)
TOL = {np.dtype(np.float32): (2e-5, 2e-6), np.dtype(np.float64): (1e-12, 1e-13)}

# -- the NumPy reference: DL4J's cells written out step by step (LSTMHelpers, SimpleRnn) ------

ACT = {
    "identity": lambda z: z,
    "sigmoid": lambda z: 1 / (1 + np.exp(-z)),
    "tanh": np.tanh,
    "softsign": lambda z: z / (1 + np.abs(z)),
    "hardsigmoid": lambda z: np.clip(0.2 * z + 0.5, 0, 1),
    "relu": lambda z: np.maximum(z, 0),
}


def ref_lstm(x, W, RW, b, h0=None, c0=None, mask=None, act="sigmoid", gact="sigmoid",
             peep=False):
    """x (B, n_in, T) -> y (B, n, T), h, c in float64; DL4J's blocks (g, f, o, i)."""
    B, _, T = x.shape
    n = RW.shape[0]
    f_, g_ = ACT[act], ACT[gact]
    W, RW, b = W.astype(np.float64), RW.astype(np.float64), b.astype(np.float64).reshape(-1)
    h = np.zeros((B, n)) if h0 is None else h0.astype(np.float64)
    c = np.zeros((B, n)) if c0 is None else c0.astype(np.float64)
    y = np.zeros((B, n, T))
    for t in range(T):
        z = x[:, :, t].astype(np.float64) @ W + h @ RW[:, :4 * n] + b
        zg, zf, zo, zi = z[:, :n], z[:, n:2 * n], z[:, 2 * n:3 * n], z[:, 3 * n:]
        if peep:
            zf = zf + c * RW[:, 4 * n]
            zi = zi + c * RW[:, 4 * n + 2]
        g, f, i = f_(zg), g_(zf), g_(zi)
        ct = f * c + i * g
        if peep:
            zo = zo + ct * RW[:, 4 * n + 1]
        ht = g_(zo) * f_(ct)
        m = np.ones(B) if mask is None else mask[:, t].astype(np.float64)
        h, c = m[:, None] * ht, m[:, None] * ct
        y[:, :, t] = h
    return y, h, c


def ref_rnn(x, W, RW, b, h0=None, mask=None, act="sigmoid"):
    B, _, T = x.shape
    n = RW.shape[0]
    h = np.zeros((B, n)) if h0 is None else h0.astype(np.float64)
    y = np.zeros((B, n, T))
    for t in range(T):
        z = (x[:, :, t].astype(np.float64) @ W + b.reshape(-1)) + h @ RW
        m = np.ones(B) if mask is None else mask[:, t].astype(np.float64)
        h = m[:, None] * ACT[act](z)
        y[:, :, t] = h
    return y, h


def _close(got, exp, dtype):
    got = got.numpy() if isinstance(got, ndws.NDArray) else np.asarray(got)
    assert got.dtype == np.dtype(dtype) and got.shape == np.shape(exp), (got.dtype, got.shape)
    rtol, atol = TOL[np.dtype(dtype)]
    np.testing.assert_allclose(got.astype(np.float64), exp, rtol=rtol, atol=atol)


def _problem(rng, kind, B=3, nin=4, n=5, T=6, dtype=np.float64):
    K = 4 * n if kind != "simple" else n
    extra = 3 if kind == "graves" else 0
    p = {"x": rng.standard_normal((B, nin, T)),
         "W": rng.standard_normal((nin, K)) * 0.5,
         "RW": rng.standard_normal((n, K + extra)) * 0.5,
         "b": rng.standard_normal(K) * 0.1,
         "h0": rng.standard_normal((B, n)),
         "c0": rng.standard_normal((B, n))}
    return {k: v.astype(dtype) for k, v in p.items()}


# a mask with a leading, a middle and a trailing hole (ALIGN_END, gaps, ALIGN_START)
MASK = np.array([[0, 0, 1, 1, 1, 1], [1, 1, 0, 1, 1, 1], [1, 1, 1, 1, 0, 0]], np.float64)

KINDS = ["lstm", "graves", "simple"]
ACTS = {"lstm": [("tanh", "sigmoid"), ("softsign", "hardsigmoid")],
        "graves": [("tanh", "sigmoid"), ("softsign", "sigmoid")],
        "simple": [("tanh", None), ("relu", None)]}


def _forward(kind, p, fmt="NCW", act="tanh", gact="sigmoid", state=True, mask=None, **kw):
    x = p["x"] if fmt == "NCW" else np.ascontiguousarray(p["x"].transpose(0, 2, 1))
    if kind == "simple":
        return F.simple_rnn_forward(x, p["W"], p["RW"], p["b"], p["h0"] if state else None,
                                    mask, activation=act, data_format=fmt, **kw)
    return F.lstm_forward(x, p["W"], p["RW"], p["b"], p["h0"] if state else None,
                          p["c0"] if state else None, mask, activation=act,
                          gate_activation=gact, peepholes=kind == "graves", data_format=fmt,
                          **kw)


def _reference(kind, p, act, gact, state, mask):
    if kind == "simple":
        y, h = ref_rnn(p["x"], p["W"], p["RW"], p["b"], p["h0"] if state else None, mask, act)
        return y, h, None
    return ref_lstm(p["x"], p["W"], p["RW"], p["b"], p["h0"] if state else None,
                    p["c0"] if state else None, mask, act, gact, kind == "graves")


# ------------------------------------------------------------------------------------------------
# forward against the NumPy reference


@pytest.mark.parametrize("use_mask", [False, True])
@pytest.mark.parametrize("state", [False, True])
@pytest.mark.parametrize("fmt", ["NCW", "NWC"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", KINDS)
def test_forward_matches_the_numpy_reference(kind, dtype, fmt, state, use_mask, rng):
    p = _problem(rng, kind, dtype=dtype)
    mask = MASK if use_mask else None
    for act, gact in ACTS[kind]:
        res = _forward(kind, p, fmt, act, gact, state, mask)
        y_ref, h_ref, c_ref = _reference(kind, p, act, gact, state, mask)
        y = res[0].numpy()
        _close(y if fmt == "NCW" else y.transpose(0, 2, 1), y_ref, dtype)
        _close(res[1], h_ref, dtype)
        if kind != "simple":
            _close(res[2], c_ref, dtype)


@pytest.mark.parametrize("kind", KINDS)
def test_masked_steps_output_exact_zeros_and_reset_the_state(kind, rng):
    # DL4J multiplies output and state by the mask: a masked step outputs 0 and the next one
    # starts from a zero state. Padding that holds NaN stays out of the result.
    p = _problem(rng, kind)
    p["x"][0, :, 0] = np.nan
    p["x"][2, :, 5] = np.inf
    y, h = _forward(kind, p, mask=MASK)[:2]
    y = y.numpy()
    assert (y[MASK[:, None, :].repeat(5, 1) == 0] == 0).all()
    assert np.isfinite(y).all() and (h.numpy()[2] == 0).all()
    _, h_ref, _ = _reference(kind, dict(p, x=np.nan_to_num(p["x"], posinf=0)), "tanh",
                             "sigmoid", True, MASK)
    _close(h, h_ref, np.float64)
    # a fractional mask scales (DL4J multiplies)
    half = np.full((3, 6), 0.5)
    q = _problem(rng, kind)
    _close(_forward(kind, q, mask=half)[0], _reference(kind, q, "tanh", "sigmoid", True,
                                                         half)[0], np.float64)


def test_forward_defaults_are_dl4j_s():
    # DL4J's LSTM without .activation(...) inherits the network's sigmoid (reference §2.2)
    rng = np.random.default_rng(0)
    p = _problem(rng, "lstm")
    y = F.lstm_forward(p["x"], p["W"], p["RW"], p["b"])[0]
    _close(y, ref_lstm(p["x"], p["W"], p["RW"], p["b"], act="sigmoid")[0], np.float64)


def test_strided_negative_and_time_major_views(rng):
    p = _problem(rng, "lstm", B=4, T=7)
    big = rng.standard_normal((8, 4, 14))
    x = big[::-2, :, ::2][:4]                       # negative and non-unit strides
    y_ref = ref_lstm(x, p["W"], p["RW"], p["b"], act="tanh")[0]
    _close(F.lstm_forward(x, p["W"], p["RW"], p["b"], activation="tanh")[0], y_ref, np.float64)
    # a time-major buffer viewed as NCW is read in place; strided parameters and out=
    tm = np.ascontiguousarray(x.transpose(2, 0, 1))
    W2 = np.asfortranarray(p["W"])
    RW2 = np.ascontiguousarray(np.concatenate([p["RW"], p["RW"]], 1))[:, ::2]
    RW2[:] = p["RW"]
    out = np.zeros((7, 4, 5)).transpose(1, 2, 0)
    y = F.lstm_forward(tm.transpose(1, 2, 0), W2, RW2, p["b"][None, :], activation="tanh",
                       out=out)[0]
    assert y is out
    _close(out, y_ref, np.float64)


def test_zero_length_sequences_and_zero_batch(rng):
    p = _problem(rng, "lstm", T=0)
    y, h, c = F.lstm_forward(p["x"], p["W"], p["RW"], p["b"], p["h0"], p["c0"])
    assert y.shape == (3, 5, 0)
    assert np.array_equal(h.numpy(), p["h0"]) and np.array_equal(c.numpy(), p["c0"])
    y, h, c = F.lstm_forward(p["x"], p["W"], p["RW"], p["b"])
    assert not h.numpy().any() and not c.numpy().any()
    cache = np.empty(F.lstm_cache_shape(0, 3, 5))
    F.lstm_forward(p["x"], p["W"], p["RW"], p["b"], cache=cache)
    gh = rng.standard_normal((3, 5))
    dx, dW, dRW, db, dh0, dc0 = F.lstm_backward(p["x"], p["W"], p["RW"], cache,
                                                np.zeros((3, 5, 0)), grad_h=gh)
    assert dx.shape == (3, 4, 0) and not dW.numpy().any() and not db.numpy().any()
    assert np.array_equal(dh0.numpy(), gh) and not dc0.numpy().any()
    q = _problem(rng, "simple", B=0)
    y, h = F.simple_rnn_forward(q["x"], q["W"], q["RW"], q["b"])
    assert y.shape == (0, 5, 6) and h.shape == (0, 5)
    cache = np.empty(F.simple_rnn_cache_shape(6, 0, 5))
    F.simple_rnn_forward(q["x"], q["W"], q["RW"], q["b"], cache=cache)
    g = F.simple_rnn_backward(q["x"], q["W"], q["RW"], cache, np.zeros((0, 5, 6)))
    assert g[0].shape == (0, 4, 6) and not g[1].numpy().any() and g[4].shape == (0, 5)


# ------------------------------------------------------------------------------------------------
# PyTorch


def _torch():
    return pytest.importorskip("torch")


PERM = [2, 1, 3, 0]        # DL4J's blocks (g, f, o, i) from PyTorch's (i, f, g, o)


def test_lstm_equals_torch_nn_lstm(rng):
    torch = _torch()
    B, nin, n, T = 4, 6, 8, 9
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(nin, n).double()
    wih, whh = lstm.weight_ih_l0.detach().numpy(), lstm.weight_hh_l0.detach().numpy()
    bb = (lstm.bias_ih_l0 + lstm.bias_hh_l0).detach().numpy()
    W = np.concatenate([wih[p * n:(p + 1) * n].T for p in PERM], 1)
    RW = np.concatenate([whh[p * n:(p + 1) * n].T for p in PERM], 1)
    b = np.concatenate([bb[p * n:(p + 1) * n] for p in PERM])
    x = rng.standard_normal((T, B, nin))
    h0, c0 = rng.standard_normal((1, B, n)), rng.standard_normal((1, B, n))
    xt = torch.tensor(x, requires_grad=True)
    h0t, c0t = torch.tensor(h0, requires_grad=True), torch.tensor(c0, requires_grad=True)
    yt, (ht, ct) = lstm(xt, (h0t, c0t))
    gy = rng.standard_normal(yt.shape)
    (yt * torch.tensor(gy)).sum().backward()
    xn = x.transpose(1, 2, 0)                     # NCW view of the time-major batch
    cache = np.empty(F.lstm_cache_shape(T, B, n, activation="tanh"))
    y, h, c = F.lstm_forward(xn, W, RW, b, h0[0], c0[0], activation="tanh", cache=cache)
    _close(y, yt.detach().numpy().transpose(1, 2, 0), np.float64)
    _close(h, ht.detach().numpy()[0], np.float64)
    _close(c, ct.detach().numpy()[0], np.float64)
    dx, dW, dRW, db, dh0, dc0 = F.lstm_backward(xn, W, RW, cache, gy.transpose(1, 2, 0),
                                                h0[0], c0[0], activation="tanh")
    gih = lstm.weight_ih_l0.grad.numpy()
    _close(dW, np.concatenate([gih[p * n:(p + 1) * n].T for p in PERM], 1), np.float64)
    ghh = lstm.weight_hh_l0.grad.numpy()
    _close(dRW, np.concatenate([ghh[p * n:(p + 1) * n].T for p in PERM], 1), np.float64)
    gb = lstm.bias_ih_l0.grad.numpy()
    _close(db, np.concatenate([gb[p * n:(p + 1) * n] for p in PERM]), np.float64)
    _close(dx, xt.grad.numpy().transpose(1, 2, 0), np.float64)
    _close(dh0, h0t.grad.numpy()[0], np.float64)
    _close(dc0, c0t.grad.numpy()[0], np.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_simple_rnn_equals_torch_nn_rnn(dtype, rng):
    torch = _torch()
    B, nin, n, T = 3, 5, 7, 8
    torch.manual_seed(1)
    rnn = torch.nn.RNN(nin, n).to(torch.float64 if dtype == np.float64 else torch.float32)
    W = rnn.weight_ih_l0.detach().numpy().T
    RW = rnn.weight_hh_l0.detach().numpy().T
    b = (rnn.bias_ih_l0 + rnn.bias_hh_l0).detach().numpy()
    x = rng.standard_normal((B, T, nin)).astype(dtype)
    yt, ht = rnn(torch.tensor(x.transpose(1, 0, 2)))
    y, h = F.simple_rnn_forward(x, W, RW, b, activation="tanh", data_format="NWC")
    _close(y, yt.detach().numpy().transpose(1, 0, 2).astype(np.float64), dtype)
    _close(h, ht.detach().numpy()[0].astype(np.float64), dtype)


# ------------------------------------------------------------------------------------------------
# gradients by central differences (float64)


def _loss_and_grads(kind, p, act, gact, mask, R, back_length=None, fmt="NCW", state=True):
    T = p["x"].shape[2]
    B, n = p["h0"].shape
    if kind == "simple":
        cache = np.empty(F.simple_rnn_cache_shape(T, B, n, activation=act))
    else:
        cache = np.empty(F.lstm_cache_shape(T, B, n, activation=act, gate_activation=gact))
    x = p["x"] if fmt == "NCW" else p["x"].transpose(0, 2, 1)
    ry = R["y"] if fmt == "NCW" else R["y"].transpose(0, 2, 1)
    h0 = p["h0"] if state else None
    if kind == "simple":
        y, h = F.simple_rnn_forward(x, p["W"], p["RW"], p["b"], h0, mask, activation=act,
                                    data_format=fmt, cache=cache)
        loss = (y.numpy() * ry).sum() + (h.numpy() * R["h"]).sum()
        g = F.simple_rnn_backward(x, p["W"], p["RW"], cache, ry, h0, mask, R["h"],
                                  activation=act, data_format=fmt, back_length=back_length)
        names = ("x", "W", "RW", "b", "h0")
    else:
        c0 = p["c0"] if state else None
        y, h, c = F.lstm_forward(x, p["W"], p["RW"], p["b"], h0, c0, mask, activation=act,
                                 gate_activation=gact, peepholes=kind == "graves",
                                 data_format=fmt, cache=cache)
        loss = (y.numpy() * ry).sum() + (h.numpy() * R["h"]).sum() + (c.numpy() * R["c"]).sum()
        g = F.lstm_backward(x, p["W"], p["RW"], cache, ry, h0, c0, mask, R["h"], R["c"],
                            activation=act, gate_activation=gact, peepholes=kind == "graves",
                            data_format=fmt, back_length=back_length)
        names = ("x", "W", "RW", "b", "h0", "c0")
    grads = {k: v.numpy() for k, v in zip(names, g)}
    if fmt == "NWC":
        grads["x"] = grads["x"].transpose(0, 2, 1)
    return loss, grads


def _numeric(f, a, eps=1e-6):
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        old = a[i]
        a[i] = old + eps
        lp = f()
        a[i] = old - eps
        lm = f()
        a[i] = old
        g[i] = (lp - lm) / (2 * eps)
    return g


def _targets(rng, p):
    B, n = p["h0"].shape
    return {"y": rng.standard_normal((B, n, p["x"].shape[2])),
            "h": rng.standard_normal((B, n)), "c": rng.standard_normal((B, n))}


@pytest.mark.parametrize("use_mask", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_gradients_by_central_differences(kind, use_mask, rng):
    p = _problem(rng, kind, B=3, nin=3, n=3, T=6)
    R = _targets(rng, p)
    mask = MASK if use_mask else None
    for act, gact in ACTS[kind]:
        for fmt in ("NCW", "NWC"):
            _, g = _loss_and_grads(kind, p, act, gact, mask, R, fmt=fmt)
            for name, grad in g.items():
                num = _numeric(lambda: _loss_and_grads(kind, p, act, gact, mask, R)[0],
                               p[name])
                np.testing.assert_allclose(grad, num, rtol=1e-6, atol=1e-7,
                                           err_msg=f"{kind} {act} {fmt} d{name}")


def test_gradients_without_initial_state_are_those_at_zero(rng):
    p = _problem(rng, "lstm", B=2, nin=3, n=3, T=4)
    R = _targets(rng, p)
    _, g = _loss_and_grads("lstm", p, "tanh", "sigmoid", None, R, state=False)
    p0 = dict(p, h0=np.zeros_like(p["h0"]), c0=np.zeros_like(p["c0"]))
    _, g0 = _loss_and_grads("lstm", p0, "tanh", "sigmoid", None, R)
    for k in g:
        np.testing.assert_allclose(g[k], g0[k], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("use_mask", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_back_length_is_truncated_bptt(kind, use_mask, rng):
    # errors flow back through the last L steps only: the gradient of the window's own loss
    # with the state entering the window held fixed; nothing before it, no dh0 / dc0
    p = _problem(rng, kind, B=3, nin=3, n=3, T=6)
    R = _targets(rng, p)
    mask = MASK if use_mask else None
    L, t0 = 2, 4
    act, gact = ACTS[kind][0]
    _, g = _loss_and_grads(kind, p, act, gact, mask, R, back_length=L)
    first = dict(p, x=np.ascontiguousarray(p["x"][:, :, :t0]))
    state = _forward(kind, first, act=act, gact=gact, mask=None if mask is None
                     else mask[:, :t0])[1:]
    w = dict(p, x=np.ascontiguousarray(p["x"][:, :, t0:]), h0=state[0].numpy(),
             c0=state[1].numpy() if kind != "simple" else p["c0"])
    Rw = dict(R, y=R["y"][:, :, t0:])
    mw = None if mask is None else mask[:, t0:]
    for name in ("W", "RW", "b", "x"):
        num = _numeric(lambda: _loss_and_grads(kind, w, act, gact, mw, Rw)[0], w[name])
        got = g[name][:, :, t0:] if name == "x" else g[name]
        np.testing.assert_allclose(got, num, rtol=1e-6, atol=1e-7, err_msg=name)
    assert not g["x"][:, :, :t0].any() and not g["h0"].any()
    if kind != "simple":
        assert not g["c0"].any()
    # the whole sequence (tbptt_fwd_length = tbptt_back_length = T) is standard BPTT, bit for
    # bit; 0 steps: no error at all
    _, full = _loss_and_grads(kind, p, act, gact, mask, R)
    _, T_steps = _loss_and_grads(kind, p, act, gact, mask, R, back_length=6)
    _, more = _loss_and_grads(kind, p, act, gact, mask, R, back_length=60)
    for k in full:
        assert full[k].tobytes() == T_steps[k].tobytes() == more[k].tobytes(), k
    _, none = _loss_and_grads(kind, p, act, gact, mask, R, back_length=0)
    assert not any(v.any() for v in none.values())


def test_a_masked_step_stops_the_error_at_a_gap(rng):
    # DL4J's backward carries the cell error across a masked step; the forward reset the state
    # there, so nothing before the gap may depend on what follows it
    p = _problem(rng, "lstm", B=1, nin=2, n=2, T=5)
    mask = np.array([[1, 1, 0, 1, 1]], np.float64)
    R = _targets(rng, p)
    R["y"][:, :, :2] = 0                         # only the steps after the gap carry a loss
    _, g = _loss_and_grads("lstm", p, "tanh", "sigmoid", mask, R)
    assert not g["x"][:, :, :3].any() and not g["h0"].any() and not g["c0"].any()


# ------------------------------------------------------------------------------------------------
# threads, the cache, the loop workspace


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", KINDS)
def test_one_and_two_threads_are_bit_identical(kind, dtype, rng):
    # (B * T * nin above two grains of NN_CHEAP: the NCW input's time-major copies run on
    # both threads too)
    B, nin, n, T = 64, 48, 64, 12
    p = _problem(rng, kind, B=B, nin=nin, n=n, T=T, dtype=dtype)
    mask = (rng.random((B, T)) > 0.2).astype(dtype)
    width = (F.simple_rnn_cache_shape if kind == "simple" else F.lstm_cache_shape)(T, B, n)[2]
    results = []
    for nt in (1, 2):
        with ndws.num_threads(nt):
            cache = np.empty((T, B, width), dtype)
            fwd = _forward(kind, p, act="sigmoid", mask=mask, cache=cache)
            gy = np.ones((B, n, T), dtype)
            if kind == "simple":
                bwd = F.simple_rnn_backward(p["x"], p["W"], p["RW"], cache, gy, p["h0"], mask)
            else:
                bwd = F.lstm_backward(p["x"], p["W"], p["RW"], cache, gy, p["h0"], p["c0"],
                                      mask, peepholes=kind == "graves")
            results.append([a.numpy().tobytes() for a in fwd + bwd] + [cache.tobytes()])
    assert results[0] == results[1]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("nt", [1, 2])
def test_recurrent_product_gives_the_gemms_bits(dtype, nt, rng):
    # the loop's h_{t-1} @ RW (the GEMM's micro-kernel on A where it lies, K block after K
    # block) against ndws.gemm: KC + 44 units make two K blocks and a zero-padded last panel,
    # 20 examples two whole micro-kernel row tiles and 4 rows for the GEMM itself
    n = la._gemm_info()[np.dtype(dtype).name]["kc"] + 44
    B, nin, T = 20, 3, 3
    p = _problem(rng, "simple", B=B, nin=nin, n=n, T=T, dtype=dtype)
    p["RW"] *= 0.1
    with ndws.num_threads(nt):
        y = F.simple_rnn_forward(p["x"], p["W"], p["RW"], p["b"], p["h0"],
                                 activation="identity")[0].numpy()
        h = p["h0"]
        for t in range(T):
            proj = ndws.gemm(ndws.asarray(np.ascontiguousarray(p["x"][:, :, t])), p["W"]).numpy()
            rec = ndws.gemm(ndws.asarray(np.ascontiguousarray(h)), p["RW"]).numpy()
            h = (proj + p["b"]) + rec                  # SimpleRnn's association (DL4J's)
            np.testing.assert_array_equal(np.ascontiguousarray(y[:, :, t]).view(np.uint8),
                                          h.view(np.uint8))


def _cell_isas():
    from ndws.nn import _rnn
    return _rnn._cell_isas()


def _run_cell_path(fused, isa, kind, p, act, gact, mask, gy, state):
    # forward with a cache, inference (no cache) and backward on one path, as bytes
    from ndws.nn import _rnn
    T, B, n = gy.shape[2], gy.shape[0], gy.shape[1]
    previous, previous_isa = _rnn._use_fused_cells(fused), _rnn._use_cell_isa(isa)
    try:
        cache = np.empty(F.lstm_cache_shape(T, B, n, activation=act, gate_activation=gact),
                         gy.dtype)
        fwd = _forward(kind, p, act=act, gact=gact, mask=mask, cache=cache, state=state)
        inference = _forward(kind, p, act=act, gact=gact, mask=mask, state=state)
        bwd = F.lstm_backward(p["x"], p["W"], p["RW"], cache, gy,
                              p["h0"] if state else None, p["c0"] if state else None, mask,
                              activation=act, gate_activation=gact,
                              peepholes=kind == "graves")
    finally:
        _rnn._use_fused_cells(previous)
        _rnn._use_cell_isa(previous_isa)
    return [a.numpy().tobytes() for a in fwd + inference + bwd] + [cache.tobytes()]


@pytest.mark.parametrize("isa", _cell_isas())
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["lstm", "graves"])
def test_the_fused_cell_gives_the_bits_of_the_general_path(kind, dtype, isa, rng):
    # identity / sigmoid / tanh run the per-instruction-set cell of _rnn_cell.h, every other
    # activation the general path: for the same activations both must agree bit for bit, with
    # every clone this CPU runs (n = 19: full vectors and a tail in both precisions), masks of
    # 0, 1 and a scale, saturating inputs, with and without an initial state
    B, T, n = 5, 7, 19
    p = _problem(rng, kind, B=B, nin=6, n=n, T=T, dtype=dtype)
    p["x"][0, :, 2] *= 40                           # deep in every activation's saturation
    gy = rng.standard_normal((B, n, T)).astype(dtype)
    masks = [None, (rng.random((B, T)) > 0.3).astype(dtype)]
    masks[1][1, 3] = 0.5
    codes = ["identity", "sigmoid", "tanh"]
    for act in codes:
        for gact in codes:
            for i, mask in enumerate(masks):
                state = i == 0
                fused = _run_cell_path(True, isa, kind, p, act, gact, mask, gy, state)
                general = _run_cell_path(False, isa, kind, p, act, gact, mask, gy, state)
                assert fused == general, (act, gact, i)


def test_the_cell_clones_are_chosen_and_refused_by_name():
    from ndws.nn import _rnn
    isas = _rnn._cell_isas()
    assert isas[-1] == "baseline" and set(isas) <= {"avx512", "avx2", "baseline"}
    before = _rnn._use_cell_isa("baseline")
    assert before == isas[0]                        # the best this CPU runs, by default
    with pytest.raises(ValueError, match=r"isa: expected one of .*baseline, got 'sse9'"):
        _rnn._use_cell_isa("sse9")
    assert _rnn._use_cell_isa(None) == "baseline"   # the refusal changed nothing
    assert _rnn._use_cell_isa(None) == isas[0]


def test_the_cache_is_read_not_written_by_the_backward(rng):
    p = _problem(rng, "graves")
    cache = np.empty(F.lstm_cache_shape(6, 3, 5, activation="softsign"))
    F.lstm_forward(p["x"], p["W"], p["RW"], p["b"], activation="softsign", peepholes=True,
                   cache=cache)
    before = cache.copy()
    gy = np.ones((3, 5, 6))
    one = F.lstm_backward(p["x"], p["W"], p["RW"], cache, gy, activation="softsign",
                          peepholes=True)
    two = F.lstm_backward(p["x"], p["W"], p["RW"], cache, gy, activation="softsign",
                          peepholes=True)
    assert np.array_equal(cache, before)
    assert all(a.numpy().tobytes() == b.numpy().tobytes() for a, b in zip(one, two))
    assert cache.shape == (6, 3, 55)              # with the pre-activations: 11 * n_out


def _loop_twin(ws, T, sizes):
    # the same loop written with `with ws:` blocks and arrays of the step's temporaries
    for _ in range(T):
        with ws:
            for nbytes in sizes:
                ndws.empty(nbytes, dtype=np.uint8)


def _stats(ws):
    d = ws.statistics()
    d.pop("id")
    return d


@pytest.mark.parametrize("kind", KINDS)
def test_loop_workspace_statistics_are_those_of_with_blocks(kind, rng):
    # DL4J's WS_RNN_LOOP_WORKING_MEM configuration: a cycle per step; the forward's step
    # temporaries are the recurrent product (batch x gates) and, for an LSTM without a cache,
    # its gates, c~ and act(c~) per example; the backward's the recurrent error
    # (batch x n_out) and, for an LSTM, dh, dc and c_{t-1} per example
    B, nin, n, T = 4, 3, 5, 7
    K = n if kind == "simple" else 4 * n
    conf = ndws.WorkspaceConfiguration(overallocation_limit=0.05, policy_spill="REALLOCATE")
    compiled = ndws.workspace("RNN_LOOP", conf)
    twin = ndws.workspace("RNN_LOOP_TWIN", conf)
    p = _problem(rng, kind, B=B, nin=nin, n=n, T=T)
    fwd_sizes = [B * K * 8] + ([B * 6 * n * 8] if kind != "simple" else [])
    for _ in range(2):                              # learning, then the steady state
        _forward(kind, p, loop_workspace=compiled)
        _loop_twin(twin, T, fwd_sizes)
        assert _stats(compiled) == _stats(twin)
    cache = np.empty((F.simple_rnn_cache_shape if kind == "simple" else F.lstm_cache_shape)(
        T, B, n, activation="tanh"))
    _forward(kind, p, cache=cache, loop_workspace=compiled)
    _loop_twin(twin, T, [B * K * 8])
    assert _stats(compiled) == _stats(twin)
    gy = np.ones((B, n, T))
    bwd_sizes = [B * n * 8] + ([B * 3 * n * 8] if kind != "simple" else [])
    for bl in (None, 3):
        if kind == "simple":
            F.simple_rnn_backward(p["x"], p["W"], p["RW"], cache, gy, p["h0"], activation="tanh",
                                  back_length=bl, loop_workspace=compiled)
        else:
            F.lstm_backward(p["x"], p["W"], p["RW"], cache, gy, p["h0"], p["c0"],
                            activation="tanh", peepholes=kind == "graves", back_length=bl,
                            loop_workspace=compiled)
        _loop_twin(twin, T if bl is None else bl, bwd_sizes)
        assert _stats(compiled) == _stats(twin)
    assert compiled.cycles_count == 4 * T + 3 and ndws.current_workspace() is None


@pytest.fixture
def small_chunks():
    # the forward's input projection in chunks of at least 256 KiB of result (and twice W's
    # bytes), whatever the default, so that these small problems take several chunks (W
    # packed, windows of steps cut at the chunks)
    from ndws.nn import _rnn
    previous = _rnn._use_proj_chunk_bytes(256 << 10)
    yield
    _rnn._use_proj_chunk_bytes(previous)


def test_the_projection_chunk_size_is_checked():
    from ndws.nn import _rnn
    with pytest.raises(ValueError, match="nbytes: expected at least 1, got 0"):
        _rnn._use_proj_chunk_bytes(0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("T", [2, 13])
@pytest.mark.parametrize("kind", KINDS)
def test_two_threads_run_windows_of_steps_with_the_loop_statistics_of_one(kind, T, dtype, rng,
                                                                         small_chunks):
    # two threads run the example groups as lanes over windows of steps in the bytes of one
    # step's cycle: the bits and every loop-workspace statistic are the one-thread loop's.
    # T = 2: the input projection is one chunk of both steps; T = 13: several chunks (W
    # packed), each made on the pool before the windows of its steps
    B, nin, n = 64, 48, 64
    p = _problem(rng, kind, B=B, nin=nin, n=n, T=T, dtype=dtype)
    mask = (rng.random((B, T)) > 0.2).astype(dtype)
    mask[:, 0] = 1
    width = (F.simple_rnn_cache_shape if kind == "simple" else F.lstm_cache_shape)(T, B, n)[2]
    conf = ndws.WorkspaceConfiguration(overallocation_limit=0.05, policy_spill="REALLOCATE")
    results, stats = [], []
    for nt in (1, 2):
        loop = ndws.workspace(f"RNN_WINDOWS_{nt}", conf)
        out = []
        with ndws.num_threads(nt):
            for _ in range(2):                          # learning, then the steady state
                cache = np.empty((T, B, width), dtype)
                out += _forward(kind, p, act="sigmoid", mask=mask, cache=cache,
                                loop_workspace=loop)
                out += _forward(kind, p, act="sigmoid", state=False, loop_workspace=loop)
                gy = np.ones((B, n, T), dtype)
                for bl in (None, T // 2):
                    if kind == "simple":
                        out += F.simple_rnn_backward(p["x"], p["W"], p["RW"], cache, gy,
                                                     p["h0"], mask, activation="sigmoid",
                                                     back_length=bl, loop_workspace=loop)
                    else:
                        out += F.lstm_backward(p["x"], p["W"], p["RW"], cache, gy, p["h0"],
                                               p["c0"], mask, activation="sigmoid",
                                               peepholes=kind == "graves", back_length=bl,
                                               loop_workspace=loop)
                out.append(cache)
        results.append([np.asarray(a).tobytes() for a in out])
        stats.append(_stats(loop))
        ndws.get_workspace_manager().destroy_workspace(loop)
    assert results[0] == results[1]
    assert stats[0] == stats[1]
    assert stats[0]["cycles_count"] == 2 * (2 * T + T + T // 2)


@pytest.mark.parametrize("kind", KINDS)
def test_no_input_features_on_one_and_two_threads(kind, rng, small_chunks):
    # x with 0 features: the input projection is 0 (empty sums); two threads run the groups
    # as lanes over steps that span several projection chunks (64 x 4 x 512 floats is 512 KiB
    # a step) and must not read a chunk that was never made
    B, n, T = 64, 512, 6
    p = _problem(rng, kind, B=B, nin=0, n=n, T=T, dtype=np.float32)
    p["RW"] *= 0.05
    want = _reference(kind, {k: v.astype(np.float64) for k, v in p.items()}, "tanh",
                      "sigmoid", True, None)
    results = []
    for nt in (1, 2):
        with ndws.num_threads(nt):
            out = _forward(kind, p)
        np.testing.assert_allclose(out[0].numpy(), want[0], rtol=2e-4, atol=2e-5)
        results.append([a.numpy().tobytes() for a in out])
    assert results[0] == results[1]


def test_with_and_without_a_loop_workspace_give_the_same_bits(rng):
    p = _problem(rng, "lstm", B=8, n=16, T=5)
    ws = ndws.workspace("LOOP", ndws.WorkspaceConfiguration())
    a = _forward("lstm", p)
    b = _forward("lstm", p, loop_workspace=ws)
    c = _forward("lstm", p, loop_workspace=ndws.DummyWorkspace() if hasattr(
        ndws, "DummyWorkspace") else None)
    assert all(u.numpy().tobytes() == v.numpy().tobytes() == w.numpy().tobytes()
               for u, v, w in zip(a, b, c))


def test_steady_state_allocates_nothing_with_placed_scratch(rng):
    # a layer's pattern: outputs and scratch in its workspaces, state detached
    p = _problem(rng, "lstm", B=8, nin=4, n=16, T=10, dtype=np.float32)
    conf = ndws.WorkspaceConfiguration(policy_spill="REALLOCATE")
    work = ndws.workspace("WORK", conf)
    loop = ndws.workspace("LOOP", ndws.WorkspaceConfiguration(overallocation_limit=0.05,
                                                               policy_spill="REALLOCATE"))
    h = np.zeros((8, 16), np.float32)
    c = np.zeros((8, 16), np.float32)
    mm = ndws.get_memory_manager()

    def step():
        with work:
            cache = ndws.empty(F.lstm_cache_shape(10, 8, 16, activation="tanh"), "float32")
            y, _, _ = F.lstm_forward(p["x"], p["W"], p["RW"], p["b"], h, c, activation="tanh",
                                     h_out=h, c_out=c, cache=cache, loop_workspace=loop)
            F.lstm_backward(p["x"], p["W"], p["RW"], cache, y, activation="tanh",
                            loop_workspace=loop)

    step()
    step()
    before = mm.allocation_statistics()["allocations"]
    for _ in range(5):
        step()
    assert mm.allocation_statistics()["allocations"] == before


@pytest.mark.parametrize("batch", [1, 2])
def test_state_in_place_is_rnn_time_step(batch, rng):
    # h_out / c_out may be h0 / c0: one step at a time equals the whole sequence, bit for bit
    p = _problem(rng, "lstm", B=batch, T=6)
    y_all = F.lstm_forward(p["x"], p["W"], p["RW"], p["b"], activation="tanh")[0].numpy()
    h = np.zeros((batch, 5))
    c = np.zeros((batch, 5))
    for t in range(6):
        y, _, _ = F.lstm_forward(p["x"][:, :, t:t + 1], p["W"], p["RW"], p["b"], h, c,
                                 activation="tanh", h_out=h, c_out=c)
        assert y.numpy()[:, :, 0].tobytes() == y_all[:, :, t].tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", KINDS)
def test_the_projection_in_chunks_gives_the_bits_of_single_steps(kind, dtype, rng,
                                                                small_chunks):
    # 32 examples x 256 gate columns: the forward projects 8 (float32) or 4 (float64) steps per
    # GEMM, from W packed once; one step at a time projects alone from W as it is. Same bits, with W in either
    # order, a mask, and a cache written on the way
    B, nin, n, T = 32, 24, 64, 11
    p = _problem(rng, kind, B=B, nin=nin, n=n, T=T, dtype=dtype)
    mask = (rng.random((B, T)) > 0.2).astype(dtype)
    width = (F.simple_rnn_cache_shape if kind == "simple" else F.lstm_cache_shape)(T, B, n)[2]
    for W in (p["W"], np.asfortranarray(p["W"])):
        q = dict(p, W=W)
        cache = np.empty((T, B, width), dtype)
        y_all = _forward(kind, q, mask=mask, cache=cache)[0].numpy()
        h, c = p["h0"].copy(), p["c0"].copy()
        for t in range(T):
            step = dict(q, x=p["x"][:, :, t:t + 1], h0=h.copy(), c0=c.copy())
            step_cache = np.empty((1, B, width), dtype)
            res = _forward(kind, step, mask=mask[:, t:t + 1], cache=step_cache)
            h = res[1].numpy()
            if kind != "simple":
                c = res[2].numpy()
            assert res[0].numpy()[:, :, 0].tobytes() == y_all[:, :, t].tobytes()
            assert step_cache[0].tobytes() == cache[t].tobytes()


@pytest.mark.parametrize("nt", [1, 2])
def test_a_chunk_holds_at_least_twice_w(nt, rng):
    # with no least size, W's bytes set the chunk: 2 x 64 x 64 float32 of W make chunks of
    # 32 KiB, 64 steps of 2 examples x 64 columns, so 70 steps are two chunks (W packed); the
    # bits are those of one GEMM over all steps, and the scratch holds one chunk, not 70 steps
    from ndws.nn import _rnn
    B, nin, n, T = 2, 64, 16, 70
    p = _problem(rng, "lstm", B=B, nin=nin, n=n, T=T, dtype=np.float32)
    out, scratch = [], []
    for least in (1, 1 << 30):
        previous = _rnn._use_proj_chunk_bytes(least)
        try:
            with ndws.num_threads(nt):
                out.append([a.numpy().tobytes() for a in _forward("lstm", p)])
            scratch.append(F.lstm_scratch_bytes(B, nin, n, T, cache=False))
        finally:
            _rnn._use_proj_chunk_bytes(previous)
    assert out[0] == out[1]
    # the projection's scratch: 64 steps of B x 4n floats and W packed, against all 70 steps
    packed_w = -(-la._pack_b(p["W"]).nbytes // 64) * 64
    assert scratch[1] - scratch[0] == (T - 64) * B * 4 * n * 4 - packed_w


# ------------------------------------------------------------------------------------------------
# hostile input: a clear error naming the argument, nothing written, nothing kept


def _lstm(p, **kw):
    args = dict(x=p["x"], W=p["W"], RW=p["RW"], b=p["b"])
    args.update(kw)
    return F.lstm_forward(**args)


def test_shapes_that_do_not_fit_are_refused(rng):
    p = _problem(rng, "lstm")
    cases = [
        (dict(x=p["x"][:, :, 0]), ValueError, r"x must be 3-D \(batch, n_in, time\)"),
        (dict(x=p["x"][..., None]), ValueError, "x must be 3-D"),
        (dict(W=p["W"][:3]), ValueError, r"x has 4 features .* W has shape \(3, 20\)"),
        (dict(W=p["W"][:, :19]), ValueError, r"W must have shape \(n_in, 20\)"),
        (dict(RW=p["RW"][:, :19]), ValueError, r"RW must have shape \(5, 20\)"),
        (dict(RW=np.zeros((5, 23))), ValueError, "peepholes=True takes 3 more columns"),
        (dict(RW=np.zeros((0, 0))), ValueError, "n_out >= 1"),
        (dict(b=p["b"][:19]), ValueError, r"b must have shape \(20,\) or \(1, 20\)"),
        (dict(h0=p["h0"][:2]), ValueError, r"h0 must have shape \(3, 5\)"),
        (dict(c0=p["c0"].T), ValueError, r"c0 must have shape \(3, 5\)"),
        (dict(mask=np.ones((3, 5))), ValueError, r"mask must have shape \(batch, time\)"),
        (dict(mask=np.ones(18)), ValueError, "mask must have shape"),
        (dict(mask=np.array([["a"] * 6] * 3)), TypeError, "mask must be an array of numbers"),
        (dict(data_format="NHWC"), ValueError, "data_format must be 'NCW' or 'NWC'"),
        (dict(activation="softmax"), ValueError, "activation must be an elementwise"),
        (dict(gate_activation="nope"), ValueError, "unknown activation 'nope'"),
        (dict(x=p["x"].astype(np.int64)), TypeError, "x must be a float32 or float64"),
        (dict(x=p["x"].astype(np.float16)), TypeError, "x must be a float32 or float64"),
        (dict(W=p["W"].astype(np.float32)), TypeError, "W has dtype float32, expected float64"),
        (dict(x="abc"), TypeError, "x must be"),
        (dict(loop_workspace="LOOP"), TypeError, "loop_workspace must be an ndws.Workspace"),
        (dict(out=np.zeros((3, 5, 5))), ValueError, r"out has shape \(3, 5, 5\)"),
        (dict(out=np.zeros((3, 5, 6), np.float32)), TypeError, "out has dtype float32"),
        (dict(h_out=np.zeros((3, 5))[:, :1]), ValueError, "h_out has shape"),
        (dict(cache=np.zeros((6, 3, 34))), ValueError, r"cache must have shape \(6, 3, 35\)"),
        (dict(cache=np.zeros((6, 3, 70))[:, :, ::2]), ValueError, "cache must be C-contiguous"),
        (dict(scratch=np.zeros(10, np.uint8)), ValueError, "scratch has 10 bytes"),
        (dict(scratch=np.zeros((10, 10_000), np.uint8)[:, ::2]), ValueError,
         "scratch must be C-contiguous"),
    ]
    ws = ndws.workspace("CHECK", ndws.WorkspaceConfiguration(initial_size=1 << 20))
    for kw, err, msg in cases:
        with ws:
            used = ws.this_cycle_allocations
            with pytest.raises(err, match=msg):
                _lstm(p, **kw)
            assert ws.this_cycle_allocations == used, kw      # nothing kept


def test_huge_sizes_are_refused_before_allocating(rng):
    x = np.lib.stride_tricks.as_strided(np.zeros(1), shape=(1 << 25, 2, 1 << 25),
                                        strides=(0, 0, 0))
    with pytest.raises(ValueError, match="too large"):
        F.lstm_forward(x, np.zeros((2, 8)), np.zeros((2, 8)), np.zeros(8))
    with pytest.raises(ValueError, match="too large"):
        F.lstm_scratch_bytes(1 << 40, 2, 2, 1 << 20)
    with pytest.raises(ValueError, match="n_out must be >= 1"):
        F.lstm_cache_shape(5, 3, 0)
    with pytest.raises(TypeError, match="batch must be an int"):
        F.simple_rnn_scratch_bytes(2.5, 3, 4, 5)
    with pytest.raises(TypeError, match="dtype must be float32 or float64"):
        F.lstm_scratch_bytes(2, 3, 4, 5, dtype=np.int32)


def test_backward_arguments_are_checked(rng):
    p = _problem(rng, "lstm")
    cache = np.empty(F.lstm_cache_shape(6, 3, 5))
    F.lstm_forward(p["x"], p["W"], p["RW"], p["b"], cache=cache)
    gy = np.ones((3, 5, 6))
    bwd = lambda **kw: F.lstm_backward(**dict(dict(x=p["x"], W=p["W"], RW=p["RW"],  # noqa
                                                   cache=cache, grad_output=gy), **kw))
    with pytest.raises(TypeError, match="cache is required"):
        bwd(cache=None)
    with pytest.raises(TypeError, match="grad_output is required"):
        bwd(grad_output=None)
    with pytest.raises(ValueError, match=r"grad_output must have shape \(3, 5, 6\)"):
        bwd(grad_output=np.ones((3, 5, 7)))      # lengths that disagree
    with pytest.raises(ValueError, match=r"cache must have shape \(6, 3, 55\)"):
        bwd(activation="softsign")                # not the forward's activations
    with pytest.raises(ValueError, match="back_length must be >= 0"):
        bwd(back_length=-1)
    with pytest.raises(TypeError, match="back_length must be an int"):
        bwd(back_length=True)
    with pytest.raises(ValueError, match=r"grad_h must have shape \(3, 5\)"):
        bwd(grad_h=np.ones((3, 4)))
    ws = ndws.workspace("BWD", ndws.WorkspaceConfiguration(initial_size=1 << 20))
    with ws:
        used = ws.this_cycle_allocations
        buf = np.zeros((5, 20))
        with pytest.raises(ValueError, match="grad_h0 and grad_RW overlap"):
            bwd(grad_RW=buf, grad_h0=buf[:3, :5])
        assert ws.this_cycle_allocations == used and not buf.any()
    with pytest.raises(ValueError, match="cache is read-only"):
        ro = cache.copy()
        ro.flags.writeable = False
        F.lstm_forward(p["x"], p["W"], p["RW"], p["b"], cache=ro)
    with pytest.raises(ValueError, match="cache overlaps an input"):
        F.lstm_forward(p["x"], p["W"], p["RW"], p["b"], cache=cache, h0=cache[0, :, :5])


def test_out_aliasing_an_input_is_computed_through_a_temporary(rng):
    # out=x (n_in == n_out) and the state in place: the result of fresh outputs, x untouched
    # until the end
    p = _problem(rng, "simple", nin=5, n=5)
    want = F.simple_rnn_forward(p["x"], p["W"], p["RW"], p["b"], p["h0"],
                                activation="tanh")
    x = p["x"].copy()
    h0 = p["h0"].copy()
    y, h = F.simple_rnn_forward(x, p["W"], p["RW"], p["b"], h0, activation="tanh", out=x,
                                h_out=h0)
    assert y is x and h is h0
    assert np.array_equal(x, want[0].numpy()) and np.array_equal(h0, want[1].numpy())
    q = _problem(rng, "lstm")
    RW = q["RW"].copy()
    ref = F.lstm_forward(q["x"], q["W"], RW, q["b"])[1].numpy()
    F.lstm_forward(q["x"], q["W"], RW, q["b"], h_out=RW[:3, :5])      # the weights themselves
    assert np.array_equal(RW[:3, :5], ref)


def test_stale_arrays_and_a_busy_loop_workspace_raise_workspace_error(rng):
    p = _problem(rng, "lstm")
    ws = ndws.workspace("W", ndws.WorkspaceConfiguration(initial_size=1 << 16))
    with ws:
        x = ndws.asarray(p["x"])
    with pytest.raises(ndws.WorkspaceError, match=r"Op \[lstm_forward\] x argument uses leaked"):
        _lstm(p, x=x)
    with ws:
        out = ndws.empty((3, 5, 6))
    with pytest.raises(ndws.WorkspaceError, match="out argument uses leaked"):
        _lstm(p, out=out)
    loop = ndws.workspace("L", ndws.WorkspaceConfiguration())
    with loop:
        with pytest.raises(ndws.WorkspaceError,
                           match=r"lstm_forward: loop_workspace \[L\] is open"):
            _lstm(p, loop_workspace=loop)
        assert loop.cycles_count == 0
    ring = ndws.workspace("R", ndws.WorkspaceConfiguration(policy_reset="ENDOFBUFFER_REACHED",
                                                           overallocation_limit=1.0))
    with pytest.raises(ndws.WorkspaceError, match="circular"):
        _lstm(p, loop_workspace=ring)


def test_a_refused_loop_workspace_is_named_with_the_kernel(rng, foreign_workspace):
    # every refusal names the call and its `loop_workspace` argument, and changes nothing
    p = _problem(rng, "simple")
    cache = np.empty(F.simple_rnn_cache_shape(6, 3, 5, activation="tanh"))
    F.simple_rnn_forward(p["x"], p["W"], p["RW"], p["b"], cache=cache)
    gy = rng.standard_normal((3, 5, 6))
    calls = {"simple_rnn_forward": lambda ws: F.simple_rnn_forward(
                 p["x"], p["W"], p["RW"], p["b"], loop_workspace=ws),
             "simple_rnn_backward": lambda ws: F.simple_rnn_backward(
                 p["x"], p["W"], p["RW"], cache, gy, loop_workspace=ws)}
    theirs, _ = foreign_workspace("THEIRS")
    tight = ndws.workspace("TIGHT", ndws.WorkspaceConfiguration(
        initial_size=64, policy_allocation="STRICT", policy_spill="FAIL"))
    ring = ndws.workspace("RING", ndws.WorkspaceConfiguration(
        policy_reset="ENDOFBUFFER_REACHED", overallocation_limit=1.0))
    for op, call in calls.items():
        for ws, kind, message in [
                (theirs, "thread", rf"{op}: loop_workspace \[THEIRS\] belongs to thread \d+ "
                                   rf"and can't be entered from thread \d+$"),
                (tight, "full", rf"{op}: loop_workspace \[TIGHT\]: Can't allocate memory: "
                                rf"Workspace is full$"),
                (ring, "configuration", rf"{op}: loop_workspace \[RING\] is circular")]:
            with pytest.raises(ndws.WorkspaceError, match=message) as e:
                call(ws)
            assert (e.value.kind, e.value.op) == (kind, op)
            assert ws.cycles_count == 0


def test_a_failed_call_inside_a_workspace_gives_everything_back(rng):
    p = _problem(rng, "lstm")
    ws = ndws.workspace("ROLLBACK", ndws.WorkspaceConfiguration(initial_size=1 << 20))
    tight = ndws.workspace("TIGHT", ndws.WorkspaceConfiguration(
        initial_size=64, policy_allocation="STRICT", policy_spill="FAIL"))
    with ws:
        used = ws.this_cycle_allocations
        with pytest.raises(ndws.WorkspaceError, match="Workspace is full"):
            _lstm(p, loop_workspace=tight)
        assert ws.this_cycle_allocations == used and tight.cycles_count == 0


def test_public_surface():
    for name in ("lstm_forward", "lstm_backward", "simple_rnn_forward", "simple_rnn_backward",
                 "lstm_cache_shape", "simple_rnn_cache_shape", "lstm_scratch_bytes",
                 "simple_rnn_scratch_bytes"):
        assert name in F.__all__ and getattr(F, name).__doc__
    import pathlib
    assert F.lstm_forward.__module__ == "ndws.nn._rnn_entries"
    stub = (pathlib.Path(F.__file__).parent / "_rnn_entries.pyi").read_text()
    assert all(f"def {name}(" in stub for name in [
        "lstm_forward", "lstm_backward", "simple_rnn_forward", "simple_rnn_backward",
        "lstm_cache_shape", "simple_rnn_cache_shape", "lstm_scratch_bytes",
        "simple_rnn_scratch_bytes"])


def test_docstring_examples():
    import doctest
    from ndws.nn import _rnn_entries
    failures, tried = doctest.testmod(_rnn_entries, optionflags=doctest.ELLIPSIS)
    assert tried > 0 and failures == 0
