"""ndws.nn.layers.normalization: BatchNormalization of images against NumPy (per-channel batch
statistics in training, the running ones at inference, DL4J's decay), NCHW and NHWC, the dense
case unchanged."""
import numpy as np
import pytest

import ndws
from ndws.data.dataset import DataSet
from ndws.nn import (BatchNormalization, InputType, MultiLayerConfiguration, MultiLayerNetwork,
                     OutputLayer, Sgd)


@pytest.fixture(autouse=True)
def _clean():
    yield
    ndws.destroy_all_workspaces_for_current_thread()


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_statistics_in_training_running_ones_at_inference(fmt, dtype, rng):
    t = InputType.convolutional(3, 4, 5, fmt)
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [BatchNormalization(decay=0.8, eps=1e-3), OutputLayer(n_out=2, activation="softmax")],
        input_type=t, seed=0, updater=Sgd(0.0), dtype=np.dtype(dtype).name))
    net.init()
    bn = net.layers[0]
    assert bn.n_in == 5 and bn.statistics_axes() == ((0, 2, 3) if fmt == "NCHW" else (0, 1, 2))
    gamma, beta = np.linspace(0.5, 1.5, 5), np.linspace(-1, 1, 5)
    bn.params["gamma"].assign(gamma)
    bn.params["beta"].assign(beta)
    x = (rng.standard_normal((6,) + t.shape()) * 3 + 2).astype(dtype)
    axes = bn.statistics_axes()
    shape = (1, 5, 1, 1) if fmt == "NCHW" else (5,)
    x64 = x.astype(np.float64)
    mean, var = x64.mean(axes), x64.var(axes)              # biased, as DL4J's
    expected = ((x64 - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + 1e-3)
                * gamma.reshape(shape) + beta.reshape(shape))
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    trained = net.feed_forward(x, train=True)[1].numpy()
    np.testing.assert_allclose(trained, expected, **tol)
    # the running statistics moved by DL4J's decay: 0.8 * (0, 1) + 0.2 * batch
    np.testing.assert_allclose(bn.params["mean"].numpy(), 0.2 * mean, **tol)
    np.testing.assert_allclose(bn.params["var"].numpy(), 0.8 + 0.2 * var, **tol)
    running_mean, running_var = bn.params["mean"].numpy(), bn.params["var"].numpy()
    inferred = net.feed_forward(x)[1].numpy()
    expected = ((x64 - running_mean.reshape(shape)) / np.sqrt(running_var.reshape(shape) + 1e-3)
                * gamma.reshape(shape) + beta.reshape(shape))
    np.testing.assert_allclose(inferred, expected, **tol)
    np.testing.assert_array_equal(bn.params["mean"].numpy(), running_mean)   # inference: still


def test_running_statistics_are_not_trained(rng):
    t = InputType.convolutional(3, 3, 2)
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [BatchNormalization(), OutputLayer(n_out=2, activation="softmax")], input_type=t,
        seed=0, updater=Sgd(0.5), dtype="float64"))
    net.init()
    x = rng.standard_normal((4, 2, 3, 3))
    net.fit(DataSet(x, np.array([0, 1, 0, 1])))
    bn = net.layers[0]
    mean = x.mean((0, 2, 3))
    # moved by the forward pass only (decay 0.9), not by the updater's step
    np.testing.assert_allclose(bn.params["mean"].numpy(), 0.1 * mean, rtol=1e-12)
    assert not np.allclose(bn.params["gamma"].numpy(), 1.0)         # gamma was trained
