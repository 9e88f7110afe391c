"""The recurrent time loops of `ndws.nn.functional` by name: `lstm_forward`, `lstm_backward`,
`simple_rnn_forward`, `simple_rnn_backward` (whole sequences), and the sizes a caller places
for them (`lstm_cache_shape`, `lstm_scratch_bytes`, ...). Each is its docstring and one call of
ndws.nn._rnn, which reads the arguments and runs the loops (its docstring says how).
"""
import numpy as np

from ndws._typedefs cimport intp_t
from ndws.nn._rnn cimport (K_LSTM, K_SIMPLE, lstm_cache_width, rnn_backward, rnn_forward,
                          rnn_scratch_bytes, simple_rnn_cache_width, with_z)
from ndws.nn._rnn_args cimport _activation, _check_size, size_arg


cdef bint _flag(object value, str op, str role) except -1:
    # a flag is a bool: Python's truthiness would read "no" or "False" as True
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{op}: {role} must be a bool, got {type(value).__name__} {value!r:.40}")

__all__ = ["lstm_forward", "lstm_backward", "simple_rnn_forward", "simple_rnn_backward",
           "lstm_cache_shape", "simple_rnn_cache_shape", "lstm_scratch_bytes",
           "simple_rnn_scratch_bytes"]


_LOOP_DOC = """    loop_workspace : ndws.Workspace, optional
        Where each step's temporaries live: a cycle of it is opened and closed at every step
        from the compiled loop (DL4J's ``WS_RNN_LOOP_WORKING_MEM``, what a network passes for
        ``ArrayType.RNN_FF_LOOP_WORKING_MEM`` / ``RNN_BP_LOOP_WORKING_MEM``), with the
        statistics a loop of ``with loop_workspace:`` would give. It must belong to this
        thread, be closed and scoped (not circular). None (or a DummyWorkspace): the
        temporaries are part of the scratch.
    scratch : NDArray or numpy.ndarray, optional
        C-contiguous, writeable, at least the ``*_scratch_bytes`` bytes. When omitted it is
        placed in the current workspace like a result (detached memory without one)."""


def lstm_forward(x, W, RW, b, h0=None, c0=None, mask=None, *, activation="sigmoid",
                 gate_activation="sigmoid", peepholes=False, data_format="NCW", out=None,
                 h_out=None, c_out=None, cache=None, loop_workspace=None, scratch=None):
    """LSTM over a whole sequence with DL4J's parameters (``LSTM``; ``GravesLSTM`` with
    ``peepholes=True``).

    Per step, DL4J's gate blocks (g, f, o, i) in the columns of W, RW and b:
    ``z = (x_t W + h_{t-1} RW) + b``, ``g = act(z_g)``, ``f = gate(z_f [+ c_{t-1} wFF])``,
    ``i = gate(z_i [+ c_{t-1} wGG])``, ``c~ = f c_{t-1} + i g``, ``o = gate(z_o [+ c~ wOO])``,
    ``h_t = m o act(c~)``, ``c_t = m c~`` with m the step's mask (1 without one). A masked
    step (m = 0) outputs 0 and resets the state to 0, as DL4J's LSTMHelpers does (whatever
    the padding held: exactly 0, never NaN).

    Parameters
    ----------
    x : (batch, n_in, time) NDArray of float32 or float64
        ``(batch, time, n_in)`` when ``data_format="NWC"``. Any strides; rows that are one
        strided matrix in time-major order (e.g. a transposed view of a ``(time, batch, n_in)``
        array) are read in place, others are copied once.
    W : (n_in, 4*n_out) NDArray of the same dtype
        Input weights, column blocks (g, f, o, i).
    RW : (n_out, 4*n_out) NDArray, or (n_out, 4*n_out + 3) with ``peepholes=True``
        Recurrent weights; GravesLSTM's peephole columns wFF, wOO, wGG last.
    b : (4*n_out,) or (1, 4*n_out) NDArray
        Bias (DL4J initialises the f block to ``forget_gate_bias_init``).
    h0, c0 : (batch, n_out) NDArray, optional
        Initial state (zeros when omitted), e.g. the state ``rnn_time_step`` or the previous
        truncated-BPTT segment kept.
    mask : (batch, time) array of numbers, optional
        0 masks a step; other values scale the output and the state (DL4J multiplies).
    activation : str
        The layer activation (block input and cell output), an elementwise name of
        `activation`. DL4J's network-wide default is sigmoid, which is this default;
        ``"tanh"`` is the usual LSTM (and PyTorch's).
    gate_activation : str
        The gates' activation (DL4J's ``gateActivationFunction``, sigmoid).
    peepholes : bool
        GravesLSTM: RW carries the three peephole columns.
    data_format : {"NCW", "NWC"}
    out : (batch, n_out, time) NDArray, optional
        ``(batch, time, n_out)`` for NWC; any strides.
    h_out, c_out : (batch, n_out) NDArray, optional
        Where the final state goes (e.g. the caller's detached state arrays; they may be
        `h0` and `c0`).
    cache : NDArray, optional
        For training: a C-contiguous array of `lstm_cache_shape` the step values the backward
        needs are written to (the network places it in its BP working memory). None for
        inference.
""" + _LOOP_DOC + """

    Returns
    -------
    (y, h, c) : tuple of NDArray
        The outputs of every step and the final state (``h`` equals the last step's output).
        Each is the array given as ``out`` / ``h_out`` / ``c_out``, or a new array placed in
        the current workspace.

    Examples
    --------
    >>> import numpy as np, ndws.nn.functional as F
    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal((2, 3, 5)).astype(np.float32)        # batch 2, 3 inputs, 5 steps
    >>> W, RW = rng.standard_normal((3, 16), np.float32), rng.standard_normal((4, 16), np.float32)
    >>> y, h, c = F.lstm_forward(x, W, RW, np.zeros(16, np.float32), activation="tanh")
    >>> y.shape, h.shape, bool((y.numpy()[:, :, -1] == h.numpy()).all())
    ((2, 4, 5), (2, 4), True)
    """
    op = "lstm_forward"
    return rnn_forward(K_LSTM, x, W, RW, b, h0, c0, mask, activation, gate_activation,
                       _flag(peepholes, op, "peepholes"), data_format, out, h_out, c_out, cache,
                       loop_workspace, scratch, op)


def lstm_backward(x, W, RW, cache, grad_output, h0=None, c0=None, mask=None, grad_h=None,
                  grad_c=None, *, activation="sigmoid", gate_activation="sigmoid",
                  peepholes=False, data_format="NCW", back_length=None, need_input=True,
                  grad_input=None, grad_W=None, grad_RW=None, grad_b=None, grad_h0=None,
                  grad_c0=None, loop_workspace=None, scratch=None):
    """Gradients of `lstm_forward` from the cache it wrote: ``(dx, dW, dRW, db, dh0, dc0)``.

    The exact derivative of the forward, masks included: errors start from `grad_output` at
    every step and `grad_h` / `grad_c` at the final state, and flow back through at most
    `back_length` steps from the end (truncated BPTT): earlier steps get no error (dx is 0
    there) and the initial state none (dh0 = dc0 = 0) unless the window reaches it. A masked
    step passes no error to the parameters, its input or the earlier steps, whatever its
    input holds (NaN or inf in padding included). A batch of 0 returns at once, with zero
    parameter gradients, however many steps it has.

    Parameters
    ----------
    x, W, RW, h0, c0, mask : as given to `lstm_forward`
    cache : the cache `lstm_forward` filled (read, not changed)
    grad_output : dL/dy, the forward output's shape
    grad_h, grad_c : (batch, n_out) NDArray, optional
        dL/d(final h) and dL/d(final c): the error the next segment (or a loss on the state)
        sends back; zeros when omitted.
    activation, gate_activation, peepholes, data_format : as given to `lstm_forward`
    back_length : int, optional
        Steps the errors flow back through (``tbptt_back_length``); all when None.
    need_input : bool
        Compute dx (a first layer needs none; dx is then None, and a `grad_input` given is
        refused as contradicting it).
    grad_input, grad_W, grad_RW, grad_b, grad_h0, grad_c0 : NDArray, optional
        Outputs: x's, W's, RW's, (4*n_out,) or (1, 4*n_out), and (batch, n_out) shapes; any
        strides; written, not accumulated into.
""" + _LOOP_DOC + """

    Returns
    -------
    tuple
        ``(dx or None, dW, dRW, db, dh0, dc0)``.
    """
    op = "lstm_backward"
    return rnn_backward(K_LSTM, x, W, RW, cache, grad_output, h0, c0, mask, grad_h, grad_c,
                        activation, gate_activation, _flag(peepholes, op, "peepholes"),
                        data_format, back_length, _flag(need_input, op, "need_input"),
                        grad_input, grad_W, grad_RW, grad_b, grad_h0, grad_c0, loop_workspace,
                        scratch, op)


def simple_rnn_forward(x, W, RW, b, h0=None, mask=None, *, activation="sigmoid",
                       data_format="NCW", out=None, h_out=None, cache=None,
                       loop_workspace=None, scratch=None):
    """DL4J's SimpleRnn over a whole sequence: ``h_t = m act((x_t W + b) + h_{t-1} RW)``.

    A masked step (m = 0) outputs 0, which is also the state the next step sees (DL4J applies
    the mask to each step's output).

    Parameters
    ----------
    x : (batch, n_in, time) NDArray of float32 or float64
        ``(batch, time, n_in)`` for NWC; any strides.
    W : (n_in, n_out), RW : (n_out, n_out), b : (n_out,) or (1, n_out)
    h0 : (batch, n_out), optional
    mask : (batch, time), optional
    activation : str
        DL4J's network-wide default sigmoid; ``"tanh"`` is PyTorch's ``nn.RNN``.
    data_format, out, h_out, cache : as for `lstm_forward` (`simple_rnn_cache_shape`)
""" + _LOOP_DOC + """

    Returns
    -------
    (y, h) : tuple of NDArray

    Examples
    --------
    >>> import numpy as np, ndws.nn.functional as F
    >>> x = np.ones((1, 2, 3), np.float32)
    >>> W, RW, b = np.ones((2, 1), np.float32), np.zeros((1, 1), np.float32), np.zeros(1, np.float32)
    >>> y, h = F.simple_rnn_forward(x, W, RW, b, activation="identity")
    >>> y.tolist(), h.tolist()
    ([[[2.0, 2.0, 2.0]]], [[2.0]])
    """
    return rnn_forward(K_SIMPLE, x, W, RW, b, h0, None, mask, activation, None, False,
                       data_format, out, h_out, None, cache, loop_workspace, scratch,
                       "simple_rnn_forward")


def simple_rnn_backward(x, W, RW, cache, grad_output, h0=None, mask=None, grad_h=None, *,
                        activation="sigmoid", data_format="NCW", back_length=None,
                        need_input=True, grad_input=None, grad_W=None, grad_RW=None,
                        grad_b=None, grad_h0=None, loop_workspace=None, scratch=None):
    """Gradients of `simple_rnn_forward` from its cache: ``(dx, dW, dRW, db, dh0)``.

    Parameters and semantics as for `lstm_backward` (no cell state).
    """
    op = "simple_rnn_backward"
    return rnn_backward(K_SIMPLE, x, W, RW, cache, grad_output, h0, None, mask, grad_h, None,
                        activation, None, False, data_format, back_length,
                        _flag(need_input, op, "need_input"), grad_input, grad_W, grad_RW,
                        grad_b, grad_h0, None, loop_workspace, scratch, op)


def lstm_cache_shape(time, batch, n_out, *, activation="sigmoid", gate_activation="sigmoid"):
    """Shape of the cache `lstm_forward` fills for `lstm_backward`: ``(time, batch, width)``.

    The width is ``7 * n_out`` (gates, cell, act(cell), output), plus ``4 * n_out`` for the
    gates' pre-activations when an activation is neither identity, sigmoid nor tanh (their
    derivatives come from their outputs).

    >>> import ndws.nn.functional as F
    >>> F.lstm_cache_shape(100, 64, 512, activation="tanh")
    (100, 64, 3584)
    """
    cdef str op = "lstm_cache_shape"
    cdef intp_t T = size_arg(time, op, "time", 0)
    cdef intp_t B = size_arg(batch, op, "batch", 0)
    cdef intp_t n = size_arg(n_out, op, "n_out", 1)
    cdef double alpha
    _activation(gate_activation, op, "gate_activation", &alpha)   # with_z lets None pass
    _check_size((T, B, lstm_cache_width(n, True)), op)
    return (T, B, lstm_cache_width(n, with_z(activation, gate_activation, op)))


def simple_rnn_cache_shape(time, batch, n_out, *, activation="sigmoid"):
    """Shape of the cache `simple_rnn_forward` fills: ``(time, batch, 2 * n_out)``
    (``3 * n_out`` when the activation is neither identity, sigmoid nor tanh)."""
    cdef str op = "simple_rnn_cache_shape"
    cdef intp_t T = size_arg(time, op, "time", 0)
    cdef intp_t B = size_arg(batch, op, "batch", 0)
    cdef intp_t n = size_arg(n_out, op, "n_out", 1)
    _check_size((T, B, simple_rnn_cache_width(n, True)), op)
    return (T, B, simple_rnn_cache_width(n, with_z(activation, None, op)))


def lstm_scratch_bytes(batch, n_in, n_out, time, *, dtype=np.float32, backward=False,
                       peepholes=False, cache=True, mask=False, loop_workspace=True,
                       back_length=None):
    """Bytes of scratch one `lstm_forward` (or, with ``backward=True``, `lstm_backward`) call
    needs at most, for any layout of its arrays: what a layer reserves in its working memory
    (or passes as ``scratch=``) and reports in its memory report.

    `cache`: the forward fills a cache (training); `mask`: a mask is given; `loop_workspace`:
    the step's temporaries go to a loop workspace (else they are scratch too); `back_length`:
    the backward's window (all steps when None).

    The forward's input projection is made a few steps at a time: its scratch holds one
    chunk of it, not every step's (100 steps of 64 x 2048 floats are 52 MB), beside a copy
    of x in time-major order for an input in another layout:

    >>> import ndws.nn.functional as F
    >>> F.lstm_scratch_bytes(64, 512, 512, 100) < 100 * 64 * 2048 * 4
    True
    """
    op = "lstm_scratch_bytes"
    return rnn_scratch_bytes(K_LSTM, batch, n_in, n_out, time, dtype,
                             _flag(backward, op, "backward"), _flag(peepholes, op, "peepholes"),
                             _flag(cache, op, "cache"), _flag(mask, op, "mask"),
                             _flag(loop_workspace, op, "loop_workspace"), back_length, op)


def simple_rnn_scratch_bytes(batch, n_in, n_out, time, *, dtype=np.float32, backward=False,
                             cache=True, mask=False, loop_workspace=True, back_length=None):
    """As `lstm_scratch_bytes`, for `simple_rnn_forward` / `simple_rnn_backward`."""
    op = "simple_rnn_scratch_bytes"
    return rnn_scratch_bytes(K_SIMPLE, batch, n_in, n_out, time, dtype,
                             _flag(backward, op, "backward"), False, _flag(cache, op, "cache"),
                             _flag(mask, op, "mask"), _flag(loop_workspace, op, "loop_workspace"),
                             back_length, op)
