"""The pooling layers: `SubsamplingLayer` (DL4J's 2-D pooling over windows) and
`GlobalPoolingLayer` (over all positions of an image or a time series), on the pooling kernels
of `ndws.nn.functional`. They have no parameters, no activation and no dropout (DL4J never
applies dropout to pooling).

A MAX pooling layer keeps, in training, where each window's maximum was (int32, one per
output value, ArrayType.FF_CACHE: forward values kept for backprop), so its backward pass does
not search the windows again.

Examples
--------
>>> from ndws.nn import SubsamplingLayer
>>> pool = SubsamplingLayer(kernel_size=2)
>>> pool.pooling_type, pool.kernel_size, pool.stride
(<PoolingType.MAX: 'MAX'>, (2, 2), (2, 2))
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ndws._core import _np_view
from ndws.nn import functional as F
from ndws.nn.inputs import InputType, PoolingType, RNNFormat
from ndws.nn.layers._geometry import ImageLayer, WindowLayer, check_image
from ndws.nn.layers.base import FieldTypeError, Layer
from ndws.nn.workspace_mgr import ArrayType

__all__ = ["SubsamplingLayer", "Subsampling1DLayer", "GlobalPoolingLayer"]

_I32 = np.dtype(np.int32)


def _pnorm(owner: str, value: Any, required: bool) -> int | None:
    if value is None:
        if required:
            raise ValueError(f"{owner}.pnorm: PNORM pooling needs pnorm (an int >= 1)")
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise FieldTypeError(f"{owner}.pnorm: expected an int >= 1, got "
                             f"{type(value).__name__} {value!r:.40}")
    if not 1 <= value <= 1 << 20:
        raise ValueError(f"{owner}.pnorm: expected an int in [1, 2**20], got {value!r}")
    return int(value)


def _bool(owner: str, name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise FieldTypeError(f"{owner}.{name}: expected a bool, got {type(value).__name__} "
                             f"{value!r:.40}")
    return bool(value)


class _Pooling:
    # the forward and backward of one pooling call over (kernel, stride, padding, dilation) on
    # images of the layer's data format; MAX keeps its arg-max positions for the backward pass

    _pass_state = Layer._pass_state + ("_idx", "_x_shape", "_t")

    def _pool(self, x, y, training, mgr, kw, kind=None):
        kind = kind or self.pooling_type
        self._x = x
        if kind is PoolingType.MAX:
            if training:
                idx = self._idx = mgr.create_uninitialized(ArrayType.FF_CACHE, y.shape,
                                                           dtype=_I32)
                F.max_pool2d(x, out=y, indices=idx, **kw)
                return y
            return F.max_pool2d(x, out=y, **kw)
        if kind is PoolingType.AVG:
            return F.avg_pool2d(x, out=y, include_padding=self._include_padding(), **kw)
        if kind is PoolingType.SUM:
            return F.sum_pool2d(x, out=y, **kw)
        return F.pnorm_pool2d(x, self.pnorm, out=y, **kw)

    def _unpool(self, epsilon, eps, kw, kind=None):
        kind = kind or self.pooling_type
        x = self._x
        if kind is PoolingType.MAX:
            return F.max_pool2d_backward(x, epsilon, indices=self._idx, out=eps, **kw)
        if kind is PoolingType.AVG:
            return F.avg_pool2d_backward(x, epsilon, include_padding=self._include_padding(),
                                         out=eps, **kw)
        if kind is PoolingType.SUM:
            return F.sum_pool2d_backward(x, epsilon, out=eps, **kw)
        return F.pnorm_pool2d_backward(x, epsilon, self.pnorm, out=eps, **kw)

    def _include_padding(self) -> bool:
        return False

    def _pool_use(self, batch: int, training: bool, itemsize: int, out_values: int) -> list:
        use = [("forward", ArrayType.ACTIVATIONS, out_values * itemsize)]
        if training:
            if self.pooling_type is PoolingType.MAX:
                use.append(("forward", ArrayType.FF_CACHE, out_values * _I32.itemsize))
            if self.input_gradient_needed:
                use.append(("backward", ArrayType.ACTIVATION_GRAD,
                            batch * self.input_type.elements_per_example() * itemsize))
        return use


class SubsamplingLayer(_Pooling, WindowLayer, Layer):
    """2-D pooling over windows (DL4J's ``SubsamplingLayer``).

    Parameters
    ----------
    pooling_type : str or PoolingType
        MAX (default), AVG, SUM or PNORM.
    kernel_size, stride, padding, dilation : int or (int, int)
        Defaults (1, 1), (2, 2), (0, 0), (1, 1) (DL4J's builder: pass kernel_size).
    convolution_mode : str or ConvolutionMode, optional
        As for `ConvolutionLayer` (None: the network's).
    pnorm : int, optional
        The p of PNORM pooling, ``(sum |x|^p)^(1/p)`` (required for it).
    avg_pool_include_pad_in_divisor : bool
        AVG: divide by kh*kw, padding included (DL4J 1.0.0-beta4 and earlier), instead of by the
        number of taps inside the input (the default since beta5).
    data_format : {"NCHW", "NHWC"}, optional
        None: the input's.
    n_in, n_out, name : optional
        n_out, when given, must equal n_in (the channels).
    """

    fields = ("n_in", "n_out", "name") + WindowLayer.window_fields + (
        "pooling_type", "pnorm", "avg_pool_include_pad_in_divisor")
    keeps_width = True

    def __init__(self, *, pooling_type: Any = PoolingType.MAX, kernel_size: Any = (1, 1),
                 stride: Any = (2, 2), padding: Any = (0, 0), dilation: Any = (1, 1),
                 convolution_mode: Any = None, pnorm: int | None = None,
                 avg_pool_include_pad_in_divisor: bool = False, data_format: Any = None,
                 n_in: int | None = None, n_out: int | None = None, name: str | None = None):
        super().__init__(n_in=n_in, n_out=n_out, name=name)
        owner = type(self).__name__
        self._init_window(kernel_size, stride, padding, dilation, convolution_mode,
                          data_format)
        self.pooling_type = PoolingType.parse(pooling_type, f"{owner}.pooling_type")
        self.pnorm = _pnorm(owner, pnorm, self.pooling_type is PoolingType.PNORM)
        self.avg_pool_include_pad_in_divisor = _bool(owner, "avg_pool_include_pad_in_divisor",
                                                     avg_pool_include_pad_in_divisor)

    kernel_in_kwargs = True

    def _include_padding(self):
        return self.avg_pool_include_pad_in_divisor

    def memory_use(self, batch, training, itemsize):
        t = self.image_type()
        if t is None:
            return None                 # a time series of varying length: known when it comes
        out = batch * self.output_image(t).elements_per_example()
        return self._pool_use(batch, training, itemsize, out)

    def activate(self, x, training, mgr):
        x, t = self.images(x)
        call = self.kernel_call(t)
        self._t = t
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS, (x.shape[0],) + call.out_shape,
                                     dtype=x.dtype)
        return self.as_series(self._pool(x, y, training, mgr, call.kwargs))

    def backprop_gradient(self, epsilon, mgr):
        if not self.input_gradient_needed:
            return {}, None
        x, call = self._x, self.kernel_call(self._t)
        shape = (x.shape[0],) + call.out_shape
        if epsilon.shape != shape:
            # a 1-D layer's series as images (a view; a copy if it is not C-contiguous)
            if not epsilon.flags.c_contiguous:
                epsilon = mgr.dup(ArrayType.BP_WORKING_MEM, epsilon)
            epsilon = epsilon.reshape(shape)
        eps = mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, x.shape, dtype=epsilon.dtype)
        return {}, self.as_series(self._unpool(epsilon, eps, call.kwargs))


class Subsampling1DLayer(SubsamplingLayer):
    """1-D pooling over time (DL4J's ``Subsampling1DLayer``): time series (n, c, T) (NCW, or
    (n, T, c) with NWC) pooled along T, through the 2-D kernels on (n, c, 1, T) views.

    Parameters
    ----------
    kernel_size, stride, padding, dilation : int
        Defaults 1, 2, 0, 1 (DL4J's builder).
    convolution_mode : str or ConvolutionMode, optional
        STRICT, TRUNCATE, SAME or CAUSAL.
    data_format : {"NCW", "NWC"}, optional
        None: the input's.
    **others
        As `SubsamplingLayer`.
    """

    spatial_dims = 1

    def __init__(self, *, kernel_size: Any = 1, stride: Any = 2, padding: Any = 0,
                 dilation: Any = 1, **kw: Any):
        super().__init__(kernel_size=kernel_size, stride=stride, padding=padding,
                         dilation=dilation, **kw)


class GlobalPoolingLayer(_Pooling, ImageLayer, Layer):
    """Pooling over every position (DL4J's ``GlobalPoolingLayer``): the height and width of
    images, the time steps of a time series. With a features mask (n, time) a time series is
    pooled over its unmasked steps only (DL4J's MaskedReductionUtil: MAX ignores them, SUM and
    PNORM count them as 0, AVG divides by the unmasked steps), and no mask goes further; MAX
    and AVG refuse an example masked out entirely (it has no value).

    Parameters
    ----------
    pooling_type : str or PoolingType
        MAX (default), AVG, SUM or PNORM (``(sum |x|^p)^(1/p)``, without DL4J's missing 1/N).
    pnorm : int
        The p of PNORM (default 2).
    collapse_dimensions : bool
        True (default): rows (n, channels); False: (n, c, 1, 1) for images (channels last for
        NHWC), (n, c, 1) for time series.
    pooling_dimensions : tuple of int, optional
        DL4J's: None means all positions ((2, 3) for NCHW images, (1, 2) for NHWC, (2,) for
        NCW time series, (1,) for NWC); only those are supported.
    n_in, n_out, name : optional
        n_out, when given, must equal n_in (the channels).
    """

    fields = ("n_in", "n_out", "name", "pooling_type", "pnorm", "collapse_dimensions",
              "pooling_dimensions")
    keeps_width = True
    data_format = None                     # set from the input type when resolved

    def __init__(self, *, pooling_type: Any = PoolingType.MAX, pnorm: int = 2,
                 collapse_dimensions: bool = True, pooling_dimensions: Any = None,
                 n_in: int | None = None, n_out: int | None = None, name: str | None = None):
        super().__init__(n_in=n_in, n_out=n_out, name=name)
        owner = type(self).__name__
        self.pooling_type = PoolingType.parse(pooling_type, f"{owner}.pooling_type")
        self.pnorm = _pnorm(owner, pnorm, True)
        self.collapse_dimensions = _bool(owner, "collapse_dimensions", collapse_dimensions)
        if pooling_dimensions is not None:
            if (not isinstance(pooling_dimensions, (tuple, list)) or not pooling_dimensions
                    or any(isinstance(d, bool) or not isinstance(d, (int, np.integer))
                           for d in pooling_dimensions)):
                raise FieldTypeError(f"{owner}.pooling_dimensions: expected a tuple of axes, "
                                     f"got {pooling_dimensions!r:.40}")
            pooling_dimensions = tuple(int(d) for d in pooling_dimensions)
        self.pooling_dimensions = pooling_dimensions

    # -- configuration --------------------------------------------------------------------------

    def _check_resolved(self, where):
        t = self.input_type
        if t is not None and t.kind == "RNN":
            # time series: the rest of ImageLayer's checks are for images
            self.data_format = t.data_format
            Layer._check_resolved(self, where)
        else:
            super()._check_resolved(where)
            t = self.input_type
        default = self._default_dimensions()
        if self.pooling_dimensions is not None and self.pooling_dimensions != default:
            raise ValueError(f"{where}.pooling_dimensions: pooling over {self.pooling_dimensions}"
                             f" of {t!r} is not supported (only all positions, {default})")

    def _default_dimensions(self) -> tuple:
        t = self.input_type
        if t.kind == "RNN":
            return (2,) if t.data_format is RNNFormat.NCW else (1,)
        return (2, 3) if t.data_format.name == "NCHW" else (1, 2)

    def output_type(self, input_type):
        t = self.input_type
        if self.collapse_dimensions:
            return InputType.feed_forward(self.n_in)
        if t.kind == "RNN":
            return InputType.recurrent(self.n_in, 1, t.data_format.name)
        return InputType.convolutional(1, 1, self.n_in, t.data_format.name)

    # -- the pooling as a 2-D window over the whole input ---------------------------------------

    def _as_images(self, a):
        # a time series (n, c, T) / (n, T, c) is an image of height 1: a view, no copy
        t = self.input_type
        if t.kind != "RNN":
            return a
        if t.data_format is RNNFormat.NCW:
            return a.reshape(a.shape[0], a.shape[1], 1, a.shape[2])
        return a.reshape(a.shape[0], 1, a.shape[1], a.shape[2])

    def _kernel_args(self, images) -> dict:
        nchw = self.input_type.kind == "RNN" and self.input_type.data_format is RNNFormat.NCW \
            or self.input_type.kind == "CNN" and self.input_type.data_format.name == "NCHW"
        h, w = images.shape[2:4] if nchw else images.shape[1:3]
        return {"kernel_size": (h, w), "stride": (h, w), "padding": 0, "dilation": 1,
                "data_format": "NCHW" if nchw else "NHWC"}

    def _pooled_shape(self, n: int, nchw: bool) -> tuple:
        return (n, self.n_in, 1, 1) if nchw else (n, 1, 1, self.n_in)

    _pass_state = _Pooling._pass_state + ("_counts", "_kind")

    def memory_use(self, batch, training, itemsize):
        t = self.input_type
        if t.kind == "RNN" and t.time_series_length is None:
            return None                 # the input's size is known only when it comes
        return self._pool_use(batch, training, itemsize, batch * self.n_in)

    def feed_forward_mask(self, mask, state, mgr):
        # the mask is taken into account here (time series); nothing after is masked
        self._fmask = mask if self.input_type.kind == "RNN" else None
        return None, None

    def _masked(self, x, mask, training, mgr):
        # x with its masked steps out of the pooling: -inf for MAX, 0 for the others (DL4J's
        # MaskedReductionUtil); per example the unmasked steps (AVG divides by them)
        t = self.input_type
        n, steps = x.shape[0], (x.shape[2] if t.data_format is RNNFormat.NCW else x.shape[1])
        m = np.asarray(mask)
        if m.shape != (n, steps):
            raise ValueError(f"GlobalPoolingLayer (layer index = {self.index}): the features "
                             f"mask has shape {m.shape}, expected (n_samples, time) = "
                             f"{(n, steps)}")
        counts = (m != 0).sum(axis=1)
        if self.pooling_type in (PoolingType.MAX, PoolingType.AVG) and not counts.all():
            i = int(np.flatnonzero(counts == 0)[0])
            raise ValueError(f"GlobalPoolingLayer (layer index = {self.index}): example {i} "
                             f"in minibatch is entirely masked out: {self.pooling_type.name} "
                             f"pooling over no time step has no value")
        mb = m[:, None, :] if t.data_format is RNNFormat.NCW else m[:, :, None]
        xm = mgr.create_uninitialized(ArrayType.INPUT if training else ArrayType.FF_WORKING_MEM,
                                      (n,) + tuple(x.shape[1:]), dtype=x.dtype)
        if self.pooling_type is PoolingType.MAX:
            np.copyto(_np_view(xm), np.where(mb != 0, np.asarray(x), -np.inf))
        else:
            np.multiply(np.asarray(x), mb, out=_np_view(xm), casting="unsafe")
        return xm, counts

    def activate(self, x, training, mgr):
        t = self.input_type
        if t.kind == "CNN":
            check_image(self, x)
        elif x.ndim != 3 or (x.shape[1] if t.data_format is RNNFormat.NCW
                             else x.shape[2]) != self.n_in:
            raise ValueError(f"GlobalPoolingLayer (layer index = {self.index}): expected a time "
                             f"series {t.describe_shape()}, got shape {tuple(x.shape)}")
        self._x_shape = tuple(x.shape)
        mask = getattr(self, "_fmask", None)
        kind, self._counts = self.pooling_type, None
        if mask is not None:
            x, self._counts = self._masked(x, mask, training, mgr)
            if kind is PoolingType.AVG:
                kind = PoolingType.SUM             # then divided by the unmasked steps
        self._kind = kind
        images = self._as_images(x)
        kw = self._kernel_args(images)
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS,
                                     self._pooled_shape(x.shape[0], kw["data_format"] == "NCHW"),
                                     dtype=x.dtype)
        self._pool(images, y, training, mgr, kw, kind)
        if self._counts is not None and self.pooling_type is PoolingType.AVG:
            v = _np_view(y)
            v /= self._counts.reshape((-1,) + (1,) * (v.ndim - 1))
        out = self.output_type(t).shape(x.shape[0])
        return y.reshape(out) if out != y.shape else y       # a view: y is C-contiguous

    def backprop_gradient(self, epsilon, mgr):
        if not self.input_gradient_needed:
            return {}, None
        images = self._x
        kw = self._kernel_args(images)
        pooled = self._pooled_shape(epsilon.shape[0], kw["data_format"] == "NCHW")
        counts = self._counts
        if not epsilon.flags.c_contiguous or (counts is not None
                                              and self.pooling_type is PoolingType.AVG):
            epsilon = mgr.dup(ArrayType.BP_WORKING_MEM, epsilon)
        if counts is not None and self.pooling_type is PoolingType.AVG:
            v = _np_view(epsilon)
            v /= counts.reshape((-1,) + (1,) * (v.ndim - 1))
        eps = mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, images.shape,
                                       dtype=epsilon.dtype)
        self._unpool(epsilon.reshape(pooled), eps, kw, self._kind)
        if counts is not None:
            # nothing flows to a masked step (SUM and AVG spread the error over every step)
            t = self.input_type
            m = np.asarray(self._fmask)
            mb = m[:, None, :] if t.data_format is RNNFormat.NCW else m[:, :, None]
            v = _np_view(eps).reshape(self._x_shape)
            np.multiply(v, mb != 0, out=v, casting="unsafe")
        return {}, eps.reshape(self._x_shape)        # views: both are C-contiguous

