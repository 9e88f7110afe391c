"""NumPy references of DL4J's recurrent layers, the oracle of the recurrent tests: written from
the formulas of DL4J's LSTMHelpers / SimpleRnn (docs/recurrent.md), step by step in float64,
independent of ndws' kernels and layers.

Sequences are NCW, (batch, features, time). LSTM parameters are DL4J's: W (n_in, 4n), RW
(n, 4n) (+ 3 peephole columns wFF, wOO, wGG for GravesLSTM), b (4n,), gate blocks (g, f, o, i).
"""
from __future__ import annotations

import numpy as np

ACTS = {
    "identity": lambda z: z,
    "tanh": np.tanh,
    "sigmoid": lambda z: 1.0 / (1.0 + np.exp(-z)),
    "relu": lambda z: np.maximum(z, 0.0),
    "softsign": lambda z: z / (1.0 + np.abs(z)),
    "hardtanh": lambda z: np.clip(z, -1.0, 1.0),
    "softmax": lambda z: np.exp(z - z.max(axis=-1, keepdims=True))
    / np.exp(z - z.max(axis=-1, keepdims=True)).sum(axis=-1, keepdims=True),
}


def lstm(x, W, RW, b, act="tanh", gate="sigmoid", peepholes=False, h0=None, c0=None,
         mask=None):
    """y (B, n, T), h_T (B, n), c_T (B, n) of DL4J's LSTM (GravesLSTM with `peepholes`)."""
    x = np.asarray(x, np.float64)
    B, _, T = x.shape
    n = RW.shape[0]
    f_act, f_gate = ACTS[act], ACTS[gate]
    h = np.zeros((B, n)) if h0 is None else np.asarray(h0, np.float64).copy()
    c = np.zeros((B, n)) if c0 is None else np.asarray(c0, np.float64).copy()
    y = np.zeros((B, n, T))
    RWg = RW[:, :4 * n]
    if peepholes:
        wff, woo, wgg = RW[:, 4 * n], RW[:, 4 * n + 1], RW[:, 4 * n + 2]
    for t in range(T):
        z = x[:, :, t] @ W + h @ RWg + np.reshape(b, -1)
        g = f_act(z[:, :n])
        fz, iz = z[:, n:2 * n], z[:, 3 * n:]
        if peepholes:
            fz, iz = fz + c * wff, iz + c * wgg
        f, i = f_gate(fz), f_gate(iz)
        c = f * c + i * g
        oz = z[:, 2 * n:3 * n] + (c * woo if peepholes else 0.0)
        h = f_gate(oz) * f_act(c)
        if mask is not None:
            m = np.asarray(mask, np.float64)[:, t:t + 1]
            h, c = h * m, c * m
        y[:, :, t] = h
    return y, h, c


def simple_rnn(x, W, RW, b, act="tanh", h0=None, mask=None):
    """y (B, n, T), h_T of DL4J's SimpleRnn: h_t = act(x_t W + b + h_{t-1} RW), masked."""
    x = np.asarray(x, np.float64)
    B, _, T = x.shape
    n = RW.shape[0]
    h = np.zeros((B, n)) if h0 is None else np.asarray(h0, np.float64).copy()
    y = np.zeros((B, n, T))
    for t in range(T):
        h = ACTS[act](x[:, :, t] @ W + np.reshape(b, -1) + h @ RW)
        if mask is not None:
            h = h * np.asarray(mask, np.float64)[:, t:t + 1]
        y[:, :, t] = h
    return y, h


def dense_steps(x, W, b, act):
    """A dense layer applied at every step of (B, n_in, T): (B, n_out, T)."""
    z = np.einsum("bit,io->bot", np.asarray(x, np.float64), W) + np.reshape(b, (1, -1, 1))
    return ACTS[act](np.moveaxis(z, 1, -1)).transpose(0, 2, 1) if act == "softmax" else \
        ACTS[act](z)


def mcxent_steps(probs, labels, mask=None):
    """DL4J's RnnOutputLayer score with MCXENT: -sum(labels * log p) over the unmasked steps,
    divided by the minibatch."""
    per_step = -(labels * np.log(probs)).sum(axis=1)           # (B, T)
    if mask is not None:
        per_step = per_step * mask
    return per_step.sum() / probs.shape[0]


def to_torch_lstm(W, RW, b):
    """DL4J's (g, f, o, i) LSTM parameters as torch.nn.LSTM's (i, f, g, o) weight_ih (4n,
    n_in), weight_hh (4n, n), bias (4n,) (use it as bias_ih with bias_hh zero)."""
    n = RW.shape[0]
    blocks = lambda a: [a[..., k * n:(k + 1) * n] for k in range(4)]     # noqa: E731
    g, f, o, i = blocks(W)
    rg, rf, ro, ri = blocks(RW[:, :4 * n])
    bg, bf, bo, bi = blocks(np.reshape(b, -1))
    return (np.concatenate([i, f, g, o], axis=1).T, np.concatenate([ri, rf, rg, ro], axis=1).T,
            np.concatenate([bi, bf, bg, bo]))
