"""Normalisation layers: `BatchNormalization` (DL4J's), per feature of rows, per channel of
images (NCHW or NHWC) and time series.

Examples
--------
>>> from ndws.nn import BatchNormalization, InputType, MultiLayerConfiguration, OutputLayer
>>> conf = MultiLayerConfiguration([BatchNormalization(), OutputLayer(n_out=2,
...                                                                    activation="softmax")],
...                                input_type=InputType.convolutional(4, 4, 3), seed=0)
>>> bn = conf.resolved_layers[0]
>>> bn.n_in, bn.param_shapes()["gamma"], bn.statistics_axes()
(3, (3,), (0, 2, 3))
"""
from __future__ import annotations

from typing import Any

import ndws
from ndws.nn.inputs import CNN2DFormat, RNNFormat
from ndws.nn.layers.base import FieldTypeError, Layer, _nonneg
from ndws.nn.layers._geometry import images_of_rows
from ndws.nn.workspace_mgr import ArrayType

__all__ = ["BatchNormalization"]


class BatchNormalization(Layer):
    """Batch normalisation (DL4J's ``BatchNormalization``): ``y = gamma * (x - mean) /
    sqrt(var + eps) + beta`` per feature of rows, per channel of images (statistics over the
    examples and positions: axes (0, 2, 3) of NCHW, (0, 1, 2) of NHWC) and per feature of time
    series. Training uses the batch's statistics (biased variance) and moves the running ones,
    ``running = decay * running + (1 - decay) * batch``; inference uses the running ones. The
    running mean and variance live in the flat parameter buffer (saved, averaged, broadcast
    with it) but the updater leaves them alone.

    Parameters
    ----------
    decay : float in [0, 1]
    eps : float > 0
    lock_gamma_beta : bool
        Keep gamma = 1 and beta = 0 (not trained).
    **common
        As `Layer` (n_out equals n_in: the features or channels).

    Parameters of the layer, in DL4J's order: ``gamma``, ``beta``, ``mean``, ``var``, each
    (n_in,).
    """

    fields = Layer.fields + ("decay", "eps", "lock_gamma_beta")
    keeps_width = True

    def __init__(self, *, decay: float = 0.9, eps: float = 1e-5, lock_gamma_beta: bool = False,
                 **common: Any):
        super().__init__(**common)
        self.decay = _nonneg("BatchNormalization", "decay", decay, 1.0)
        self.eps = _nonneg("BatchNormalization", "eps", eps, open_lo=True)
        if not isinstance(lock_gamma_beta, bool):
            raise FieldTypeError(f"BatchNormalization.lock_gamma_beta: expected a bool, got "
                                 f"{type(lock_gamma_beta).__name__}")
        self.lock_gamma_beta = lock_gamma_beta

    # -- configuration --------------------------------------------------------------------------

    def preprocessor_for(self, input_type):
        # DL4J: rows of pixels become images first, so the statistics are per channel
        return images_of_rows(input_type)

    def _check_resolved(self, where):
        if self.n_in is None:        # its parameters are n_in wide
            raise ValueError(f"{where}.n_in: unknown (set n_in on the first layer)")
        super()._check_resolved(where)

    def statistics_axes(self) -> tuple:
        """The axes the statistics reduce: every one but the features' / channels'."""
        t = self.input_type
        if t is None or t.kind in ("FF", "CNNFlat"):
            return (0,)
        if t.kind == "CNN":
            return (0, 2, 3) if t.data_format is CNN2DFormat.NCHW else (0, 1, 2)
        return (0, 2) if t.data_format is RNNFormat.NCW else (0, 1)

    def _per_channel(self, a: Any) -> Any:
        # a (n_in,) array as it broadcasts against the input: a view with the channels on
        # their axis (nothing to do when they are the last axis)
        axes = self.statistics_axes()
        if axes in ((0,), (0, 1, 2), (0, 1)):
            return a
        return a.reshape((1, self.n_in) + (1,) * (len(axes) - 1))

    def param_shapes(self):
        n = self.n_in
        return {"gamma": (n,), "beta": (n,), "mean": (n,), "var": (n,)}

    def memory_use(self, batch, training, itemsize):
        # the arrays activate/backprop_gradient make: named ones by type, and the temporaries
        # of the ndws calls (placed in the current workspace: this pass's working memory)
        t = self.input_type
        if t is not None and t.kind == "RNN" and t.time_series_length is None:
            return None                 # the input's size is known only when it comes
        f = self.n_in * itemsize
        nf = batch * self._input_elements() * itemsize
        if not training:
            return [("forward", ArrayType.FF_WORKING_MEM, f)] * 3 + [
                ("forward", ArrayType.ACTIVATIONS, nf)]
        use = [("forward", ArrayType.ACTIVATIONS, nf),
               ("forward", ArrayType.INPUT, f), ("forward", ArrayType.INPUT, nf)]
        # mean, xc, xc*xc, var, var+eps, sqrt; the four running-statistics products
        use += [("forward", ArrayType.FF_WORKING_MEM, b) for b in (f, nf, nf, f, f, f)]
        use += [("forward", ArrayType.FF_WORKING_MEM, f)] * 4
        # dy*x_hat; for the input gradient mean(dy), mean(dy*x_hat), x_hat*that, gamma*inv_std
        use.append(("backward", ArrayType.BP_WORKING_MEM, nf))
        if self.input_gradient_needed:
            use += [("backward", ArrayType.BP_WORKING_MEM, b) for b in (f, f, nf, f)]
            use.append(("backward", ArrayType.ACTIVATION_GRAD, nf))
        return use

    def trainable(self, name):
        return name in ("gamma", "beta") and not self.lock_gamma_beta

    def init_params(self, rng):
        self.params["gamma"].fill(1.0)
        self.params["beta"].fill(0.0)
        self.params["mean"].fill(0.0)
        self.params["var"].fill(1.0)

    # -- forward and backward -------------------------------------------------------------------

    def activate(self, x, training, mgr):
        p = self.params
        c = self._per_channel
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS, x.shape, dtype=x.dtype)
        if not training:
            # y = (x - running_mean) * (gamma / sqrt(running_var + eps)) + beta
            scale = ndws.divide(p["gamma"], ndws.sqrt(ndws.add(p["var"], self.eps)))
            ndws.subtract(x, c(p["mean"]), out=y)
            ndws.multiply(y, c(scale), out=y)
            return ndws.add(y, c(p["beta"]), out=y)
        axes = self.statistics_axes()
        mean = ndws.mean(x, axis=axes)
        xc = ndws.subtract(x, c(mean))
        var = ndws.mean(ndws.multiply(xc, xc), axis=axes)
        # kept for backprop: the normalised input and 1 / sqrt(var + eps)
        inv_std = mgr.create_uninitialized(ArrayType.INPUT, (self.n_in,), dtype=x.dtype)
        ndws.divide(1.0, ndws.sqrt(ndws.add(var, self.eps)), out=inv_std)
        x_hat = mgr.create_uninitialized(ArrayType.INPUT, x.shape, dtype=x.dtype)
        ndws.multiply(xc, c(inv_std), out=x_hat)
        self._x_hat, self._inv_std = x_hat, inv_std
        ndws.multiply(x_hat, c(p["gamma"]), out=y)
        ndws.add(y, c(p["beta"]), out=y)
        # running statistics, in place in the parameter buffer
        d = self.decay
        ndws.add(ndws.multiply(p["mean"], d), ndws.multiply(mean, 1.0 - d), out=p["mean"])
        ndws.add(ndws.multiply(p["var"], d), ndws.multiply(var, 1.0 - d), out=p["var"])
        return y

    def backprop_gradient(self, epsilon, mgr):
        g = self.grads
        c = self._per_channel
        axes = self.statistics_axes()
        x_hat, inv_std = self._x_hat, self._inv_std
        dy_xhat = ndws.multiply(epsilon, x_hat)
        if self.lock_gamma_beta:
            g["gamma"].fill(0.0)
            g["beta"].fill(0.0)
        else:
            ndws.sum(dy_xhat, axis=axes, out=g["gamma"])
            ndws.sum(epsilon, axis=axes, out=g["beta"])
        g["mean"].fill(0.0)
        g["var"].fill(0.0)
        if not self.input_gradient_needed:
            return dict(self.grads), None
        # dx = gamma * inv_std * (dy - mean(dy) - x_hat * mean(dy * x_hat))
        eps = mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, epsilon.shape,
                                       dtype=epsilon.dtype)
        ndws.subtract(epsilon, c(ndws.mean(epsilon, axis=axes)), out=eps)
        ndws.subtract(eps, ndws.multiply(x_hat, c(ndws.mean(dy_xhat, axis=axes))), out=eps)
        ndws.multiply(eps, c(ndws.multiply(self.params["gamma"], inv_std)), out=eps)
        return dict(self.grads), eps
