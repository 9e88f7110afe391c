"""The convolution layers: `ConvolutionLayer` (DL4J's 2-D convolution), on the kernels of
`ndws.nn.functional` (`conv2d`, `conv2d_backward`), with their scratch in the layer's working
memory (docs/convolution.md).

Examples
--------
>>> from ndws.nn import ConvolutionLayer, InputType, MultiLayerConfiguration, OutputLayer
>>> conf = MultiLayerConfiguration(
...     [ConvolutionLayer(n_out=20, activation="identity"),
...      OutputLayer(n_out=10, activation="softmax")],
...     input_type=InputType.convolutional_flat(28, 28, 1), seed=1)
>>> conv = conf.resolved_layers[0]
>>> conv.kernel_size, conv.stride, conv.padding, conv.geometry()[:2]
((5, 5), (1, 1), (0, 0), (24, 24))
>>> conv.param_shapes()
{'b': (20,), 'W': (20, 1, 5, 5)}
"""
from __future__ import annotations

from typing import Any

import numpy as np

import ndws
from ndws._core import _np_view
from ndws.nn import functional as F
from ndws.nn.inputs import InputType
from ndws.nn.layers._geometry import WindowLayer, check_image, too_large
from ndws.nn.layers.base import (_FROM_OUTPUT, Activation, FieldTypeError, Layer, WeightInit,
                                 _Regularized)
from ndws.nn.workspace_mgr import ArrayType

__all__ = ["ConvolutionLayer"]

_U8 = np.dtype(np.uint8)


def _flag(owner: str, name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise FieldTypeError(f"{owner}.{name}: expected a bool, got {type(value).__name__} "
                             f"{value!r:.40}")
    return bool(value)


class ConvolutionLayer(WindowLayer, _Regularized, Layer):
    """2-D convolution (DL4J's ``ConvolutionLayer``): ``y = f(conv(x, W) + b)``.

    Parameters
    ----------
    kernel_size, stride, dilation : int or (int, int)
        Defaults (5, 5), (1, 1), (1, 1) (DL4J's builder).
    padding : int or (int, int)
        Zeros on both sides; default (0, 0). Not with SAME.
    convolution_mode : str or ConvolutionMode, optional
        STRICT, TRUNCATE or SAME (None: the network's, TRUNCATE by default); CAUSAL is for the
        1-D layers only.
    has_bias : bool
    data_format : {"NCHW", "NHWC"}, optional
        None: the input's.
    n_out : int
        Output channels (required). n_in is the input's channels.
    **common
        As `Layer`: activation (the network's default when omitted: sigmoid, as in DL4J),
        weight_init, bias_init, dropout (on the input), l1, l2, weight_decay, updater, name.

    Parameters of the layer, in DL4J's order: ``b`` (n_out,) then ``W`` (n_out, n_in, kh, kw),
    C order; W's fan-in is ``n_in * kh * kw`` and its fan-out ``n_out * kh * kw / (sh * sw)``.
    """

    fields = Layer.fields + WindowLayer.window_fields + ("has_bias",)
    has_weights = True

    def __init__(self, *, kernel_size: Any = (5, 5), stride: Any = (1, 1), padding: Any = (0, 0),
                 dilation: Any = (1, 1), convolution_mode: Any = None, has_bias: bool = True,
                 data_format: Any = None, **common: Any):
        super().__init__(**common)
        self._init_window(kernel_size, stride, padding, dilation, convolution_mode,
                          data_format)
        self.has_bias = _flag(type(self).__name__, "has_bias", has_bias)

    # -- configuration --------------------------------------------------------------------------

    def _check_resolved(self, where):
        super()._check_resolved(where)
        if self.activation is Activation.SOFTMAX:
            raise ValueError(f"{where}.activation: softmax is not an element-wise activation; "
                             f"a per-pixel softmax is CnnLossLayer's")
        g = self.geometry()
        kh, kw = self.kernel_size
        too_large(self, where, self.input_type.elements_per_example())
        too_large(self, where, self.n_out * g.out_h * g.out_w)
        # the im2col rows of one example (what the kernels' scratch holds at most)
        too_large(self, where, self.n_in * kh * kw * g.out_h * g.out_w)

    def output_type(self, input_type):
        g = self.geometry()
        return InputType.convolutional(g.out_h, g.out_w, self.n_out, self.data_format.name)

    def _out_shape(self, batch: int) -> tuple:
        return self.output_type(self.input_type).shape(batch)

    # -- parameters -----------------------------------------------------------------------------

    def param_shapes(self):
        w = {"W": (self.n_out, self.n_in) + self.kernel_size}
        return {"b": (self.n_out,), **w} if self.has_bias else w

    def init_params(self, rng):
        kh, kw = self.kernel_size
        sh, sw = self.stride
        fan_in = self.n_in * kh * kw
        fan_out = self.n_out * kh * kw / (sh * sw)
        w = (self.weight_init or WeightInit.XAVIER).sample(rng, self.param_shapes()["W"],
                                                           fan_in, fan_out)
        np.copyto(_np_view(self.params["W"]), w, casting="unsafe")
        if self.has_bias:
            self.params["b"].fill(self.bias_init or 0.0)

    # -- memory ---------------------------------------------------------------------------------

    def _scratch(self, batch: int, backward: bool, itemsize: int) -> int:
        # the kernel's scratch bytes for one call (they depend on the thread count): asked of
        # the kernel once per (batch, pass, threads, dtype) and remembered, so a training step
        # pays a dict lookup per call
        sizes = self.__dict__.setdefault("_scratch_sizes", {})
        key = (batch, backward, ndws.get_num_threads(), itemsize)
        n = sizes.get(key)
        if n is None:
            n = sizes[key] = F.conv2d_scratch_bytes(
                self.input_type.shape(batch), self.param_shapes()["W"],
                dtype=np.float64 if itemsize == 8 else np.float32, backward=backward,
                **self._kernel_args())
        return n

    def memory_use(self, batch, training, itemsize):
        out = int(np.prod(self._out_shape(batch))) * itemsize
        act = self.activation or Activation.IDENTITY
        use = self._dropout_use(batch, training, itemsize)
        use.append(("forward", ArrayType.ACTIVATIONS, out))
        if training and act not in _FROM_OUTPUT:
            use.append(("forward", ArrayType.INPUT, out))           # the pre-activation
        use.append(("forward", ArrayType.FF_WORKING_MEM, self._scratch(batch, False, itemsize)))
        if training:
            if act is not Activation.IDENTITY:
                use.append(("backward", ArrayType.BP_WORKING_MEM, out))      # dL/dz
            use.append(("backward", ArrayType.BP_WORKING_MEM,
                        self._scratch(batch, True, itemsize)))
            use += self._regularization_use(itemsize)
            if self.input_gradient_needed:
                use.append(("backward", ArrayType.ACTIVATION_GRAD,
                            batch * self._input_elements() * itemsize))
        return use

    # -- forward and backward -------------------------------------------------------------------

    def _kernel_args(self) -> dict:
        return {"stride": self.stride, "padding": self._pads(), "dilation": self.dilation,
                "data_format": self.data_format.name}

    def activate(self, x, training, mgr):
        check_image(self, x)
        x = self._apply_dropout(x, training, mgr, getattr(self, "_rng", None))
        self._x = x
        n = x.shape[0]
        act = self.activation or Activation.IDENTITY
        shape = self._out_shape(n)
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS, shape, dtype=x.dtype)
        scratch = mgr.create_uninitialized(
            ArrayType.FF_WORKING_MEM, (self._scratch(n, False, x.dtype.itemsize),), dtype=_U8)
        b = self.params["b"] if self.has_bias else None
        if not training or act in _FROM_OUTPUT:
            # the activation fused into the kernel's tiles; relu's and identity's derivatives
            # are read off the output, so training keeps y itself
            F.conv2d(x, self.params["W"], b, activation=act.value, out=y, scratch=scratch,
                     **self._kernel_args())
            self._z = y
            return y
        z = mgr.create_uninitialized(ArrayType.INPUT, shape, dtype=x.dtype)
        F.conv2d(x, self.params["W"], b, out=z, scratch=scratch, **self._kernel_args())
        self._z = z
        return F.activation(act.value, z, out=y)

    def backprop_gradient(self, epsilon, mgr):
        act = self.activation or Activation.IDENTITY
        x = self._x
        if act is Activation.IDENTITY:
            dz = epsilon                        # dL/dz is the epsilon itself: nothing to copy
        else:
            dz = mgr.create_uninitialized(ArrayType.BP_WORKING_MEM, epsilon.shape,
                                          dtype=epsilon.dtype)
            F.activation_backward(act.value, self._z, epsilon, out=dz)
        scratch = mgr.create_uninitialized(
            ArrayType.BP_WORKING_MEM, (self._scratch(x.shape[0], True, x.dtype.itemsize),),
            dtype=_U8)
        need_input = self.input_gradient_needed
        eps = (mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, x.shape, dtype=x.dtype)
               if need_input else None)
        F.conv2d_backward(x, self.params["W"], dz, need_input=need_input, need_weight=True,
                          need_bias=self.has_bias, grad_input=eps,
                          grad_weight=self.grads["W"],
                          grad_bias=self.grads["b"] if self.has_bias else None,
                          scratch=scratch, **self._kernel_args())
        self._regularize_gradient()
        return dict(self.grads), self._dropout_backward(eps)
