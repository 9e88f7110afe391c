"""ndws.nn.functional's recurrent loops under hostile arguments: a batch of 0 with any number
of steps returns at once, NaN in masked padding never reaches the weight gradient, every
activation and flag argument is named in its errors (None is not identity, a flag is a bool),
sizes too large are called so, and empty outputs are taken as given."""
import numpy as np
import pytest

import ndws.nn.functional as F

HUGE = 2 ** 40                       # steps no loop could visit


@pytest.mark.parametrize("peepholes", [False, True])
def test_a_batch_of_0_returns_at_once_whatever_the_steps(peepholes):
    n, extra = 4, 3 if peepholes else 0
    W, RW, b = np.zeros((3, 16)), np.zeros((n, 16 + extra)), np.zeros(16)
    x = np.empty((0, 3, HUGE))
    y, h, c = F.lstm_forward(x, W, RW, b, peepholes=peepholes)
    assert y.shape == (0, n, HUGE) and h.shape == c.shape == (0, n)
    shape = F.lstm_cache_shape(HUGE, 0, n)
    for back_length in (None, 5):
        dx, dW, dRW, db, dh0, dc0 = F.lstm_backward(
            x, W, RW, np.empty(shape), np.empty((0, n, HUGE)), peepholes=peepholes,
            back_length=back_length)
        assert dx.shape == (0, 3, HUGE) and dh0.shape == dc0.shape == (0, n)
        for g, like in ((dW, W), (dRW, RW), (db, b)):      # sums over no example: zeros
            np.testing.assert_array_equal(g.numpy(), np.zeros_like(like))
    y, h = F.simple_rnn_forward(x, W[:, :n], RW[:, :n], b[:n])
    assert y.shape == (0, n, HUGE)


@pytest.mark.parametrize("fmt", ["NCW", "NWC"])
@pytest.mark.parametrize("back_length", [None, 3])
@pytest.mark.parametrize("kind", ["lstm", "simple"])
def test_nan_in_masked_padding_never_reaches_the_weight_gradient(kind, back_length, fmt, rng):
    # the gradients equal those of the same batch with the padding zeroed, bit for bit
    B, nin, n, T = 3, 4, 5, 6
    K = 4 * n if kind == "lstm" else n
    W, RW, b = (rng.standard_normal(s) * 0.3 for s in ((nin, K), (n, K), (K,)))
    mask = np.ones((B, T))
    mask[0, 4:] = 0
    mask[2, 2:] = 0
    x0 = rng.standard_normal((B, nin, T))
    x0 *= mask[:, None, :]
    x = x0.copy()
    x[0, 1, 5], x[2, :, 3] = np.nan, np.inf
    if fmt == "NWC":
        x0, x = x0.transpose(0, 2, 1), x.transpose(0, 2, 1)
    dy = rng.standard_normal((B, n, T) if fmt == "NCW" else (B, T, n))
    forward = F.lstm_forward if kind == "lstm" else F.simple_rnn_forward
    backward = F.lstm_backward if kind == "lstm" else F.simple_rnn_backward
    shape = (F.lstm_cache_shape if kind == "lstm" else F.simple_rnn_cache_shape)(T, B, n)
    grads = []
    for xs in (x0, x):
        cache = np.zeros(shape)
        forward(xs, W, RW, b, mask=mask, cache=cache, data_format=fmt)
        grads.append([g.numpy() for g in backward(xs, W, RW, cache, dy, mask=mask,
                                                 data_format=fmt, back_length=back_length)])
    for clean, padded in zip(*grads):
        np.testing.assert_array_equal(padded, clean)
    assert np.isfinite(grads[1][1]).all()


@pytest.mark.parametrize("call", [
    lambda x, W, RW, b, **kw: F.lstm_forward(x, W, RW, b, **kw),
    lambda x, W, RW, b, **kw: F.lstm_cache_shape(2, 1, 1, **kw),
])
@pytest.mark.parametrize("kw, error, message", [
    ({"gate_activation": "tanhh"}, ValueError, r"gate_activation: unknown activation 'tanhh'"),
    ({"gate_activation": 5}, TypeError, r"gate_activation: name must be a str, got 5"),
    ({"activation": None}, TypeError, r"activation must be an activation name \(a str\), got "
                                      r"None"),
    ({"gate_activation": None}, TypeError, r"gate_activation must be an activation name"),
])
def test_activation_arguments_are_named(call, kw, error, message):
    x, W, RW, b = np.ones((1, 1, 2)), np.ones((1, 4)), np.ones((1, 4)), np.zeros(4)
    with pytest.raises(error, match=r"^lstm_(forward|cache_shape): " + message):
        call(x, W, RW, b, **kw)


def test_simple_rnn_activation_none_is_refused():
    with pytest.raises(TypeError, match=r"^simple_rnn_forward: activation must be an "
                                        r"activation name \(a str\), got None$"):
        F.simple_rnn_forward(np.ones((1, 1, 2)), np.ones((1, 1)), np.ones((1, 1)), np.zeros(1),
                             activation=None)


@pytest.mark.parametrize("value", ["no", "False", np.array([1, 0]), 1, None])
def test_flags_are_bools(value):
    x, W, RW, b = np.ones((1, 1, 2)), np.ones((1, 4)), np.ones((1, 4)), np.zeros(4)
    with pytest.raises(TypeError, match=r"^lstm_forward: peepholes must be a bool, got "):
        F.lstm_forward(x, W, RW, b, peepholes=value)
    cache = np.zeros(F.lstm_cache_shape(2, 1, 1))
    F.lstm_forward(x, W, RW, b, cache=cache)
    with pytest.raises(TypeError, match=r"^lstm_backward: need_input must be a bool, got "):
        F.lstm_backward(x, W, RW, cache, np.ones((1, 1, 2)), need_input=value)
    with pytest.raises(TypeError, match=r"^lstm_scratch_bytes: mask must be a bool, got "):
        F.lstm_scratch_bytes(1, 1, 1, 2, mask=value)
    assert F.lstm_forward(x, W, RW, b, peepholes=np.bool_(False))[0].shape == (1, 1, 2)


def test_sizes_too_large_are_called_so():
    with pytest.raises(ValueError, match=r"^lstm_cache_shape: n_out 281474976710656 is too "
                                         r"large \(at most 2\*\*48 - 1\)$"):
        F.lstm_cache_shape(1, 1, 2 ** 48)
    with pytest.raises(ValueError, match=r"^lstm_cache_shape: sizes \(1099511627776, "
                                         r"1099511627776, 12094627905536\) are too large$"):
        F.lstm_cache_shape(HUGE, HUGE, HUGE)
    with pytest.raises(ValueError, match=r"^lstm_cache_shape: n_out must be >= 1, got 0$"):
        F.lstm_cache_shape(1, 1, 0)


def test_empty_outputs_are_taken_as_given(rng):
    # NumPy gives empty arrays zero strides: nothing overlaps in them
    x, W = rng.standard_normal((2, 0, 3)), np.zeros((0, 16))
    RW, b = rng.standard_normal((4, 16)), np.zeros(16)
    cache = np.zeros(F.lstm_cache_shape(3, 2, 4))
    F.lstm_forward(x, W, RW, b, cache=cache)
    grad_W, grad_input = np.zeros((0, 16)), np.zeros((2, 0, 3))
    assert grad_W.strides == (0, 0) or grad_W.size == 0
    res = F.lstm_backward(x, W, RW, cache, rng.standard_normal((2, 4, 3)), grad_W=grad_W,
                          grad_input=grad_input)
    assert res[1] is grad_W and res[0] is grad_input
    h_out = np.zeros((0, 4))
    assert F.lstm_forward(np.zeros((0, 1, 3)), np.zeros((1, 16)), RW, b,
                          h_out=h_out)[1] is h_out


@pytest.mark.parametrize("kind", ["lstm", "simple"])
def test_grad_input_without_need_input_is_refused(kind):
    # a grad_input the call would not write is a contradiction, refused before anything
    x, n = np.ones((1, 1, 2)), 1
    K = 4 * n if kind == "lstm" else n
    W, RW, b = np.ones((1, K)), np.ones((1, K)), np.zeros(K)
    forward = F.lstm_forward if kind == "lstm" else F.simple_rnn_forward
    backward = F.lstm_backward if kind == "lstm" else F.simple_rnn_backward
    cache = np.zeros((F.lstm_cache_shape if kind == "lstm" else F.simple_rnn_cache_shape)(2, 1,
                                                                                           n))
    forward(x, W, RW, b, cache=cache)
    grad_W = np.full((1, K), 7.0)
    with pytest.raises(ValueError, match=rf"^{backward.__name__}: grad_input is given but "
                                         rf"need_input is False \(no input gradient is "
                                         rf"computed\): pass need_input=True, or no "
                                         rf"grad_input$"):
        backward(x, W, RW, cache, np.ones((1, 1, 2)), need_input=False,
                 grad_input=np.zeros((1, 1, 2)), grad_W=grad_W)
    np.testing.assert_array_equal(grad_W, 7.0)             # nothing written
    assert backward(x, W, RW, cache, np.ones((1, 1, 2)), need_input=False)[0] is None
