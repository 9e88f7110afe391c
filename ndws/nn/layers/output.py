"""Output layers of images and time series: `CnnLossLayer` (DL4J's), a loss at every pixel
(segmentation, denoising), and `RnnOutputLayer` / `RnnLossLayer`, a dense output and a loss at
every time step (sequence labelling, character models), scored as DL4J scores them: the
pixels' or steps' losses summed (a label mask weighs each step) and divided by the minibatch.

Examples
--------
>>> import numpy as np
>>> from ndws.nn import (CnnLossLayer, ConvolutionLayer, InputType, MultiLayerConfiguration,
...                      MultiLayerNetwork)
>>> net = MultiLayerNetwork(MultiLayerConfiguration(
...     [ConvolutionLayer(kernel_size=3, n_out=2, convolution_mode="same"),
...      CnnLossLayer(activation="softmax", loss_function="mcxent")],
...     input_type=InputType.convolutional(5, 5, 1), seed=0))
>>> net.init()
>>> net.output(np.zeros((1, 1, 5, 5), np.float32)).shape            # per-pixel probabilities
(1, 2, 5, 5)
"""
from __future__ import annotations

from typing import Any

import ndws
from ndws._core import NDArray
from ndws.nn import functional as F
from ndws.nn.inputs import CNN2DFormat, InputType, RNNFormat
from ndws.nn.layers._geometry import ImageLayer, check_image
from ndws.nn.layers.base import Activation, Layer, _LossMixin, _Regularized, init_dense
from ndws.nn.layers.recurrent import SequenceInput, check_sequence
from ndws.nn.preprocessors import MaskState, rows_of_sequence, sequence_view
from ndws.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr

__all__ = ["CnnLossLayer", "RnnOutputLayer", "RnnLossLayer"]


class CnnLossLayer(ImageLayer, _LossMixin, Layer):
    """A loss at every pixel of images, without parameters (DL4J's ``CnnLossLayer``): the
    input is the pre-activation, the labels have its shape (n, c, h, w) (channels last for
    NHWC) and the activation acts across the channels of each pixel (softmax: per-pixel class
    probabilities). The score sums every pixel's loss and divides by the minibatch (not by the
    pixels), as DL4J does.

    Parameters
    ----------
    loss_function : str or LossFunction
        As for `OutputLayer` (MCXENT needs softmax, XENT sigmoid).
    data_format : {"NCHW", "NHWC"}, optional
        None: the input's.
    **common
        As `Layer` (activation; n_out, when given, equals n_in: the channels).
    """

    fields = _LossMixin.fields + ("data_format",)
    keeps_width = True

    def __init__(self, *, data_format: Any = None, **common: Any):
        super().__init__(**common)
        self.data_format = (None if data_format is None
                            else CNN2DFormat.parse(data_format, "CnnLossLayer.data_format"))

    def output_type(self, input_type):
        return self.input_type

    def _channel_axis(self) -> int:
        return 1 if self.data_format is CNN2DFormat.NCHW else 3

    def memory_use(self, batch, training, itemsize):
        size = batch * self._input_elements() * itemsize
        use = [("forward", ArrayType.ACTIVATIONS, size)]
        if training:
            use += self._loss_use(batch * self.input_type.height * self.input_type.width,
                                  itemsize)
            if self.data_format is CNN2DFormat.NCHW:
                # the pre-activation and the labels as rows (n*h*w, c): pixel-major copies
                use += [("backward", ArrayType.BP_WORKING_MEM, size)] * 2
            if self.input_gradient_needed:
                use.append(("backward", ArrayType.ACTIVATION_GRAD, size))
        return use

    # -- forward --------------------------------------------------------------------------------

    def activate(self, x, training, mgr):
        check_image(self, x)
        act = self.activation or Activation.IDENTITY
        self._x = x
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS, x.shape, dtype=x.dtype)
        if act is Activation.SOFTMAX:
            return F.softmax(x, axis=self._channel_axis(), out=y)
        return F.activation(act.value, x, out=y)

    # -- the loss on rows of pixels -------------------------------------------------------------

    def _rows(self, a: NDArray, mgr: LayerWorkspaceMgr, name: str) -> NDArray:
        # (n, c, h, w) / (n, h, w, c) as (n*h*w, c), one row per pixel: a view of NHWC, a
        # pixel-major copy of NCHW in the working memory (DL4J's reshape4dTo2d dups too)
        t = self.input_type
        shape = (a.shape[0],) + t.shape()
        if tuple(a.shape) != shape:
            raise ValueError(f"{name}: expected shape {shape} (the input's) for layers"
                             f"[{self.index}] (CnnLossLayer), got {tuple(a.shape)}")
        rows = a.shape[0] * t.height * t.width
        if self.data_format is CNN2DFormat.NHWC and a.flags.c_contiguous:
            return a.reshape(rows, t.channels)
        r = mgr.create_uninitialized(ArrayType.BP_WORKING_MEM,
                                     (a.shape[0], t.height, t.width, t.channels), dtype=a.dtype)
        r.assign(a.transpose(0, 2, 3, 1) if self.data_format is CNN2DFormat.NCHW else a)
        return r.reshape(rows, t.channels)

    def _pixel_mask(self, mask: NDArray | None, n: int, mgr: LayerWorkspaceMgr) -> Any:
        # DL4J's masks: per example (n,) repeated over its pixels, or per pixel (n, 1, h, w) /
        # (n, h, w, 1) / (n, h, w)
        if mask is None:
            return None
        t = self.input_type
        hw = t.height * t.width
        if mask.ndim == 1 and mask.shape[0] == n:
            m = mgr.create_uninitialized(ArrayType.BP_WORKING_MEM, (n, hw), dtype=mask.dtype)
            m.assign(mask.reshape(n, 1))
            return m.reshape(n * hw)
        if mask.size == n * hw and mask.shape[0] == n:
            flat = mask if mask.flags.c_contiguous else mgr.dup(ArrayType.BP_WORKING_MEM, mask)
            return flat.reshape(n * hw)
        raise ValueError(f"labels mask: expected (n,) per example or (n, 1, h, w) per pixel for "
                         f"layers[{self.index}] (CnnLossLayer), got shape {tuple(mask.shape)}")

    def _score(self, labels, mgr, mask, want_grad):
        x = self._x
        n = x.shape[0]
        z = self._rows(x, mgr, "input")
        return self._loss(z, self._rows(labels, mgr, "labels"), mgr, want_grad,
                          self._pixel_mask(mask, n, mgr), examples=max(n, 1))

    def compute_score(self, labels, mgr, mask=None):
        return self._score(labels, mgr, mask, False)[0]

    def compute_score_and_gradient(self, labels, mgr, mask=None):
        score, dz = self._score(labels, mgr, mask, True)
        if not self.input_gradient_needed:
            return score, {}, None
        x = self._x
        eps = mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, x.shape, dtype=x.dtype)
        t = self.input_type
        pixels = dz.reshape(x.shape[0], t.height, t.width, t.channels)
        eps.assign(pixels.transpose(0, 3, 1, 2) if self.data_format is CNN2DFormat.NCHW
                   else pixels)
        return score, {}, eps

    def compute_score_examples(self, labels, mgr, mask=None):
        x = self._x
        n = x.shape[0]
        self._z = self._rows(x, mgr, "input")
        per = super().compute_score_examples(self._rows(labels, mgr, "labels"), mgr,
                                             self._pixel_mask(mask, n, mgr))
        return ndws.sum(per.reshape(n, per.shape[0] // max(n, 1)), axis=1)


class _SequenceOutput(SequenceInput, _LossMixin):
    # what RnnOutputLayer and RnnLossLayer share: time series in and out (rows get a
    # FeedForwardToRnnPreProcessor), the loss on one row per (step, example) in DL4J's
    # time-major order, divided by the minibatch, the labels and label mask checked and made
    # rows the same way

    fields = _LossMixin.fields + ("data_format",)

    def __init__(self, *, data_format: Any = None, **common: Any):
        super().__init__(**common)
        self.data_format = (None if data_format is None else
                            RNNFormat.parse(data_format, f"{type(self).__name__}.data_format"))

    def output_type(self, input_type):
        t = self.input_type
        return InputType.recurrent(self.output_width(),
                                   None if t is None else t.time_series_length,
                                   self.data_format.name)

    def feed_forward_mask(self, mask, state, mgr):
        # DL4J: the input mask is kept (applied to the output, and the loss's mask when no
        # label mask is given) only when it is active; nothing goes further
        self._fmask = mask if state is MaskState.ACTIVE else None
        return None, None

    def _copies_input(self, batch: int, steps: int) -> bool:
        # whether the input's rows are a copy: the network's own input (NCW or NWC in C order)
        # is not time-major; every built-in layer before this one makes time-major outputs
        return self.index == 0 and batch > 1 and steps > 1

    def _rows_in(self, x: NDArray, training: bool, mgr: LayerWorkspaceMgr) -> NDArray:
        # the input as rows (steps * n, n_in), kept for the backward pass (a copy then lives
        # as long as the input: INPUT)
        self._batch, self._length = check_sequence(self, x, self.data_format)
        t = ArrayType.INPUT if training else ArrayType.FF_WORKING_MEM
        return rows_of_sequence(x, self.data_format, t, mgr)

    def _out_rows(self, rows: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        return mgr.create_uninitialized(ArrayType.ACTIVATIONS, (rows.shape[0], self.output_width()),
                                        dtype=rows.dtype)

    def _apply_mask(self, y: NDArray) -> None:
        m = self._row_mask(y.shape[0])
        if m is not None:
            ndws.multiply(y, m, out=y)

    def _as_sequence(self, y: NDArray) -> NDArray:
        return sequence_view(y.reshape(self._length, self._batch, y.shape[1]), self.data_format)

    def _label_rows(self, labels: NDArray, mgr: LayerWorkspaceMgr) -> NDArray:
        n, steps, width = self._batch, self._length, self.output_width()
        fmt = self.data_format
        expected = (n, width, steps) if fmt is RNNFormat.NCW else (n, steps, width)
        if labels.ndim != 3:
            raise ValueError(f"labels: {type(self).__name__} (layer index = {self.index}) "
                             f"needs rank 3 labels {list(expected)} ({fmt.name}), got shape "
                             f"{tuple(labels.shape)}")
        t_axis = 2 if fmt is RNNFormat.NCW else 1
        if labels.shape[t_axis] != steps:
            raise ValueError(f"labels: Sequence lengths do not match for {type(self).__name__} "
                             f"input and labels: Arrays should be rank 3 with shape "
                             f"[minibatch, size, sequenceLength] - mismatch on dimension "
                             f"{t_axis} (sequence length) - input={steps} vs. "
                             f"label={labels.shape[t_axis]}")
        if tuple(labels.shape) != expected:
            raise ValueError(f"labels: expected shape {expected} ({fmt.name}) for layers"
                             f"[{self.index}] ({type(self).__name__}), got "
                             f"{tuple(labels.shape)}")
        return rows_of_sequence(labels, fmt, ArrayType.BP_WORKING_MEM, mgr)

    def _mask_rows(self, mask: NDArray | None, mgr: LayerWorkspaceMgr) -> NDArray | None:
        # the label mask as rows: (n,) per example, (n, time) per step, or like the labels
        # per output; without one, the kept active features mask (DL4J's maskArray)
        n, steps, width = self._batch, self._length, self.output_width()
        if mask is None:
            m = getattr(self, "_fmask", None)
            return None if m is None else self._mask_rows(m, mgr)
        if mask.ndim == 1 and mask.shape[0] == n:
            rows = mgr.create_uninitialized(ArrayType.BP_WORKING_MEM, (steps, n),
                                            dtype=mask.dtype)
            rows.assign(mask.reshape(1, n))
            return rows.reshape(steps * n)
        if mask.ndim == 2 and tuple(mask.shape) == (n, steps):
            tm = mask.transpose(1, 0)
            if not tm.flags.c_contiguous:
                tm = mgr.dup(ArrayType.BP_WORKING_MEM, tm)
            return tm.reshape(steps * n)
        if mask.ndim == 3 and mask.size == n * steps * width:
            try:
                return self._label_rows(mask, mgr)
            except ValueError:
                pass
        raise ValueError(f"labels mask: expected (n_samples, time) = {(n, steps)} per step or "
                         f"the labels' shape per output for layers[{self.index}] "
                         f"({type(self).__name__}), got shape {tuple(mask.shape)}")

    def _score_rows(self, labels, mgr, mask, want_grad):
        return self._loss(self._z, self._label_rows(labels, mgr), mgr, want_grad,
                          self._mask_rows(mask, mgr), examples=max(self._batch, 1))

    def compute_score(self, labels, mgr, mask=None):
        return self._score_rows(labels, mgr, mask, False)[0]

    def compute_score_examples(self, labels, mgr, mask=None):
        per = super().compute_score_examples(self._label_rows(labels, mgr), mgr,
                                             self._mask_rows(mask, mgr))
        # each example's steps summed (DL4J's scoreExamples of a time series)
        return ndws.sum(per.reshape(self._length, self._batch), axis=0)

    def _loss_memory(self, batch: int, steps: int, itemsize: int) -> list:
        rows = batch * steps
        use = self._loss_use(rows, itemsize)
        use.append(("backward", ArrayType.BP_WORKING_MEM,
                    rows * self.output_width() * itemsize))        # the labels as rows
        return use


class RnnOutputLayer(_SequenceOutput, _Regularized, Layer):
    """A dense output layer at every time step (DL4J's ``RnnOutputLayer``): time series
    (n, n_in, time) in, ``f(x_t W + b)`` out, (n, n_out, time) (NWC: (n, time, ...)); labels of
    the output's shape. The score sums every step's loss (a label mask (n, time) weighs each
    step; the labels' shape masks each output) and divides by the minibatch, as DL4J does.

    Parameters
    ----------
    loss_function : str or LossFunction
        As for `OutputLayer` (MCXENT needs softmax, XENT sigmoid).
    data_format : {"NCW", "NWC"}, optional
        None: the input's.
    **common
        As `Layer` (n_out required).

    Parameters are DL4J's: ``W`` (n_in, n_out) in column-major order, ``b`` (1, n_out).
    """

    has_weights = True

    def param_shapes(self):
        return {"W": (self.n_in, self.n_out), "b": (1, self.n_out)}

    def param_order(self, name):
        return "F" if name == "W" else "C"

    def init_params(self, rng):
        init_dense(self, rng)

    def memory_use(self, batch, training, itemsize):
        t = self.input_type
        if t is None or t.time_series_length is None:
            return None
        steps = t.time_series_length
        rows = batch * steps
        out = rows * self.n_out * itemsize
        use = [("forward", ArrayType.ACTIVATIONS, out)]
        if self._copies_input(batch, steps):
            use.append(("forward", ArrayType.INPUT if training else ArrayType.FF_WORKING_MEM,
                        rows * self.n_in * itemsize))
        if training:
            use.append(("forward", ArrayType.INPUT, out))
            use += self._loss_memory(batch, steps, itemsize)
            use += self._regularization_use(itemsize)
            if self.input_gradient_needed:
                use.append(("backward", ArrayType.ACTIVATION_GRAD, rows * self.n_in * itemsize))
        return use

    def activate(self, x, training, mgr):
        rows = self._x = self._rows_in(x, training, mgr)
        act = self.activation or Activation.IDENTITY
        b = self.params["b"].reshape(self.n_out)
        y = self._out_rows(rows, mgr)
        if not training:
            F.linear(rows, self.params["W"], b, act.value, out=y)
        else:
            z = self._z = mgr.create_uninitialized(ArrayType.INPUT, y.shape, dtype=y.dtype)
            F.linear(rows, self.params["W"], b, "identity", out=z)
            F.activation(act.value, z, out=y)
        self._apply_mask(y)
        return self._as_sequence(y)

    def step_runner(self, batch, dtype):
        if self.dropout is not None and self.dropout < 1.0:
            return None
        buf = ndws.empty((batch, self.n_out), dtype=dtype, detached=True)
        act = (self.activation or Activation.IDENTITY).value
        params, n_out = self.params, self.n_out

        def run(rows, out=None):
            # one step's rows are the whole input: activate's rows, without the reshapes
            return F.linear(rows, params["W"], params["b"].reshape(n_out), act,
                            out=buf if out is None else out)
        return run

    def compute_score_and_gradient(self, labels, mgr, mask=None):
        score, dz = self._score_rows(labels, mgr, mask, True)
        rows = self._x
        ndws.gemm(rows, dz, out=self.grads["W"], trans_a=True)
        self._regularize_gradient()
        ndws.sum(dz, axis=0, out=self.grads["b"].reshape(self.n_out))
        if not self.input_gradient_needed:
            return score, dict(self.grads), None
        eps = mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, rows.shape, dtype=rows.dtype)
        ndws.gemm(dz, self.params["W"], out=eps, trans_b=True)
        return score, dict(self.grads), self._as_sequence(eps)


class RnnLossLayer(_SequenceOutput, Layer):
    """A loss at every time step, without parameters (DL4J's ``RnnLossLayer``): the input is
    the pre-activation (n, size, time), the activation acts on each step's values (softmax:
    per-step class probabilities), scored as `RnnOutputLayer`."""

    keeps_width = True

    def memory_use(self, batch, training, itemsize):
        t = self.input_type
        if t is None or t.time_series_length is None:
            return None
        steps = t.time_series_length
        size = batch * steps * self.n_in * itemsize
        use = [("forward", ArrayType.ACTIVATIONS, size)]
        if self._copies_input(batch, steps):
            use.append(("forward", ArrayType.INPUT if training else ArrayType.FF_WORKING_MEM,
                        size))
        if training:
            use += self._loss_memory(batch, steps, itemsize)
            if self.input_gradient_needed:
                use.append(("backward", ArrayType.ACTIVATION_GRAD, size))
        return use

    def activate(self, x, training, mgr):
        rows = self._z = self._rows_in(x, training, mgr)
        y = self._out_rows(rows, mgr)
        F.activation((self.activation or Activation.IDENTITY).value, rows, out=y)
        self._apply_mask(y)
        return self._as_sequence(y)

    def compute_score_and_gradient(self, labels, mgr, mask=None):
        score, dz = self._score_rows(labels, mgr, mask, True)
        if not self.input_gradient_needed:
            return score, {}, None
        eps = mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, dz.shape, dtype=dz.dtype)
        ndws.multiply(dz, 1, out=eps)
        return score, {}, self._as_sequence(eps)
