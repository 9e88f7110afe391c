"""The convolution layers (DL4J's): `ConvolutionLayer`, `Deconvolution2D`,
`DepthwiseConvolution2D`, `SeparableConvolution2D` and `Convolution1DLayer`, on the kernels of
`ndws.nn.functional` (`conv2d`, `conv_transpose2d`, `depthwise_conv2d` and their gradients),
their scratch in the layer's working memory (docs/convolution.md).

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
from ndws.nn.inputs import ConvolutionMode, InputType
from ndws.nn.layers._geometry import Call, Window, WindowLayer, too_large, type_cache
from ndws.nn.layers.base import (_FROM_OUTPUT, Activation, FieldTypeError, Layer, WeightInit,
                                 _Regularized)
from ndws.nn.workspace_mgr import ArrayType

__all__ = ["ConvolutionLayer", "Deconvolution2D", "DepthwiseConvolution2D",
           "SeparableConvolution2D", "Convolution1DLayer"]

_U8 = np.dtype(np.uint8)


def _flag(owner: str, name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise FieldTypeError(f"{owner}.{name}: expected a bool, got {type(value).__name__} "
                             f"{value!r:.40}")
    return bool(value)


class _Convolution(WindowLayer, _Regularized, Layer):
    # A convolution of images with weights, a bias and an activation: the configuration and
    # the forward / backward skeleton (dropout on the input, the activation fused into the
    # kernel where its derivative reads off the output, the pre-activation kept otherwise, the
    # scratch in the working memory). A family member says its weights' shape and fans, and
    # its kernel calls (_forward / _backward / _scratch_of).

    fields = Layer.fields + WindowLayer.window_fields + ("has_bias",)
    has_weights = True
    _pass_state = Layer._pass_state + ("_t", "_d")

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
        t = self.image_type()
        if t is not None:
            self._check_image_sizes(where, t)

    def _check_image_sizes(self, where, t):
        # every array of one example, before anything is allocated
        (kh, kw), out = self.pairs()[0], self.output_image(t)
        too_large(self, where, t.elements_per_example())
        too_large(self, where, out.elements_per_example())
        too_large(self, where, t.channels * kh * kw * out.height * out.width)

    def weight_shape(self) -> tuple:
        """The shape of ``W``."""
        return (self.n_out, self.n_in) + self.kernel_size

    def _kernel_w(self, w: Any) -> Any:
        # W (or its gradient) as the kernel takes it: itself (a 1-D layer's view differs)
        return w

    def param_shapes(self):
        w = {"W": self.weight_shape()}
        return {"b": (self.n_out,), **w} if self.has_bias else w

    def _fans(self) -> tuple[float, float]:
        # DL4J's ConvolutionParamInitializer: the receptive field counts, the stride divides
        (kh, kw), (sh, sw) = self.pairs()[:2]
        return self.n_in * kh * kw, self.n_out * kh * kw / (sh * sw)

    def init_params(self, rng):
        fan_in, fan_out = self._fans()
        w = (self.weight_init or WeightInit.XAVIER).sample(rng, self.weight_shape(), fan_in,
                                                           fan_out)
        np.copyto(_np_view(self.params["W"]), w, casting="unsafe")
        if self.has_bias:
            self.params["b"].fill(self.bias_init or 0.0)

    # -- the kernel calls -----------------------------------------------------------------------

    def _scratch_bytes(self, call: Call, x_shape: tuple, backward: bool,
                       itemsize: int) -> int:
        # the kernel's scratch for one call (it depends on the thread count): asked once per
        # (batch, pass, threads, dtype) and remembered
        key = (x_shape[0], backward, ndws.get_num_threads(), itemsize)
        n = call.scratch.get(key)
        if n is None:
            n = call.scratch[key] = self._scratch_of(call, x_shape, backward, itemsize)
        return n

    def _scratch_of(self, call, x_shape, backward, itemsize) -> int:
        return F.conv2d_scratch_bytes(x_shape, (self.n_out, self.n_in) + self.pairs()[0],
                                      dtype=_float(itemsize), backward=backward, **call.kwargs)

    def _forward(self, x, b, act, out, scratch, kw, mgr, training) -> None:
        F.conv2d(x, self._kernel_w(self.params["W"]), b, activation=act, out=out,
                 scratch=scratch, **kw)

    def _backward(self, x, dz, eps, scratch, kw, mgr) -> None:
        F.conv2d_backward(x, self._kernel_w(self.params["W"]), dz, need_input=eps is not None,
                          need_weight=True, need_bias=self.has_bias, grad_input=eps,
                          grad_weight=self._kernel_w(self.grads["W"]),
                          grad_bias=self.grads["b"] if self.has_bias else None,
                          scratch=scratch, **kw)

    def _extra_use(self, batch, training, itemsize, call) -> list:
        return []

    # -- memory ---------------------------------------------------------------------------------

    def memory_use(self, batch, training, itemsize):
        t = self.image_type()
        if t is None:
            return None                 # a time series of varying length: known when it comes
        call = self.kernel_call(t)
        x_shape = t.shape(batch)
        out = batch * int(np.prod(call.out_shape)) * itemsize
        act = self.activation or Activation.IDENTITY
        use = self._dropout_use(batch, training, itemsize)
        use.append(("forward", ArrayType.ACTIVATIONS, out))
        if training and act not in _FROM_OUTPUT:
            use.append(("forward", ArrayType.INPUT, out))           # the pre-activation
        use += self._extra_use(batch, training, itemsize, call)
        fwd = self._scratch_bytes(call, x_shape, False, itemsize)
        if fwd:
            use.append(("forward", ArrayType.FF_WORKING_MEM, fwd))
        if training:
            if act is not Activation.IDENTITY:
                use.append(("backward", ArrayType.BP_WORKING_MEM, out))      # dL/dz
            bwd = self._scratch_bytes(call, x_shape, True, itemsize)
            if bwd:
                use.append(("backward", ArrayType.BP_WORKING_MEM, bwd))
            use += self._regularization_use(itemsize)
            if self.input_gradient_needed:
                use.append(("backward", ArrayType.ACTIVATION_GRAD,
                            batch * t.elements_per_example() * itemsize))
        return use

    # -- forward and backward -------------------------------------------------------------------

    def activate(self, x, training, mgr):
        x, t = self.images(x)
        x = self._apply_dropout(x, training, mgr, getattr(self, "_rng", None))
        self._x, self._t = x, t
        call = self.kernel_call(t)
        act = self.activation or Activation.IDENTITY
        shape = (x.shape[0],) + call.out_shape
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS, shape, dtype=x.dtype)
        nbytes = self._scratch_bytes(call, x.shape, False, x.dtype.itemsize)
        scratch = (mgr.create_uninitialized(ArrayType.FF_WORKING_MEM, (nbytes,), dtype=_U8)
                   if nbytes else None)
        b = self.params["b"] if self.has_bias else None
        if not training or act in _FROM_OUTPUT:
            # the activation fused into the kernel; relu's and identity's derivatives are read
            # off the output, so training keeps y itself
            self._forward(x, b, act.value, y, scratch, call.kwargs, mgr, training)
            self._z = y
            return self.as_series(y)
        z = mgr.create_uninitialized(ArrayType.INPUT, shape, dtype=x.dtype)
        self._forward(x, b, "identity", z, scratch, call.kwargs, mgr, training)
        self._z = z
        return self.as_series(F.activation(act.value, z, out=y))

    def backprop_gradient(self, epsilon, mgr):
        act = self.activation or Activation.IDENTITY
        x, z, call = self._x, self._z, self.kernel_call(self._t)
        if epsilon.shape != z.shape:
            # a 1-D layer's series as images (a view; a copy if it is not C-contiguous)
            if not epsilon.flags.c_contiguous:
                epsilon = mgr.dup(ArrayType.BP_WORKING_MEM, epsilon)
            epsilon = epsilon.reshape(z.shape)
        if act is Activation.IDENTITY:
            dz = epsilon                        # dL/dz is the epsilon itself: nothing to copy
        else:
            dz = mgr.create_uninitialized(ArrayType.BP_WORKING_MEM, epsilon.shape,
                                          dtype=epsilon.dtype)
            F.activation_backward(act.value, z, epsilon, out=dz)
        nbytes = self._scratch_bytes(call, x.shape, True, x.dtype.itemsize)
        scratch = (mgr.create_uninitialized(ArrayType.BP_WORKING_MEM, (nbytes,), dtype=_U8)
                   if nbytes else None)
        eps = (mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, x.shape, dtype=x.dtype)
               if self.input_gradient_needed else None)
        self._backward(x, dz, eps, scratch, call.kwargs, mgr)
        self._regularize_gradient()
        eps = self._dropout_backward(eps)
        return dict(self.grads), None if eps is None else self.as_series(eps)


def _float(itemsize: int) -> Any:
    return np.float64 if itemsize == 8 else np.float32


def _multiplier(owner: str, value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise FieldTypeError(f"{owner}.depth_multiplier: expected an int >= 1, got "
                             f"{type(value).__name__} {value!r:.40}")
    if not 1 <= value <= 1 << 20:
        raise ValueError(f"{owner}.depth_multiplier: expected an int in [1, 2**20], got "
                         f"{value!r}")
    return int(value)


class ConvolutionLayer(_Convolution):
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


class Deconvolution2D(_Convolution):
    """Transposed 2-D convolution (DL4J's ``Deconvolution2D``), the input gradient of a
    convolution as a layer: the output is ``stride * (in - 1) + (k - 1) * dilation + 1 -
    2 * padding`` per axis (``stride * in`` with SAME).

    Parameters as `ConvolutionLayer`'s. Parameters of the layer: ``b`` (n_out,) then ``W``
    (n_in, n_out, kh, kw) (DL4J's layout).
    """

    def weight_shape(self):
        return (self.n_in, self.n_out) + self.kernel_size

    def geometry(self, t: InputType | None = None) -> Window:
        t = self.image_type() if t is None else t
        cache = type_cache(self, "_windows")
        w = cache.get(t)
        if w is None:
            w = cache[t] = self._transposed_window(t)
        return w

    def _transposed_window(self, t: InputType) -> Window:
        # DL4J's getDeconvolutionOutputSize; SAME pads as the convolution it transposes
        mode = self.convolution_mode or ConvolutionMode.TRUNCATE
        sizes, pads = [], []
        for axis, dim, size in ((0, "height", t.height), (1, "width", t.width)):
            k, s, p, d = (self.kernel_size[axis], self.stride[axis], self.padding[axis],
                          self.dilation[axis])
            where = (f"Invalid configuration for layer (idx={self.index}, name="
                     f"{self.name or '(not named)'}, type=Deconvolution2D) for {dim} dimension")
            try:
                sizes.append(F.conv_transpose_output_size(size, k, s, p, d, mode.name))
            except ValueError as exc:
                raise ValueError(f"{where}: {exc} (input type {t!r})") from None
            if mode is ConvolutionMode.SAME:
                if (k - 1) * d + 1 < s:
                    raise ValueError(f"{where}: Same mode needs an effective kernel at least as "
                                     f"large as the stride ({(k - 1) * d + 1} < {s})")
                pads.append(F.same_padding(s * size, k, s, d))
            else:
                pads.append((p, p))
        return Window(sizes[0], sizes[1], pads[0] + pads[1])

    def _scratch_of(self, call, x_shape, backward, itemsize):
        return F.conv2d_scratch_bytes(x_shape, self.weight_shape(), dtype=_float(itemsize),
                                      backward=backward, transposed=True, **call.kwargs)

    def _forward(self, x, b, act, out, scratch, kw, mgr, training):
        F.conv_transpose2d(x, self.params["W"], b, activation=act, out=out, scratch=scratch,
                           **kw)

    def _backward(self, x, dz, eps, scratch, kw, mgr):
        F.conv_transpose2d_backward(x, self.params["W"], dz, need_input=eps is not None,
                                    need_weight=True, need_bias=self.has_bias, grad_input=eps,
                                    grad_weight=self.grads["W"],
                                    grad_bias=self.grads["b"] if self.has_bias else None,
                                    scratch=scratch, **kw)


class DepthwiseConvolution2D(_Convolution):
    """Depthwise 2-D convolution (DL4J's ``DepthwiseConvolution2D``): each input channel
    convolved with its own `depth_multiplier` kernels; n_out is ``n_in * depth_multiplier``.

    Parameters
    ----------
    depth_multiplier : int
        Default 1.
    **others
        As `ConvolutionLayer` (n_out may be omitted; when given it must be n_in *
        depth_multiplier).

    Parameters of the layer: ``b`` (n_in * depth_multiplier,) then ``W`` (kh, kw, n_in,
    depth_multiplier) (DL4J's layout); W's fan-in is ``n_in * kh * kw``, its fan-out
    ``depth_multiplier * kh * kw / (sh * sw)``.
    """

    fields = _Convolution.fields + ("depth_multiplier",)

    def __init__(self, *, depth_multiplier: int = 1, **kw: Any):
        super().__init__(**kw)
        self.depth_multiplier = _multiplier(type(self).__name__, depth_multiplier)

    def _check_resolved(self, where):
        if self.n_in is not None:
            expected = self.n_in * self.depth_multiplier
            if self.n_out is not None and self.n_out != expected:
                raise ValueError(f"{where}.n_out: a DepthwiseConvolution2D has n_in * "
                                 f"depth_multiplier = {expected} outputs, got {self.n_out}")
            self.n_out = expected
        super()._check_resolved(where)

    def weight_shape(self):
        return self.kernel_size + (self.n_in, self.depth_multiplier)

    def _fans(self):
        (kh, kw), (sh, sw) = self.kernel_size, self.stride
        return self.n_in * kh * kw, self.depth_multiplier * kh * kw / (sh * sw)

    def _scratch_of(self, call, x_shape, backward, itemsize):
        return 0                           # the depthwise kernels need none

    def _forward(self, x, b, act, out, scratch, kw, mgr, training):
        # W (kh, kw, c, m) read through its (c, m, kh, kw) view: no copy
        F.depthwise_conv2d(x, self.params["W"].transpose(2, 3, 0, 1), b, activation=act,
                           out=out, **kw)

    def _backward(self, x, dz, eps, scratch, kw, mgr):
        F.depthwise_conv2d_backward(x, self.params["W"].transpose(2, 3, 0, 1), dz,
                                    need_input=eps is not None, need_weight=True,
                                    need_bias=self.has_bias, grad_input=eps,
                                    grad_weight=self.grads["W"].transpose(2, 3, 0, 1),
                                    grad_bias=self.grads["b"] if self.has_bias else None, **kw)


class SeparableConvolution2D(_Convolution):
    """Depthwise-separable 2-D convolution (DL4J's ``SeparableConvolution2D``): a depthwise
    convolution (`depth_multiplier` kernels per input channel) then a pointwise 1x1 one to
    n_out channels, with the bias and the activation.

    Parameters
    ----------
    depth_multiplier : int
        Default 1.
    **others
        As `ConvolutionLayer`.

    Parameters of the layer, in DL4J's order: ``b`` (n_out,), ``W`` (depth_multiplier, n_in,
    kh, kw), ``pW`` (n_out, n_in * depth_multiplier, 1, 1); l1 / l2 / weight decay act on both
    weights. The depthwise result is kept for the backward pass (ArrayType.INPUT).
    """

    fields = _Convolution.fields + ("depth_multiplier",)
    weight_keys = ("W", "pW")

    def __init__(self, *, depth_multiplier: int = 1, **kw: Any):
        super().__init__(**kw)
        self.depth_multiplier = _multiplier(type(self).__name__, depth_multiplier)

    def weight_shape(self):
        return (self.depth_multiplier, self.n_in) + self.kernel_size

    def param_shapes(self):
        shapes = super().param_shapes()
        shapes["pW"] = (self.n_out, self.n_in * self.depth_multiplier, 1, 1)
        return shapes

    def init_params(self, rng):
        super().init_params(rng)
        # the pointwise weights' fans: their inputs and outputs
        m = self.n_in * self.depth_multiplier
        w = (self.weight_init or WeightInit.XAVIER).sample(rng, (self.n_out, m, 1, 1), m,
                                                           self.n_out)
        np.copyto(_np_view(self.params["pW"]), w, casting="unsafe")

    def _fans(self):
        (kh, kw), (sh, sw) = self.kernel_size, self.stride
        return self.n_in * kh * kw, self.depth_multiplier * kh * kw / (sh * sw)

    def _depthwise_shape(self, call: Call) -> tuple:
        # the depthwise result per example: the output's size with n_in * m channels
        m = self.n_in * self.depth_multiplier
        s = call.out_shape
        return (m,) + s[1:] if call.kwargs["data_format"] == "NCHW" else s[:2] + (m,)

    def _scratch_of(self, call, x_shape, backward, itemsize):
        # the pointwise convolution's (the depthwise one needs none)
        return F.conv2d_scratch_bytes((x_shape[0],) + self._depthwise_shape(call),
                                      self.param_shapes()["pW"], dtype=_float(itemsize),
                                      backward=backward,
                                      data_format=call.kwargs["data_format"])

    def _extra_use(self, batch, training, itemsize, call):
        # the depthwise result: kept for the pointwise weights' gradient in training, working
        # memory at inference; its gradient in the backward pass
        size = batch * int(np.prod(self._depthwise_shape(call))) * itemsize
        if not training:
            return [("forward", ArrayType.FF_WORKING_MEM, size)]
        return [("forward", ArrayType.INPUT, size), ("backward", ArrayType.BP_WORKING_MEM, size)]

    def _forward(self, x, b, act, out, scratch, kw, mgr, training):
        shape = (x.shape[0],) + self._depthwise_shape(self.kernel_call(self._t))
        d = mgr.create_uninitialized(ArrayType.INPUT if training else ArrayType.FF_WORKING_MEM,
                                     shape, dtype=x.dtype)
        F.depthwise_conv2d(x, self.params["W"].transpose(1, 0, 2, 3), None, out=d, **kw)
        self._d = d
        F.conv2d(d, self.params["pW"], b, activation=act, out=out, scratch=scratch,
                 data_format=kw["data_format"])

    def _backward(self, x, dz, eps, scratch, kw, mgr):
        d = self._d
        dd = mgr.create_uninitialized(ArrayType.BP_WORKING_MEM, d.shape, dtype=d.dtype)
        F.conv2d_backward(d, self.params["pW"], dz, need_input=True, need_weight=True,
                          need_bias=self.has_bias, grad_input=dd, grad_weight=self.grads["pW"],
                          grad_bias=self.grads["b"] if self.has_bias else None,
                          scratch=scratch, data_format=kw["data_format"])
        F.depthwise_conv2d_backward(x, self.params["W"].transpose(1, 0, 2, 3), dd,
                                    need_input=eps is not None, need_weight=True,
                                    need_bias=False, grad_input=eps,
                                    grad_weight=self.grads["W"].transpose(1, 0, 2, 3), **kw)


class Convolution1DLayer(_Convolution):
    """1-D convolution over time (DL4J's ``Convolution1DLayer``): time series (n, c, T) (NCW,
    or (n, T, c) with NWC) to (n, n_out, T'), through the 2-D kernels on (n, c, 1, T) views.

    Parameters
    ----------
    kernel_size, stride, padding, dilation : int
        Defaults 5, 1, 0, 1.
    convolution_mode : str or ConvolutionMode, optional
        STRICT, TRUNCATE, SAME or CAUSAL (``ceil(T / stride)`` steps, all the padding before
        the series: the last output ends on the last step, so output j sees only steps
        <= T - 1 - (out - 1 - j) * stride; at stride 1, steps <= j).
    data_format : {"NCW", "NWC"}, optional
        None: the input's.
    **common
        As `ConvolutionLayer`.

    Parameters of the layer: ``b`` (n_out,) then ``W`` (n_out, n_in, k, 1) (DL4J's layout).
    """

    spatial_dims = 1

    def __init__(self, *, kernel_size: Any = 5, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, **kw: Any):
        super().__init__(kernel_size=kernel_size, stride=stride, padding=padding,
                         dilation=dilation, **kw)

    def weight_shape(self):
        return (self.n_out, self.n_in, self.kernel_size, 1)         # DL4J's

    def _kernel_w(self, w):
        # (n_out, n_in, k, 1) as the (n_out, n_in, 1, k) kernel of a one-row image: a view
        return w.reshape(self.n_out, self.n_in, 1, self.kernel_size)
