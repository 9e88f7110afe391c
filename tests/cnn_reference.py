"""Independent NumPy references for the layers of images (float64, loops over kernel taps,
DL4J's size formulas written out again), the central-difference gradient check of DL4J's
GradientCheckUtil, and the check that every workspace mode trains a network alike, for the
layer and network tests."""
from __future__ import annotations

import numpy as np


def out_and_pads(mode: str, size: int, k: int, s: int, p: int, d: int) -> tuple:
    """DL4J's output size and (before, after) padding along one axis (reference §1.2)."""
    ek = (k - 1) * d + 1
    if mode.upper() == "SAME":
        out = -(-size // s)
        total = max(0, (out - 1) * s + ek - size)
        return out, (total // 2, total - total // 2)
    return (size - ek + 2 * p) // s + 1, (p, p)


def to_nchw(x: np.ndarray, fmt: str) -> np.ndarray:
    return x if fmt == "NCHW" else x.transpose(0, 3, 1, 2)


def from_nchw(x: np.ndarray, fmt: str) -> np.ndarray:
    return x if fmt == "NCHW" else x.transpose(0, 2, 3, 1)


def taps(x: np.ndarray, kernel, stride, pads, dilation, fill=0.0):
    """Yield (i, j, window) for each kernel tap: the padded input's values under that tap for
    every output position, (n, c, out_h, out_w); pads (top, bottom, left, right)."""
    n, c, h, w = x.shape
    t, b, l, r = pads
    xp = np.full((n, c, h + t + b, w + l + r), fill, dtype=np.float64)
    xp[:, :, t:t + h, l:l + w] = x
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    oh = (h + t + b - ((kh - 1) * dh + 1)) // sh + 1
    ow = (w + l + r - ((kw - 1) * dw + 1)) // sw + 1
    for i in range(kh):
        for j in range(kw):
            yield i, j, xp[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                           j * dw:j * dw + sw * (ow - 1) + 1:sw]


def conv2d(x, w, b, stride, pads, dilation, fmt="NCHW"):
    """Cross-correlation of x with w (c_out, c_in, kh, kw), plus b."""
    x = to_nchw(np.asarray(x, np.float64), fmt)
    w = np.asarray(w, np.float64)
    out = None
    for i, j, win in taps(x, w.shape[2:], stride, pads, dilation):
        term = np.einsum("nchw,oc->nohw", win, w[:, :, i, j])
        out = term if out is None else out + term
    if b is not None:
        out = out + np.asarray(b, np.float64).reshape(1, -1, 1, 1)
    return from_nchw(out, fmt)


def pool2d(x, kind, kernel, stride, pads, dilation, fmt="NCHW", include_pad=False, p=2):
    """MAX (padding never wins), AVG (divisor: the taps inside the input, or kh*kw with
    include_pad), SUM, PNORM over windows."""
    x = to_nchw(np.asarray(x, np.float64), fmt)
    ones = np.ones_like(x)
    if kind == "MAX":
        out = None
        for _, _, win in taps(x, kernel, stride, pads, dilation, fill=-np.inf):
            out = win.copy() if out is None else np.maximum(out, win)
        return from_nchw(out, fmt)
    total = count = None
    for (_, _, win), (_, _, inside) in zip(taps(x, kernel, stride, pads, dilation),
                                           taps(ones, kernel, stride, pads, dilation)):
        v = np.abs(win) ** p if kind == "PNORM" else win
        total = v.copy() if total is None else total + v
        count = inside.copy() if count is None else count + inside
    if kind == "AVG":
        total = total / (kernel[0] * kernel[1] if include_pad else count)
    elif kind == "PNORM":
        total = total ** (1.0 / p)
    return from_nchw(total, fmt)


def activation(name: str, z: np.ndarray) -> np.ndarray:
    return {"identity": lambda v: v, "relu": lambda v: np.maximum(v, 0), "tanh": np.tanh,
            "sigmoid": lambda v: 1 / (1 + np.exp(-v))}[name](z)


def check_gradients(net, ds, eps=1e-6, max_rel=1e-3, min_abs=1e-8, max_per_param=None,
                    rng=None):
    """DL4J's GradientCheckUtil: every trainable parameter's (or up to `max_per_param` of each
    parameter array's) backprop gradient against central differences of the training score
    (running statistics and locked parameters are not DL4J parameters: skipped); returns the
    number of parameters checked, raises AssertionError naming the worst."""
    net.compute_gradient_and_score(ds)
    analytic = net.gradient().numpy().copy()
    base = net.params().numpy().copy()
    assert base.dtype == np.float64, "gradient checks run in float64"
    indices = []
    for layer, name, shape, off, size in net._layout:
        if not layer.trainable(name):
            continue
        if max_per_param is None or size <= max_per_param:
            indices += range(off, off + size)
        else:
            step = max(1, size // max_per_param)
            indices += range(off, off + size, step)
    bad = []
    for i in indices:
        p = base.copy()
        p[i] = base[i] + eps
        net.set_params(p)
        plus = net.compute_gradient_and_score(ds)
        p[i] = base[i] - eps
        net.set_params(p)
        minus = net.compute_gradient_and_score(ds)
        numeric = (plus - minus) / (2 * eps)
        a = analytic[i]
        diff = abs(a - numeric)
        rel = 0.0 if a == numeric == 0 else diff / (abs(a) + abs(numeric))
        if rel > max_rel and diff >= min_abs:
            bad.append((rel, i, a, numeric))
    net.set_params(base)
    assert not bad, f"{len(bad)} of {len(indices)} gradients off; worst (rel, index, " \
                    f"backprop, numeric): {max(bad)}"
    return len(indices)


def conv_transpose2d(x, w, b, stride, pads, dilation, fmt="NCHW"):
    """The transposed convolution with w (c_in, c_out, kh, kw): every input value scattered
    through the kernel, then the padding cut off."""
    x = to_nchw(np.asarray(x, np.float64), fmt)
    w = np.asarray(w, np.float64)
    n, c, h, wd = x.shape
    (kh, kw), (sh, sw), (dh, dw) = w.shape[2:], stride, dilation
    full = np.zeros((n, w.shape[1], sh * (h - 1) + (kh - 1) * dh + 1,
                     sw * (wd - 1) + (kw - 1) * dw + 1))
    for i in range(kh):
        for j in range(kw):
            full[:, :, i * dh:i * dh + sh * (h - 1) + 1:sh,
                 j * dw:j * dw + sw * (wd - 1) + 1:sw] += np.einsum("nchw,co->nohw", x,
                                                                    w[:, :, i, j])
    t, bm, l, r = pads
    out = full[:, :, t:full.shape[2] - bm, l:full.shape[3] - r]
    if b is not None:
        out = out + np.asarray(b, np.float64).reshape(1, -1, 1, 1)
    return from_nchw(out, fmt)


def depthwise_conv2d(x, w, b, stride, pads, dilation, fmt="NCHW"):
    """Channel c convolved with w[c, j] (c_in, multiplier, kh, kw) gives output c*m + j."""
    x = to_nchw(np.asarray(x, np.float64), fmt)
    c, m = w.shape[:2]
    outs = [conv2d(x[:, k:k + 1], w[k, j][None, None], None, stride, pads, dilation)
            for k in range(c) for j in range(m)]
    out = np.concatenate(outs, axis=1)
    if b is not None:
        out = out + np.asarray(b, np.float64).reshape(1, -1, 1, 1)
    return from_nchw(out, fmt)


def check_modes(make, batch, x, iterations=4, network=None):
    """Train `make(mode)`'s network (a MultiLayerNetwork, or `network`'s class) on `batch` in
    each workspace mode: after warm-up (fit and output on `x`, a list for a graph's inputs) no
    workspace has spilled and each learned exactly the memory report's plan; the next
    iterations allocate nothing on the heap (NONE: something); every mode ends with the same
    bits."""
    import ndws
    from ndws._memory import allocation_counters
    from ndws.nn import MultiLayerNetwork
    results = {}
    xs = x if isinstance(x, list) else [x]
    for mode in ("NONE", "SINGLE", "SEPARATE", "ENABLED"):
        net = (network or MultiLayerNetwork)(make(mode))
        net.init()
        report = net.memory_report(xs[0].shape[0])
        for _ in range(3):
            net.fit(batch)
            net.output(*xs)
        spaces = ndws.get_workspace_manager().get_all_workspaces_for_current_thread()
        assert all(ws.spilled_size == 0 for ws in spaces), mode     # pre-sized from the plan
        learned = {ws.id: ws.max_cycle_allocations for ws in spaces}
        assert learned == report.workspaces(getattr(ndws.WorkspaceMode, mode)), mode
        before = allocation_counters()["allocations"]
        for _ in range(iterations):
            net.fit(batch)
        results[mode] = (net.params().numpy(), allocation_counters()["allocations"] - before)
        ndws.destroy_all_workspaces_for_current_thread()
    for mode in ("SINGLE", "SEPARATE", "ENABLED"):
        np.testing.assert_array_equal(results[mode][0], results["NONE"][0])
        assert results[mode][1] == 0, mode
    assert results["NONE"][1] > 0
