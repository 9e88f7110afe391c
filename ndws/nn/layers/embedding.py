"""Embeddings: `EmbeddingLayer` (one index per example, a row of W out) and
`EmbeddingSequenceLayer` (a sequence of indices, a time series of rows out), DL4J's. The input
holds integer indices in [0, n_in) (in a float array, as DL4J's features are); anything else is
refused before anything is written. They are the first layer of a network: no gradient flows
to indices.

Examples
--------
>>> import numpy as np
>>> from ndws.nn import EmbeddingSequenceLayer, MultiLayerConfiguration, MultiLayerNetwork
>>> net = MultiLayerNetwork(MultiLayerConfiguration(
...     [EmbeddingSequenceLayer(n_in=10, n_out=3, activation="identity")], seed=0))
>>> net.init()
>>> net.output(np.array([[1, 2, 3, 4]], np.float32)).shape        # (n, n_out, time)
(1, 3, 4)
"""
from __future__ import annotations

from typing import Any

import numpy as np

import ndws
from ndws._core import NDArray, _np_view
from ndws.nn import functional as F
from ndws.nn.inputs import InputType, RNNFormat
from ndws.nn.layers.base import (Activation, FieldTypeError, Layer, _Regularized,
                                 init_dense)
from ndws.nn.layers.pooling import _bool
from ndws.nn.preprocessors import (RnnToFeedForwardPreProcessor, rows_of_sequence,
                                   sequence_view)
from ndws.nn.workspace_mgr import ArrayType

__all__ = ["EmbeddingLayer", "EmbeddingSequenceLayer"]


class _Embedding(_Regularized, Layer):
    # W (n_in, n_out) in column-major order (DL4J's 'f' view) and an optional b (1, n_out);
    # the indices checked once per pass, the rows gathered, activated and masked

    fields = Layer.fields + ("has_bias",)
    has_weights = True
    _pass_state = Layer._pass_state + ("_idx", "_shape")

    def __init__(self, *, has_bias: bool = False, **common: Any):
        super().__init__(**common)
        self.has_bias = _bool(type(self).__name__, "has_bias", has_bias)

    def _check_resolved(self, where):
        if self.dropout is not None and self.dropout < 1.0:
            raise ValueError(f"{where}.dropout: Dropout not supported with {type(self).__name__} "
                             f"(its input are indices)")
        if self.index > 0:
            raise ValueError(f"{where}: {type(self).__name__} must be the network's first "
                             f"layer (its input are indices: no gradient flows to them)")
        super()._check_resolved(where)

    def param_shapes(self):
        shapes = {"W": (self.n_in, self.n_out)}
        if self.has_bias:
            shapes["b"] = (1, self.n_out)
        return shapes

    def param_order(self, name):
        return "F" if name == "W" else "C"

    def init_params(self, rng):
        init_dense(self, rng)

    def _entry(self, i: int) -> str:
        return f"entry {i} in minibatch"

    def _indices(self, x: Any, entry: Any = None) -> np.ndarray:
        # the indices of `x` as intp, or ValueError naming the entry (DL4J's message): every
        # value a whole number in [0, n_in). `entry(i)` names the i-th value of x (default:
        # the layer's own rows)
        entry = entry or self._entry
        v = np.asarray(x).reshape(-1)
        if v.dtype.kind in "iub":
            # compared as given: a cast first would wrap a huge unsigned index into range
            self._refuse(np.flatnonzero((v < 0) | (v >= self.n_in)),
                         lambda i: f"index {v[i]}", entry, "")
            return v.astype(np.intp, copy=False)
        # NaN, inf and huge values first: casting them has no meaning
        bad = np.flatnonzero(~(np.abs(v) < 2.0 ** 62))
        idx = np.zeros(v.shape, np.intp) if bad.size else v.astype(np.intp)
        if not bad.size:
            bad = np.flatnonzero(idx != v)
        self._refuse(bad, lambda i: repr(float(v[i])), entry, "whole numbers ")
        self._refuse(np.flatnonzero((idx < 0) | (idx >= self.n_in)),
                     lambda i: f"index {idx[i]}", entry, "")
        return idx

    def _refuse(self, bad: np.ndarray, got: Any, entry: Any, kind: str) -> None:
        # DL4J's message for the first of the `bad` places, if any: `got(i)` the value,
        # `entry(i)` its place, `kind` what indexes must be besides in range
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"{type(self).__name__} (layer index = {self.index}): Invalid "
                             f"index for embedding layer: got {got(i)} for {entry(i)}; "
                             f"indexes must be {kind}between 0 and nIn-1 inclusive (0 to "
                             f"{self.n_in - 1})")

    def check_indices(self, x: Any) -> None:
        """The network's input `x` as the caller gave it (before it is cast to the network's
        dtype, which could round an index: float32 holds whole numbers exactly only up to
        2**24), every value an index in [0, n_in): ValueError naming the first bad one by its
        place in `x` (the whole batch, not a segment of it). A shape this layer does not read
        is left to the shape check."""
        a = np.asarray(x)
        shape = self._index_shape(tuple(a.shape))
        if shape is None:
            return
        if len(shape) == 1:
            self._indices(a)                       # one index per example: entry i
            return
        n, steps = shape
        # time-major, as the layer reads them: the first bad value found is the one activate
        # would name
        self._indices(a.reshape(n, steps).transpose(1, 0),
                      lambda i: f"example {i % n} at step {i // n}")

    def _index_shape(self, shape: tuple) -> tuple | None:
        # input of `shape` as this layer reads it: (n,) one index per example, (n, time) one
        # per (example, step); None for a shape it does not read
        raise NotImplementedError

    def _embed(self, idx: np.ndarray, y: NDArray, training: bool, mgr) -> NDArray:
        # y (rows, n_out) := act(W[idx] + b), the pre-activation kept for the derivative
        act = self.activation or Activation.IDENTITY
        z = y if act is Activation.IDENTITY or not training else \
            mgr.create_uninitialized(ArrayType.INPUT, y.shape, dtype=y.dtype)
        np.take(_np_view(self.params["W"]), idx, axis=0, out=_np_view(z))
        if self.has_bias:
            ndws.add(z, self.params["b"], out=z)
        self._z, self._idx = z, idx
        if z is not y or act is not Activation.IDENTITY:
            F.activation(act.value, z, out=y)
        return y

    def _gradients(self, delta: NDArray) -> dict:
        # dW := rows of delta added at their indices; db := sum of delta's rows
        dw = _np_view(self.grads["W"])
        dw[...] = 0.0
        np.add.at(dw, self._idx, np.asarray(delta))
        self._regularize_gradient()
        if self.has_bias:
            ndws.sum(delta, axis=0, out=self.grads["b"].reshape(self.n_out))
        return dict(self.grads)

    def _embed_use(self, rows: int, training: bool, itemsize: int) -> list:
        act = self.activation or Activation.IDENTITY
        use = [("forward", ArrayType.ACTIVATIONS, rows * self.n_out * itemsize)]
        if training:
            if act is not Activation.IDENTITY:
                use.append(("forward", ArrayType.INPUT, rows * self.n_out * itemsize))
            use.append(("backward", ArrayType.BP_WORKING_MEM, rows * self.n_out * itemsize))
            use += self._regularization_use(itemsize)
        return use

    def _delta(self, epsilon: NDArray, mgr) -> NDArray:
        act = self.activation or Activation.IDENTITY
        d = mgr.create_uninitialized(ArrayType.BP_WORKING_MEM, self._z.shape,
                                     dtype=self._z.dtype)
        F.activation_backward(act.value, self._z, epsilon, out=d)
        return d


class EmbeddingLayer(_Embedding):
    """One index per example in, row ``W[index]`` (+ b) out, activated (DL4J's
    ``EmbeddingLayer``): input (n, 1) or (n,) of integer indices in [0, n_in), output (n,
    n_out). With time series input it gets DL4J's RnnToFeedForwardPreProcessor: one index
    per (step, example) row.

    Parameters
    ----------
    n_in : int
        The number of indices (the vocabulary).
    n_out : int
    has_bias : bool
        Default False (DL4J's builder default).
    **common
        As `Layer` (no dropout: the input are indices).
    """

    def implied_input_type(self):
        return InputType.feed_forward(1)

    def n_in_for(self, input_type):
        return self.n_in         # the vocabulary: not the input's width (one index)

    def preprocessor_for(self, input_type):
        if input_type.kind == "RNN":
            return RnnToFeedForwardPreProcessor(input_type.data_format)
        return None

    def _check_resolved(self, where):
        if self.n_in is None:
            raise ValueError(f"{where}.n_in: required for EmbeddingLayer (the number of "
                             f"indices)")
        t = self.input_type
        if t is not None and t.kind in ("FF", "CNNFlat") and t.elements_per_example() != 1:
            raise ValueError(f"{where}: EmbeddingLayer takes one index per example (rows of "
                             f"width 1), got {t!r}")
        super()._check_resolved(where)

    def output_type(self, input_type):
        return InputType.feed_forward(self.n_out)

    def _index_shape(self, shape):
        # (n, 1) or (n,); a time series of one index per step, (n, 1, time) or (n, time, 1),
        # which RnnToFeedForwardPreProcessor makes one row per (example, step)
        if len(shape) == 1 or (len(shape) == 2 and shape[1] == 1):
            return shape[:1]
        if len(shape) == 3 and 1 in shape[1:]:
            return shape[0], shape[1] * shape[2]
        return None

    def memory_use(self, batch, training, itemsize):
        return self._embed_use(batch, training, itemsize)

    def activate(self, x, training, mgr):
        if not (x.ndim == 1 or (x.ndim == 2 and x.shape[1] == 1)):
            raise ValueError(f"EmbeddingLayer (layer index = {self.index}): expected one index "
                             f"per example, (n, 1) or (n,), got shape {tuple(x.shape)}")
        idx = self._indices(x)
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS, (idx.shape[0], self.n_out),
                                     dtype=self.params["W"].dtype)
        self._embed(idx, y, training, mgr)
        m = self._row_mask(idx.shape[0])
        if m is not None:
            ndws.multiply(y, m, out=y)
        return y

    def backprop_gradient(self, epsilon, mgr):
        d = self._delta(epsilon, mgr)
        m = self._row_mask(d.shape[0])
        if m is not None:
            ndws.multiply(d, m, out=d)
        return self._gradients(d), None


class EmbeddingSequenceLayer(_Embedding):
    """A sequence of indices in, a time series of rows out (DL4J's
    ``EmbeddingSequenceLayer``): input (n, time) or (n, 1, time) of integer indices in
    [0, n_in), output (n, n_out, time) (NCW) or (n, time, n_out) (NWC), each step ``act(W[index]
    + b)``; a features mask (n, time) zeroes the padded steps.

    Parameters
    ----------
    n_in : int
        The number of indices (the vocabulary).
    n_out : int
    input_length : int, optional
        The sequences' length, checked unless `infer_input_length` (default True: any length).
    infer_input_length : bool
    has_bias : bool
        Default False.
    data_format : {"NCW", "NWC"}
        Of the output.
    **common
        As `Layer`.
    """

    fields = _Embedding.fields + ("input_length", "infer_input_length", "data_format")

    def __init__(self, *, input_length: int | None = None, infer_input_length: bool = True,
                 data_format: Any = "NCW", **common: Any):
        super().__init__(**common)
        owner = type(self).__name__
        if input_length is not None and (isinstance(input_length, bool)
                                         or not isinstance(input_length, (int, np.integer))):
            raise FieldTypeError(f"{owner}.input_length: expected an int >= 1, got "
                                 f"{input_length!r:.40}")
        if input_length is not None and not 1 <= input_length <= 1 << 31:
            raise ValueError(f"{owner}.input_length: expected an int in [1, 2**31], got "
                             f"{input_length!r}")
        self.input_length = None if input_length is None else int(input_length)
        self.infer_input_length = _bool(owner, "infer_input_length", infer_input_length)
        self.data_format = RNNFormat.parse(data_format, f"{owner}.data_format")

    def implied_input_type(self):
        length = None if self.infer_input_length else self.input_length
        return InputType.recurrent(1, length)

    def n_in_for(self, input_type):
        return self.n_in

    def accepts_input(self, shape: tuple) -> bool:
        """Whether the network's input may have `shape`: (n, time) or (n, 1, time)."""
        length = None if self.infer_input_length else self.input_length
        ok = len(shape) == 2 or (len(shape) == 3 and shape[1] == 1)
        return ok and (length is None or shape[-1] == length)

    def _index_shape(self, shape):
        # (n, time) or (n, 1, time); (time,) is one example without its batch axis
        if len(shape) == 1:
            shape = (1,) + shape
        return (shape[0], shape[-1]) if self.accepts_input(shape) else None

    def _check_resolved(self, where):
        if self.n_in is None:
            raise ValueError(f"{where}.n_in: required for EmbeddingSequenceLayer (the number "
                             f"of indices)")
        if not self.infer_input_length and self.input_length is None:
            raise ValueError(f"{where}.input_length: required when infer_input_length is "
                             f"False")
        super()._check_resolved(where)

    def output_type(self, input_type):
        length = None if self.infer_input_length else self.input_length
        if length is None and input_type is not None and input_type.kind == "RNN":
            length = input_type.time_series_length
        return InputType.recurrent(self.n_out, length, self.data_format.name)

    def memory_use(self, batch, training, itemsize):
        t = self.output_type(self.input_type)
        if t.time_series_length is None:
            return None
        return self._embed_use(batch * t.time_series_length, training, itemsize)

    def activate(self, x, training, mgr):
        if not (x.ndim == 2 or (x.ndim == 3 and x.shape[1] == 1)):
            raise ValueError(f"EmbeddingSequenceLayer (layer index = {self.index}): Invalid "
                             f"input: EmbeddingSequenceLayer expects either rank 2 input of "
                             f"shape [minibatch,seqLength] or rank 3 input of shape "
                             f"[minibatch,1,seqLength], got shape {tuple(x.shape)}")
        n, steps = x.shape[0], x.shape[-1]
        if not self.infer_input_length and steps != self.input_length:
            raise ValueError(f"EmbeddingSequenceLayer (layer index = {self.index}): input "
                             f"sequence length {steps} does not match the configured "
                             f"input_length {self.input_length}")
        # the indices in time-major order (row t * n + i), as the rows of the output
        self._shape = (n, steps)
        idx = self._indices(x.reshape(n, steps).transpose(1, 0))
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS, (steps * n, self.n_out),
                                     dtype=self.params["W"].dtype)
        self._embed(idx, y, training, mgr)
        self._shape = (n, steps)
        m = self._step_mask(n, steps, mgr)
        if m is not None:
            ndws.multiply(y, m, out=y)
        return sequence_view(y.reshape(steps, n, self.n_out), self.data_format)

    def _entry(self, i):
        n = self._shape[0]
        return f"example {i % n} at step {i // n}"

    def _step_mask(self, n: int, steps: int, mgr) -> NDArray | None:
        # the features mask (n, time) as one value per row (steps * n, 1)
        m = getattr(self, "_fmask", None)
        if m is None:
            return None
        if tuple(m.shape) != (n, steps):
            raise ValueError(f"EmbeddingSequenceLayer (layer index = {self.index}): the "
                             f"features mask has shape {tuple(m.shape)}, expected (n_samples, "
                             f"time) = {(n, steps)}")
        tm = m.transpose(1, 0)
        if not tm.flags.c_contiguous:
            tm = mgr.dup(ArrayType.ACTIVATIONS, tm)
        return tm.reshape(steps * n, 1)

    def backprop_gradient(self, epsilon, mgr):
        n, steps = self._shape
        rows = rows_of_sequence(epsilon, self.data_format, ArrayType.BP_WORKING_MEM, mgr)
        d = self._delta(rows, mgr)
        m = self._step_mask(n, steps, mgr)
        if m is not None:
            ndws.multiply(d, m, out=d)
        return self._gradients(d), None

