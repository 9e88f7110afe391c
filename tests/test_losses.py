"""ndws.nn.functional losses and their gradients against NumPy references."""
from __future__ import annotations

import numpy as np
import pytest

import ndws
import ndws.nn.functional as F
from test_activations import _progress_during

DTYPES = [np.float32, np.float64]
#: (rtol, atol) per dtype, loss and gradient vs the float64 NumPy reference (data, not code)
TOL = {np.dtype(np.float32): (1e-5, 1e-6), np.dtype(np.float64): (1e-12, 1e-15)}
#: the elementwise losses DL4J added (one value per output)
NEW_EW = ["hinge", "sq_hinge", "kld", "poisson", "msle", "mape", "wasserstein"]
LOSSES = ["sce", "sce_int", "bce", "mse", "mae", "cosine"] + NEW_EW
EPS = 1e-5          # ND4J's Nd4j.EPS_THRESHOLD


def _log_softmax(x):
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def reference(kind, x, t, w=None, m=None, reduction="mean"):
    """NumPy loss and gradient (float64), the documented definitions."""
    x = x.astype(np.float64)
    n = x.shape[0]
    c = x.shape[1] if x.ndim == 2 else 1
    wv = np.ones(n) if w is None else w.astype(np.float64)
    if kind == "cosine":
        t = t.astype(np.float64)
        coef = wv * (np.ones(n) if m is None else m.astype(np.float64))
        dot = (x * t).sum(axis=1)
        nx, nt = np.linalg.norm(x, axis=1), np.linalg.norm(t, axis=1)
        den_i = np.maximum(nx, EPS) * np.maximum(nt, EPS)
        proj = np.where(nx >= EPS, dot / np.where(nx > 0, nx * nx, 1), 0.0)
        li = coef * -dot / den_i
        grad = coef[:, None] * -(t - proj[:, None] * x) / den_i[:, None]
        den = n if m is None else m.sum()
        none_shape = (n,)
    elif kind.startswith("sce"):
        q = np.eye(c)[t] if kind == "sce_int" else t.astype(np.float64)
        per_ex_mask = np.ones(n)
        if m is not None and m.ndim == 1:
            per_ex_mask = m.astype(np.float64)
        elif m is not None:
            q = q * m
        coef = wv * per_ex_mask
        lsm = _log_softmax(x)
        terms = np.where(q != 0, -q * lsm, 0.0)
        li = coef * terms.sum(axis=1)
        grad = coef[:, None] * (q.sum(axis=1, keepdims=True) * np.exp(lsm) - q)
        if m is None:
            den = n
        elif m.ndim == 1:
            den = m.sum()
        else:
            den = np.count_nonzero(np.any(m != 0, axis=1))
        none_shape = (n,)
    else:
        t = t.astype(np.float64)
        if kind == "bce":
            l = np.maximum(x, 0) - x * t + np.log1p(np.exp(-np.abs(x)))
            dl = 1 / (1 + np.exp(-x)) - t
        elif kind == "mse":
            l, dl = (x - t) ** 2, 2 * (x - t)
        elif kind == "mae":
            l, dl = np.abs(x - t), np.sign(x - t)
        elif kind in ("hinge", "sq_hinge"):
            h = np.maximum(0, 1 - t * x)
            l, dl = (h, np.where(h > 0, -t, 0.0)) if kind == "hinge" else (h * h, -2 * t * h)
        elif kind == "kld":
            tc, xc = np.clip(t, EPS, 1), np.clip(x, EPS, 1)
            l, dl = tc * np.log(tc / xc), -tc / np.maximum(x, EPS)
        elif kind == "poisson":
            with np.errstate(divide="ignore", invalid="ignore"):
                l = np.where(t == 0, x, x - t * np.log(x))
                dl = np.where(t == 0, 1.0, 1 - t / x)
        elif kind == "msle":
            r = np.log1p(x) - np.log1p(t)
            l, dl = r * r, 2 * r / (1 + x)
        elif kind == "mape":
            d = np.maximum(np.abs(t), EPS)
            l, dl = 100 * np.abs(x - t) / d, 100 * np.sign(x - t) / d
        else:
            l, dl = t * x, t
        mm = np.ones_like(x) if m is None else m.astype(np.float64)
        if m is not None and m.ndim == 1 and x.ndim == 2:
            mm = np.broadcast_to(mm[:, None], x.shape)
        wb = wv if x.ndim == 1 else wv[:, None]
        li = wb * mm * l
        grad = wb * mm * dl
        den = x.size if m is None else mm.sum()
        none_shape = x.shape
    total = li.sum()
    if reduction == "mean":
        scale = 1.0 / den if den != 0 else 0.0
        return total * scale, grad * scale
    if reduction == "sum":
        return total, grad
    return li.reshape(none_shape), grad


def make(kind, n, c, dtype, rng):
    x = (rng.standard_normal((n, c)) * 3).astype(dtype)
    if kind == "sce":
        t = rng.random((n, c)).astype(dtype)
        t /= t.sum(axis=1, keepdims=True)
    elif kind == "sce_int":
        t = rng.integers(0, c, n)
    elif kind == "bce":
        t = rng.random((n, c)).astype(dtype)
    elif kind in ("hinge", "sq_hinge", "wasserstein"):
        t = np.where(rng.random((n, c)) < 0.5, -1.0, 1.0).astype(dtype)
        x = (x / 2).astype(dtype)
    elif kind == "kld":
        x = (rng.random((n, c)) * 0.9 + 0.05).astype(dtype)
        t = rng.random((n, c)).astype(dtype)
        t /= t.sum(axis=1, keepdims=True)
    elif kind == "poisson":
        x = (rng.random((n, c)) * 3 + 0.1).astype(dtype)
        t = rng.integers(0, 4, (n, c)).astype(dtype)          # zero counts included
    elif kind == "msle":
        x = (rng.random((n, c)) * 3).astype(dtype)
        t = (rng.random((n, c)) * 3).astype(dtype)
    elif kind == "mape":
        t = ((rng.random((n, c)) + 0.5) * np.where(rng.random((n, c)) < 0.5, -1, 1)).astype(dtype)
    else:
        t = rng.standard_normal((n, c)).astype(dtype)
    return x, t


FN = {"sce": F.softmax_cross_entropy, "sce_int": F.softmax_cross_entropy,
      "bce": F.binary_cross_entropy_with_logits, "mse": F.mse_loss, "mae": F.mae_loss,
      "cosine": F.cosine_proximity_loss, "hinge": F.hinge_loss,
      "sq_hinge": F.squared_hinge_loss, "kld": F.kl_divergence_loss, "poisson": F.poisson_loss,
      "msle": F.msle_loss, "mape": F.mape_loss, "wasserstein": F.wasserstein_loss}


def _check(kind, dtype, got, exp):
    rtol, atol = TOL[np.dtype(dtype)]
    loss, grad = got
    eloss, egrad = exp
    if isinstance(loss, ndws.NDArray):
        assert loss.dtype == np.dtype(dtype)
        np.testing.assert_allclose(loss.numpy(), eloss, rtol=rtol, atol=atol)
    else:
        assert type(loss) is float
        np.testing.assert_allclose(loss, eloss, rtol=rtol, atol=atol)
    assert isinstance(grad, ndws.NDArray) and grad.dtype == np.dtype(dtype)
    np.testing.assert_allclose(grad.numpy(), egrad, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", LOSSES)
@pytest.mark.parametrize("n,c", [(1, 1), (7, 3), (65, 10), (257, 7)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses_match_numpy(kind, dtype, n, c, reduction, rng):
    x, t = make(kind, n, c, dtype, rng)
    got = FN[kind](ndws.array(x), ndws.array(t), reduction=reduction)
    _check(kind, dtype, got, reference(kind, x, t, reduction=reduction))
    loss_only = FN[kind](x, t, reduction=reduction, grad=False)
    if reduction == "none":
        np.testing.assert_array_equal(loss_only.numpy(), got[0].numpy())
    else:
        assert loss_only == got[0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", LOSSES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_weights_and_masks(kind, dtype, reduction, rng):
    n, c = 9, 4
    x, t = make(kind, n, c, dtype, rng)
    w = rng.random(n).astype(dtype) + 0.5
    m_ex = (rng.random(n) > 0.3).astype(dtype)
    m_out = (rng.random((n, c)) > 0.4).astype(dtype)
    m_out[2] = 0                                   # a fully masked row
    for wv, mv in [(w, None), (None, m_ex), (None, m_out), (w, m_ex), (w, m_out)]:
        if kind == "cosine" and mv is m_out:
            continue                               # per example only (below)
        got = FN[kind](x, t, weights=wv, mask=mv, reduction=reduction)
        _check(kind, dtype, got, reference(kind, x, t, wv, mv, reduction))


@pytest.mark.parametrize("kind", ["bce", "mse", "mae"] + NEW_EW)
def test_one_dimensional_predictions(kind, rng):
    x, t = make(kind, 11, 1, np.float64, rng)
    x, t = x[:, 0], t[:, 0]
    m = (rng.random(11) > 0.3).astype(np.float64)
    w = rng.random(11)
    for reduction in ("mean", "sum", "none"):
        got = FN[kind](x, t, weights=w, mask=m, reduction=reduction)
        _check(kind, np.float64, got, reference(kind, x, t, w, m, reduction))
        assert got[1].shape == (11,)


def test_masked_entries_contribute_nothing_even_if_nan(rng):
    x, t = make("sce_int", 6, 5, np.float64, rng)
    x[1] = np.nan
    m = np.ones(6)
    m[1] = 0
    loss, grad = F.softmax_cross_entropy(x, t, mask=m)
    assert np.isfinite(loss) and np.all(grad.numpy()[1] == 0)
    clean = np.delete(x, 1, axis=0)
    np.testing.assert_allclose(loss, F.softmax_cross_entropy(clean, np.delete(t, 1),
                                                             grad=False), rtol=1e-13)
    # fully masked batch: 0 and a zero gradient (documented; torch gives NaN)
    loss, grad = F.mse_loss(x, x, mask=np.zeros(6))
    assert loss == 0.0 and not grad.numpy().any()


def test_impossible_classes_and_nan_logits():
    # -inf logit of a class with label 0: finite loss (0 * log 0 = 0)
    x = np.array([[0.0, -np.inf, 1.0]])
    loss, grad = F.softmax_cross_entropy(x, np.array([[0.0, 0.0, 1.0]]))
    assert np.isfinite(loss) and np.isfinite(grad.numpy()).all()
    loss, grad = F.softmax_cross_entropy(np.array([[0.0, np.nan]]), np.array([0]))
    assert np.isnan(loss) and np.isnan(grad.numpy()).all()
    # BCE is stable for huge logits
    big = np.array([[1e4, -1e4]], dtype=np.float32)
    loss, grad = F.binary_cross_entropy_with_logits(big, np.array([[0.0, 1.0]], np.float32),
                                                    reduction="none")
    np.testing.assert_array_equal(loss.numpy(), [[1e4, 1e4]])
    np.testing.assert_array_equal(grad.numpy(), [[1.0, -1.0]])
    loss, grad = F.mse_loss(np.array([np.nan, 1.0]), np.array([0.0, 0.0]))
    assert np.isnan(loss) and np.isnan(grad.numpy()[0]) and grad.numpy()[1] == 1.0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", LOSSES)
def test_strided_inputs_and_grad_out(kind, dtype, rng):
    x, t = make(kind, 14, 6, dtype, rng)
    xs = x[::-2, ::2]
    ts = t[::-2] % 3 if kind == "sce_int" else t[::-2, ::2]
    if kind == "sce":
        ts = ts / ts.sum(axis=1, keepdims=True)
    exp = reference(kind, xs, ts)
    _check(kind, dtype, FN[kind](ndws.array(x)[::-2, ::2], ts), exp)
    # gradient into the logits themselves (in place) and into a strided view
    a = ndws.array(xs)
    loss, g = FN[kind](a, ts, grad_out=a)
    assert g is a
    _check(kind, dtype, (loss, a), exp)
    big = ndws.zeros((7, 6), dtype=dtype)
    loss, g = FN[kind](xs, ts, grad_out=big[:, ::-2])
    _check(kind, dtype, (loss, big[:, ::-2]), exp)
    assert not big.numpy()[:, ::2].any()
    # a gradient buffer overlapping the logits shifted: computed via a temporary
    xx = ndws.array(np.concatenate([x[:7, :3], x[:1, :3]]))
    tt = t[:7] % 3 if kind == "sce_int" else t[:7, :3]
    if kind == "sce":
        tt = tt / tt.sum(axis=1, keepdims=True)
    exp = reference(kind, x[:7, :3], tt)
    loss, g = FN[kind](xx[:7], tt, grad_out=xx[1:])
    _check(kind, dtype, (loss, xx[1:]), exp)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("labels", ["probabilities", "one-hot", "index"])
def test_softmax_cross_entropy_contiguous_rows_give_the_strided_bits(labels, dtype, rng):
    # contiguous rows run per-instruction-set loops (their exponentials and the gradient),
    # strided ones the scalar code: the same expressions, so the same loss and gradient bits,
    # at widths around every vector width, with -inf, huge and tiny logits in some rows
    for c in (1, 3, 16, 17, 77, 300):
        x = (rng.standard_normal((9, c)) * 4).astype(dtype)
        x[2, -1] = 80.0
        x[3, :] = -1e-30
        ids = rng.integers(0, c, 9)
        if c > 1:
            x[1, 0] = -np.inf    # an impossible class: never row 1's label
            ids[1] = c - 1
        if labels == "index":
            t = ids
        elif labels == "one-hot":
            t = np.eye(c, dtype=dtype)[ids]
        else:
            t = rng.random((9, c)).astype(dtype) + dtype(0.01)
            if c > 1:
                t[1, 0] = 0
            t /= t.sum(axis=1, keepdims=True)
        got = F.softmax_cross_entropy(ndws.array(x), t, reduction="sum")
        xs = ndws.array(np.asfortranarray(x))                 # column-major: strided rows
        ts = np.asfortranarray(t) if labels != "index" else t
        ref = F.softmax_cross_entropy(xs, ts, reduction="sum")
        assert np.isfinite(got[0]) and got[0] == ref[0]
        np.testing.assert_array_equal(got[1].numpy(), ref[1].numpy())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["bce", "mse", "mae"] + NEW_EW)
def test_elementwise_contiguous_rows_give_the_strided_bits(kind, dtype, rng):
    # contiguous unmasked rows run each loss a block at a time in a loop of its own (vectorised),
    # strided ones element by element: the same element function, the same sums in the same
    # order, so the same loss, gradient and per-example losses to the bit (rows wider than a
    # block included), and the values against NumPy's
    x, t = make(kind, 5, 700, dtype, rng)
    if kind in ("bce", "mse", "mae"):
        x[0, :4] = [0.0, -0.0, 40.0, -40.0]
    got = FN[kind](ndws.array(x), t, reduction="sum")
    ref = FN[kind](ndws.array(np.asfortranarray(x)), np.asfortranarray(t), reduction="sum")
    assert got[0] == ref[0]
    np.testing.assert_array_equal(got[1].numpy(), ref[1].numpy())
    assert got[1].numpy().tobytes() == np.ascontiguousarray(ref[1].numpy()).tobytes()
    _check(kind, dtype, FN[kind](ndws.array(x), t), reference(kind, x, t))


@pytest.mark.parametrize("kind", LOSSES)
@pytest.mark.parametrize("masked", [False, True])
def test_gradients_by_finite_differences(kind, masked, rng):
    x, t = make(kind, 5, 4, np.float64, rng)
    away = np.where(rng.random(x.shape) > 0.5, 1, -1) * (0.1 + rng.random(x.shape))
    if kind in ("mae", "mape"):
        x = t + away                                    # away from the kink at p == t
    if kind in ("hinge", "sq_hinge"):
        x = t * (1 + away)                              # away from the kink at t*p == 1
    w = rng.random(5) + 0.5 if masked else None
    m = (rng.random((5, 4)) > 0.3).astype(np.float64) if masked else None
    if kind == "cosine" and masked:
        m = (rng.random(5) > 0.3).astype(np.float64)
    fn = FN[kind]
    h = 1e-6
    num = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        num[idx] = (fn(xp, t, weights=w, mask=m, grad=False)
                    - fn(xm, t, weights=w, mask=m, grad=False)) / (2 * h)
    _, grad = fn(x, t, weights=w, mask=m)
    np.testing.assert_allclose(grad.numpy(), num, rtol=1e-6, atol=1e-9)


def test_loss_errors():
    x = ndws.zeros((3, 4))
    with pytest.raises(ValueError, match=r"softmax_cross_entropy: labels\[1\] = 4 is out of "
                                         r"range for 4 classes"):
        F.softmax_cross_entropy(x, np.array([0, 4, 1]))
    with pytest.raises(ValueError, match=r"labels\[0\] = -1 is out of range"):
        F.softmax_cross_entropy(x, np.array([-1, 0, 1], dtype=np.int32))
    with pytest.raises(TypeError, match=r"integer labels must be int32 or int64, got dtype "
                                        r"int16"):
        F.softmax_cross_entropy(x, np.array([0, 1, 1], dtype=np.int16))
    with pytest.raises(ValueError, match=r"integer labels must have shape \(3,\), got \(2,\)"):
        F.softmax_cross_entropy(x, np.array([0, 1]))
    with pytest.raises(ValueError, match=r"logits must be 2-D \(n_samples, n_classes\), got "
                                         r"shape \(3,\)"):
        F.softmax_cross_entropy(ndws.zeros(3), np.array([0, 1, 1]))
    with pytest.raises(ValueError, match=r"mse_loss: target has shape \(4, 3\), expected "
                                         r"\(3, 4\) \(the shape of pred\)"):
        F.mse_loss(x, ndws.zeros((4, 3)))
    with pytest.raises(TypeError, match=r"mse_loss: target has dtype float32, expected float64"):
        F.mse_loss(x, ndws.zeros((3, 4), dtype=np.float32))
    with pytest.raises(TypeError, match=r"mae_loss: pred must be a float32 or float64 array"):
        F.mae_loss(ndws.zeros((3, 4), dtype=np.int32), x)
    with pytest.raises(ValueError, match=r"weights must have shape \(3,\), got \(4,\)"):
        F.mse_loss(x, x, weights=np.ones(4))
    with pytest.raises(TypeError, match=r"weights has dtype float32, expected float64"):
        F.mse_loss(x, x, weights=np.ones(3, np.float32))
    with pytest.raises(ValueError, match=r"mask must have shape \(3,\) or \(3, 4\), got "
                                         r"\(4,\)"):
        F.mse_loss(x, x, mask=np.ones(4))
    with pytest.raises(ValueError, match=r"reduction must be 'mean', 'sum' or 'none', got "
                                         r"'avg'"):
        F.mse_loss(x, x, reduction="avg")
    with pytest.raises(ValueError, match=r"binary_cross_entropy_with_logits: logits must be "
                                         r"\(n_samples,\) or \(n_samples, n_outputs\)"):
        F.binary_cross_entropy_with_logits(ndws.zeros((2, 2, 2)), ndws.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match=r"mse_loss: grad_out has shape \(3,\), expected "
                                         r"\(3, 4\)"):
        F.mse_loss(x, x, grad_out=ndws.zeros(3))
    # lists are converted to the predictions' dtype
    loss = F.mse_loss(np.zeros((2, 2), np.float32), [[1, 1], [1, 1]], grad=False)
    assert loss == 1.0


def test_placement_and_stale_arrays(rng):
    x, t = make("sce_int", 8, 3, np.float64, rng)
    with ndws.workspace("LOSS_WS"):
        loss, g = F.softmax_cross_entropy(x, t)
        assert g.workspace_id == "LOSS_WS"
        per, g2 = F.mse_loss(x, x, reduction="none")
        assert per.workspace_id == "LOSS_WS" and g2.workspace_id == "LOSS_WS"
        stale = ndws.array(x)
        lab = ndws.array(t)
    for call in [lambda: F.softmax_cross_entropy(stale, t),
                 lambda: F.softmax_cross_entropy(x, lab),
                 lambda: F.mse_loss(x, stale),
                 lambda: F.mse_loss(x, x, weights=stale[:, 0]),
                 lambda: F.mse_loss(x, x, mask=stale),
                 lambda: F.mse_loss(x, x, grad_out=stale)]:
        with pytest.raises(ndws.WorkspaceError, match=r"argument uses leaked workspace "
                                                      r"pointer from workspace \[LOSS_WS\]"):
            call()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", LOSSES)
def test_one_and_two_threads_bit_identical(kind, dtype, rng):
    x, t = make(kind, 4001, 37, dtype, rng)
    m = (rng.random(4001) > 0.2).astype(dtype)
    with ndws.num_threads(1):
        l1, g1 = FN[kind](x, t, mask=m)
    with ndws.num_threads(2):
        l2, g2 = FN[kind](x, t, mask=m)
    assert l1 == l2
    assert g1.numpy().tobytes() == g2.numpy().tobytes()


def test_gil_released_during_long_loss():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((40_000, 100))
    t = rng.integers(0, 100, 40_000)
    with ndws.num_threads(1):
        assert _progress_during(lambda: F.softmax_cross_entropy(x, t)) > 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_dl4j_losses_are_safe_where_nd4j_divides_by_zero(dtype):
    z = np.array([[0.0, 1.0]], dtype=dtype)
    half = np.array([[0.5, 0.5]], dtype=dtype)
    # KL divergence at a zero probability: ND4J's gradient -t/p is -inf; here -t'/1e-5
    loss, g = F.kl_divergence_loss(z, half, reduction="sum")
    assert np.isfinite(loss) and np.all(np.isfinite(g.numpy()))
    np.testing.assert_allclose(g.numpy(), [[-0.5 / EPS, -0.5]], rtol=1e-6)
    # Poisson: 0 log 0 = 0 (a zero count at a zero rate adds nothing, gradient 1); a positive
    # count at a zero rate is honestly infinite
    loss, g = F.poisson_loss(np.zeros((1, 2), dtype), np.zeros((1, 2), dtype), reduction="none")
    assert loss.tolist() == [[0.0, 0.0]] and g.tolist() == [[1.0, 1.0]]
    loss, g = F.poisson_loss(np.zeros((1, 1), dtype), np.ones((1, 1), dtype))
    assert loss == np.inf and g.tolist() == [[-np.inf]]
    # MAPE at a zero target: |t| floored at 1e-5 (ND4J: inf, or NaN at p == t == 0)
    loss, g = F.mape_loss(np.array([[1.0, 0.0]], dtype), np.zeros((1, 2), dtype),
                          reduction="none")
    np.testing.assert_allclose(loss.numpy(), [[100 / EPS, 0.0]], rtol=1e-6)
    np.testing.assert_allclose(g.numpy(), [[100 / EPS, 0.0]], rtol=1e-6)
    # cosine proximity of a zero vector (either side): finite, the norms floored at 1e-5
    loss, g = F.cosine_proximity_loss(np.array([[0.0, 0.0], [3.0, 4.0]], dtype),
                                      np.array([[1.0, 2.0], [0.0, 0.0]], dtype),
                                      reduction="none")
    assert loss.tolist() == [0.0, 0.0]
    np.testing.assert_allclose(g.numpy()[0], [-1 / (EPS * 5 ** 0.5), -2 / (EPS * 5 ** 0.5)],
                               rtol=1e-6)
    assert g.numpy()[1].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("kind", ["cosine"] + NEW_EW)
def test_dl4j_losses_nan_and_masks(kind, rng):
    x, t = make(kind, 4, 3, np.float64, rng)
    x[1, 1] = np.nan
    if kind == "poisson":
        t[1, 1] = 2.0          # at a zero count the loss is p itself: gradient 1, whatever p
    loss, g = FN[kind](x, t, reduction="none")
    g = g.numpy()
    per = loss.numpy()
    rows = per if per.ndim == 1 else per.sum(axis=1)
    assert np.isnan(rows[1]) and np.all(np.isfinite(np.delete(rows, 1)))   # NaN stays NaN
    assert np.all(np.isfinite(np.delete(g, 1, axis=0)))
    # (Wasserstein's gradient is the label, whatever the prediction)
    assert np.isnan(g[1, 1]) if kind != "wasserstein" else g[1, 1] == t[1, 1]
    # a masked-out example contributes exactly 0, NaN or not
    m = np.array([1.0, 0.0, 1.0, 1.0])
    loss, g = FN[kind](x, t, mask=m)
    assert np.isfinite(loss) and not g.numpy()[1].any()
    np.testing.assert_allclose(loss, FN[kind](np.delete(x, 1, 0), np.delete(t, 1, 0),
                                              grad=False), rtol=1e-13)
    # a fully masked batch: 0 and a zero gradient
    loss, g = FN[kind](x, t, mask=np.zeros(4))
    assert loss == 0.0 and not g.numpy().any()


def test_cosine_proximity_errors():
    x = np.ones((3, 4))
    out = ndws.zeros((3, 4))
    with pytest.raises(ValueError, match=r"^cosine_proximity_loss: mask must have shape "
                                         r"\(3,\) \(one value per example: the cosine "
                                         r"proximity has no per-output mask\), got \(3, 4\)$"):
        F.cosine_proximity_loss(x, x, mask=np.ones((3, 4)), grad_out=out)
    with pytest.raises(ValueError, match=r"^cosine_proximity_loss: pred must be 2-D "
                                         r"\(n_samples, n_outputs\), got shape \(3,\)$"):
        F.cosine_proximity_loss(np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match=r"^hinge_loss: target has shape \(4, 3\), expected "
                                         r"\(3, 4\) \(the shape of pred\)$"):
        F.hinge_loss(x, np.ones((4, 3)))
    with pytest.raises(TypeError, match=r"^kl_divergence_loss: pred must be a float32 or "
                                        r"float64 array, got dtype int64$"):
        F.kl_divergence_loss(np.ones((3, 4), np.int64), x)
    with pytest.raises(ValueError, match=r"^poisson_loss: pred must be \(n_samples,\) or "
                                         r"\(n_samples, n_outputs\), got shape \(2, 2, 2\)$"):
        F.poisson_loss(np.ones((2, 2, 2)), np.ones((2, 2, 2)))
    # the gradient buffer's errors name the predictions (not "logits")
    with pytest.raises(ValueError, match=r"^msle_loss: grad_out has shape \(3,\), expected "
                                         r"\(3, 4\) \(the shape of pred\)$"):
        F.msle_loss(x, x, grad_out=np.zeros(3))
    with pytest.raises(TypeError, match=r"^wasserstein_loss: grad_out has dtype float32, "
                                        r"expected float64 \(the dtype of pred\)$"):
        F.wasserstein_loss(x, x, grad_out=np.zeros((3, 4), np.float32))
    assert not out.numpy().any()
