"""MultiLayerNetwork on images, independent of the convolution kernels: rank-4 input checked
against the input type, preprocessors run forward and backward in every workspace mode, a
custom 4-D layer written against the manager, the memory plan with preprocessors."""
import numpy as np
import pytest

import ndws
from cnn_reference import check_modes
from ndws.data.dataset import DataSet
from ndws.nn import (ArrayType, CnnToFeedForwardPreProcessor, DenseLayer,
                     FeedForwardToCnnPreProcessor, InputPreProcessor, InputType, Layer,
                     MultiLayerConfiguration, MultiLayerNetwork, OutputLayer, Sgd)

MODES = ["NONE", "SINGLE", "SEPARATE", "ENABLED"]


@pytest.fixture(autouse=True)
def _clean():
    yield
    ndws.destroy_all_workspaces_for_current_thread()


class ChannelScale(Layer):
    """y = x * s[c] on images (n, c, h, w): a custom 4-D layer written against the manager."""

    keeps_width = True

    def preprocessor_for(self, input_type):
        if input_type.kind == "CNNFlat":
            return FeedForwardToCnnPreProcessor(input_type.height, input_type.width,
                                                input_type.channels)
        return None

    def param_shapes(self):
        return {"s": (self.n_in,)}

    def init_params(self, rng):
        self.params["s"].assign(np.linspace(0.5, 1.5, self.n_in))

    def memory_use(self, batch, training, itemsize):
        size = batch * self.input_type.elements_per_example() * itemsize
        use = [("forward", ArrayType.ACTIVATIONS, size)]
        if training:
            use += [("backward", ArrayType.BP_WORKING_MEM, size),
                    ("backward", ArrayType.ACTIVATION_GRAD, size)]
        return use

    def activate(self, x, training, mgr):
        self._x = x
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS, x.shape, dtype=x.dtype)
        return ndws.multiply(x, self.params["s"].reshape(1, -1, 1, 1), out=y)

    def backprop_gradient(self, epsilon, mgr):
        prod = mgr.create_uninitialized(ArrayType.BP_WORKING_MEM, epsilon.shape,
                                        dtype=epsilon.dtype)
        ndws.multiply(epsilon, self._x, out=prod)
        ndws.sum(prod, axis=(0, 2, 3), out=self.grads["s"])
        eps = mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, epsilon.shape,
                                       dtype=epsilon.dtype)
        return {"s": self.grads["s"]}, ndws.multiply(epsilon, self.params["s"].reshape(1, -1, 1, 1),
                                                      out=eps)


def conf_for(mode, input_type=InputType.convolutional(4, 5, 3), dtype="float32", **kw):
    return MultiLayerConfiguration(
        [ChannelScale(), DenseLayer(n_out=6, activation="tanh"),
         OutputLayer(n_out=3, activation="softmax")], seed=3, updater=Sgd(0.1),
        input_type=input_type, training_workspace_mode=mode, inference_workspace_mode=mode,
        dtype=dtype, **kw)


def numpy_step(params, x, y):
    # the same network in float64 NumPy: the score and the flat gradient
    s, W1, b1, W2, b2 = (params[:3], params[3:363].reshape(60, 6), params[363:369],
                         params[369:387].reshape(6, 3), params[387:390])
    n = x.shape[0]
    z0 = x * s.reshape(1, 3, 1, 1)
    rows = z0.reshape(n, 60)                        # DL4J's (c, h, w) flattening
    h = np.tanh(rows @ W1 + b1)
    z = h @ W2 + b2
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    score = -np.log(p[np.arange(n), y]).mean()
    dz = p.copy()
    dz[np.arange(n), y] -= 1
    dz /= n
    dh = dz @ W2.T * (1 - h * h)
    drows = dh @ W1.T
    ds = (drows.reshape(x.shape) * x).sum((0, 2, 3))
    return score, np.concatenate([ds, (rows.T @ dh).ravel(), dh.sum(0), (h.T @ dz).ravel(),
                                  dz.sum(0)])


@pytest.mark.parametrize("mode", MODES)
def test_gradient_through_a_preprocessor_matches_numpy(mode, rng):
    net = MultiLayerNetwork(conf_for(mode, dtype="float64"))
    net.init()
    assert net.conf.resolved_preprocessors[1] == CnnToFeedForwardPreProcessor(4, 5, 3)
    x = rng.standard_normal((7, 3, 4, 5))
    y = rng.integers(0, 3, 7)
    score = net.compute_gradient_and_score(DataSet(x, y))
    ref_score, ref_grad = numpy_step(net.params().numpy(), x, y)
    assert score == pytest.approx(ref_score, rel=1e-12)
    np.testing.assert_allclose(net.gradient().numpy(), ref_grad, rtol=1e-10, atol=1e-14)
    out = net.output(x)
    assert not out.is_attached() and out.shape == (7, 3)
    acts = net.feed_forward(x)
    assert [a.shape for a in acts] == [(7, 3, 4, 5), (7, 3, 4, 5), (7, 6), (7, 3)]
    assert net.score(DataSet(x, y)) == pytest.approx(ref_score, rel=1e-12)


def test_every_mode_trains_alike_and_learns_the_plan(rng):
    # the preprocessors' views count nothing and copy nothing: every mode the same bits, no
    # allocation after warm-up, the workspaces learn exactly the plan
    x = rng.standard_normal((16, 3, 4, 5)).astype(np.float32)
    check_modes(conf_for, DataSet(x, rng.integers(0, 3, 16)), x)


def test_convolutional_flat_takes_rows_or_images(rng):
    net = MultiLayerNetwork(conf_for("SEPARATE", InputType.convolutional_flat(4, 5, 3)))
    net.init()
    assert net.conf.resolved_preprocessors[0] == FeedForwardToCnnPreProcessor(4, 5, 3)
    images = rng.standard_normal((5, 3, 4, 5)).astype(np.float32)
    a = net.output(images.reshape(5, 60)).numpy()
    b = net.output(images).numpy()
    np.testing.assert_array_equal(a, b)
    net.fit(DataSet(images.reshape(5, 60), rng.integers(0, 3, 5)))
    net.fit(DataSet(images, rng.integers(0, 3, 5)))


@pytest.mark.parametrize("shape, msg", [
    ((2, 4, 5, 3), r"^x: expected a 4-d array \(n_samples, channels=3, height=4, width=5\) for "
                   r"layers\[0\] \(ChannelScale\), the network's input type "
                   r"InputType.convolutional\(4, 5, 3\); got shape \(2, 4, 5, 3\): the data is "
                   r"NHWC \(channels last\) and the network NCHW \(transpose it with "
                   r"x.transpose\(0, 3, 1, 2\), or configure InputType.convolutional\(..., "
                   r"data_format='NHWC'\)\)$"),
    ((2, 3, 4), r"expected a 4-d array .* got shape \(2, 3, 4\)$"),
    ((3, 4, 5), r"got shape \(3, 4, 5\): one example without its batch dimension\? \(x\[None\] "
                r"adds it\)$"),
    ((2, 2, 4, 5), r"got shape \(2, 2, 4, 5\)$"),
    ((2, 60), r"got shape \(2, 60\)$"),
    ((2, 3, 4, 5, 1), r"got shape \(2, 3, 4, 5, 1\)$"),
])
def test_input_of_the_wrong_shape_names_the_layer_and_the_shape(shape, msg):
    net = MultiLayerNetwork(conf_for("ENABLED"))
    net.init()
    if shape != (3, 4, 5):                # one image is served (see below), not trained on
        with pytest.raises(ValueError, match=msg):
            net.output(np.zeros(shape, np.float32))
    with pytest.raises(ValueError, match=msg.replace("^x:", "^features:")):
        net.fit(DataSet(np.zeros(shape, np.float32), np.zeros(shape[0], np.int64)))


def test_one_image_is_served_without_the_batch_axis(rng):
    net = MultiLayerNetwork(conf_for("ENABLED"))
    net.init()
    x = rng.standard_normal((4, 3, 4, 5)).astype(np.float32)
    one = net.output(x[1])
    assert one.shape == (3,)
    np.testing.assert_array_equal(one.numpy(), net.output(x).numpy()[1])


def test_nhwc_network_names_the_other_transposition():
    net = MultiLayerNetwork(conf_for("ENABLED", InputType.convolutional(4, 5, 3, "NHWC")))
    net.init()
    with pytest.raises(ValueError, match=r"the data is NCHW and the network NHWC \(transpose it "
                                         r"with x.transpose\(0, 2, 3, 1\)"):
        net.output(np.zeros((2, 3, 4, 5), np.float32))


def test_zero_size_batch(rng):
    net = MultiLayerNetwork(conf_for("ENABLED"))
    net.init()
    assert net.output(np.zeros((0, 3, 4, 5), np.float32)).shape == (0, 3)


class Doubled(InputPreProcessor):
    """A custom preprocessor written against the manager (DL4J's DupPreProcessor, doubling)."""

    def pre_process(self, x, mgr):
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS, x.shape, dtype=x.dtype)
        return ndws.multiply(x, 2.0, out=y)

    def backprop(self, epsilon, mgr):
        e = mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, epsilon.shape,
                                     dtype=epsilon.dtype)
        return ndws.multiply(epsilon, 2.0, out=e)

    def memory_use(self, batch, training, itemsize):
        return [("forward", ArrayType.ACTIVATIONS, batch * 6 * itemsize)] + (
            [("backward", ArrayType.ACTIVATION_GRAD, batch * 6 * itemsize)] if training else [])


class Leaky(Doubled):
    def pre_process(self, x, mgr):
        y = mgr.create_uninitialized(ArrayType.FF_WORKING_MEM, x.shape, dtype=x.dtype)
        return ndws.multiply(x, 2.0, out=y)


def dense_with(pre, mode):
    return MultiLayerConfiguration(
        [DenseLayer(n_in=4, n_out=6, activation="tanh"),
         OutputLayer(n_out=3, activation="softmax")], seed=3, updater=Sgd(0.1),
        input_preprocessors={1: pre}, training_workspace_mode=mode,
        inference_workspace_mode=mode, dtype="float64")


@pytest.mark.parametrize("mode", MODES)
def test_custom_preprocessor_forward_and_backward(mode, rng):
    x, y = rng.standard_normal((5, 4)), rng.integers(0, 3, 5)
    net = MultiLayerNetwork(dense_with(Doubled(), mode))
    net.init()
    assert net._dense_plan is None                  # the compiled iteration has no preprocessors
    plain = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=4, n_out=6, activation="tanh"),
         OutputLayer(n_out=3, activation="softmax")], seed=3, dtype="float64"))
    plain.init(net.params())
    # doubling the output layer's input is doubling its weights
    p = plain.params().numpy()
    p[30:48] *= 2
    plain.set_params(p)
    np.testing.assert_allclose(net.output(x).numpy(), plain.output(x).numpy(), rtol=1e-13)
    net.compute_gradient_and_score(DataSet(x, y))
    plain.compute_gradient_and_score(DataSet(x, y))
    g, h = net.gradient().numpy(), plain.gradient().numpy()
    np.testing.assert_allclose(g[30:], h[30:] * np.r_[np.full(18, 2.0), np.ones(3)],
                               rtol=1e-12)
    np.testing.assert_allclose(g[:30], h[:30], rtol=1e-12)


def test_preprocessor_result_in_the_wrong_workspace_is_named(rng):
    net = MultiLayerNetwork(dense_with(Leaky(), "SEPARATE"))
    net.init()
    with pytest.raises(ndws.WorkspaceError, match=r"^input_preprocessors\[1\] \(Leaky\)."
                                                  r"pre_process: array \(ACTIVATIONS\)"):
        net.fit(DataSet(rng.standard_normal((5, 4)), rng.integers(0, 3, 5)))
    assert ndws.current_workspace() is None


def test_parallel_inference_serves_images_one_or_many(rng):
    from ndws.parallel import ParallelInference
    net = MultiLayerNetwork(conf_for("ENABLED"))
    net.init()
    x = rng.standard_normal((5, 3, 4, 5)).astype(np.float32)
    expected = net.output(x).numpy()
    pi = ParallelInference(net, workers=2, batch_limit=8)
    try:
        np.testing.assert_array_equal(pi.output(x).numpy(), expected)
        np.testing.assert_array_equal(pi.output(x[2]).numpy(), expected[2])   # one image
        with pytest.raises(ValueError, match=r"^x: expected one example \(3, 4, 5\) or a batch "
                                             r"\(n_samples, channels=3, height=4, width=5\) "
                                             r"\(InputType.convolutional\(4, 5, 3\)\), got "
                                             r"shape \(4, 5\)$"):
            pi.output(x[0, 0])
    finally:
        pi.shutdown()
