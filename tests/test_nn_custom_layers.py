"""A custom layer's mistakes are reported against the layer: layers[i], its class, the method and
the parameter or shape, before the network uses the wrong answer (ndws.nn._checks), with
nothing updated or left open."""
import numpy as np
import pytest

import ndws
from ndws.data.dataset import DataSet
from ndws.nn import (DenseLayer, Layer, MultiLayerConfiguration, MultiLayerNetwork, OutputLayer,
                     Sgd)
from ndws.nn.workspace_mgr import ArrayType

MODES = ["NONE", "SINGLE", "SEPARATE", "ENABLED"]


class Shift(Layer):
    """y = x + b, with b a (5,) parameter: a correct custom layer the cases below break."""

    def param_shapes(self):
        return {"b": (5,)}

    def init_params(self, rng):
        self.params["b"].assign(np.linspace(-1, 1, 5))

    def activate(self, x, training, mgr):
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS, x.shape, dtype=x.dtype)
        return ndws.add(x, self.params["b"], out=y)

    def backprop_gradient(self, epsilon, mgr):
        ndws.sum(epsilon, axis=0, out=self.grads["b"])
        e = mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, epsilon.shape,
                                     dtype=epsilon.dtype)
        return {"b": self.grads["b"]}, ndws.multiply(epsilon, 1.0, out=e)


def network(custom, mode="ENABLED", out=None):
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=5, n_out=5, activation="tanh"), custom,
         out or OutputLayer(n_out=3, activation="softmax")],
        seed=1, updater=Sgd(0.1), training_workspace_mode=mode, inference_workspace_mode=mode))
    net.init()
    return net


def data(rows=32):
    rng = np.random.default_rng(2)
    return rng.standard_normal((rows, 5)).astype(np.float32), rng.integers(0, 3, rows)


def assert_fit_refused(net, exc, msg, rows=32):
    # fit raises, naming the layer, and nothing moved or stayed open
    x, y = data(rows)
    before = net.params().numpy()
    with pytest.raises(exc, match=msg):
        net.fit(x, y)
    np.testing.assert_array_equal(net.params().numpy(), before)
    assert net.iteration == 0
    assert ndws.current_workspace() is None


def test_a_correct_custom_layer_trains():
    x, y = data()
    net = network(Shift())
    before = net.params().numpy()
    net.fit(x, y, batch_size=8)
    assert net.iteration == 4 and not np.array_equal(net.params().numpy(), before)


# -- param_shapes ---------------------------------------------------------------------------

def shapes_layer(value):
    class Shapes(Shift):
        def param_shapes(self):
            return value
    return Shapes()


@pytest.mark.parametrize("shapes, exc, msg", [
    ({"b": (-5,)}, ValueError,
     r"^layers\[1\] \(Shapes\)\.param_shapes\(\)\['b'\]: every size must be in \[1, 2\*\*31\], "
     r"got \(-5,\)$"),
    ({"b": (0,)}, ValueError, r"^layers\[1\] \(Shapes\)\.param_shapes\(\)\['b'\]: every size"),
    ({"b": (5, 2**31 + 1)}, ValueError, r"every size must be in \[1, 2\*\*31\], got \(5, "),
    ({"b": (2**31, 2**31)}, ValueError,
     r"^layers\[1\] \(Shapes\)\.param_shapes\(\)\['b'\]: \(2147483648, 2147483648\) is "
     r"18,446,744,073,709,551,616 bytes, more than any machine holds$"),
    ({"b": (5.0,)}, TypeError,
     r"^layers\[1\] \(Shapes\)\.param_shapes\(\)\['b'\]: expected a tuple of ints >= 1, got "
     r"\(5\.0,\)$"),
    ({"b": (True,)}, TypeError, r"expected a tuple of ints >= 1, got \(True,\)$"),
    ({"b": [5]}, TypeError,
     r"^layers\[1\] \(Shapes\)\.param_shapes\(\)\['b'\]: expected a non-empty tuple of ints "
     r">= 1 \(a scalar is \(1,\)\), got list \[5\]$"),
    ({"b": 5}, TypeError, r"expected a non-empty tuple of ints >= 1 \(a scalar is \(1,\)\), got "
                          r"int 5$"),
    ({"b": ()}, TypeError, r"got tuple \(\)$"),
    ([("b", (5,))], TypeError,
     r"^layers\[1\] \(Shapes\)\.param_shapes\(\) must return a dict of parameter name -> "
     r"shape tuple, got list$"),
    ({3: (5,)}, TypeError, r"^layers\[1\] \(Shapes\)\.param_shapes\(\): parameter names must "
                           r"be non-empty strings, got 3$"),
])
def test_param_shapes_are_checked_before_anything_is_built(shapes, exc, msg):
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=5, n_out=5), shapes_layer(shapes),
         OutputLayer(n_out=3, activation="softmax")]))
    with pytest.raises(exc, match=msg):
        net.init()
    assert net.layers == [] and net._params is None


def test_numpy_integer_sizes_are_sizes():
    x, y = data()
    net = network(shapes_layer({"b": (np.int64(5),)}))
    assert net.get_layer(1).params["b"].shape == (5,)
    net.fit(x, y)


def test_init_params_that_replaces_a_view_is_refused():
    class Replaces(Shift):
        def init_params(self, rng):
            self.params["b"] = ndws.ones(5, np.float32)

    with pytest.raises(ValueError, match=r"^layers\[1\] \(Replaces\)\.init_params replaced "
                                         r"params\['b'\] instead of filling it \(write into "
                                         r"the view: params\['b'\]\.assign\(\.\.\.\)\)$"):
        network(Replaces())


# -- gradients ------------------------------------------------------------------------------

def gradient_layer(make):
    class Grads(Shift):
        def backprop_gradient(self, epsilon, mgr):
            _, e = super().backprop_gradient(epsilon, mgr)
            return make(self), e
    return Grads()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("make, exc, msg", [
    (lambda l: {"b": ndws.zeros(1, np.float32)}, ValueError,
     r"^layers\[1\] \(Grads\): gradient 'b' has shape \(1,\), its parameter has shape \(5,\)$"),
    (lambda l: {"b": np.zeros((5, 1), np.float32)}, ValueError,
     r"gradient 'b' has shape \(5, 1\), its parameter has shape \(5,\)$"),
    (lambda l: {"b": ndws.zeros(5, np.float64)}, TypeError,
     r"^layers\[1\] \(Grads\): gradient 'b' has dtype float64, its parameter has dtype "
     r"float32$"),
    (lambda l: {"b": [0.0] * 5}, TypeError,
     r"^layers\[1\] \(Grads\): gradient 'b' must be an array, got list$"),
    (lambda l: {"b": l.grads["b"], "c": l.grads["b"]}, ValueError,
     r"^layers\[1\] \(Grads\): gradient 'c' is not one of its parameters \['b'\]$"),
    (lambda l: {}, ValueError,
     r"^layers\[1\] \(Grads\): no gradient for 'b' \(return every trainable parameter's "
     r"gradient: layer.grads\['b'\] itself when written in place\)$"),
    (lambda l: [l.grads["b"]], TypeError,
     r"^layers\[1\] \(Grads\)\.backprop_gradient must return \(gradients dict, epsilon\), got "
     r"list for the gradients$"),
])
def test_gradients_are_checked_against_their_parameters(make, exc, msg, mode):
    assert_fit_refused(network(gradient_layer(make), mode), exc, msg)


@pytest.mark.parametrize("kind", ["ndarray", "numpy"])
def test_returned_gradients_are_copied_in(kind):
    # a gradient returned as a new array (not written into the view) trains the same
    x, y = data()
    convert = (lambda a: a.dup()) if kind == "ndarray" else (lambda a: a.numpy())
    a = network(Shift())
    b = network(gradient_layer(lambda l: {"b": convert(l.grads["b"])}))
    a.fit(x, y, batch_size=8)
    b.fit(x, y, batch_size=8)
    np.testing.assert_array_equal(a.params().numpy(), b.params().numpy())


# -- backprop_gradient's shape of answer, and the epsilon ------------------------------------

def backprop_layer(make):
    class Back(Shift):
        def backprop_gradient(self, epsilon, mgr):
            grads, e = super().backprop_gradient(epsilon, mgr)
            return make(grads, e, epsilon, mgr)
    return Back()


@pytest.mark.parametrize("rows", [32, 2])       # 2 rows would unpack into (row 0, row 1)
@pytest.mark.parametrize("mode", MODES)
def test_backprop_gradient_returning_the_epsilon_alone(rows, mode):
    assert_fit_refused(network(backprop_layer(lambda g, e, eps, mgr: e), mode), TypeError,
                       rf"^layers\[1\] \(Back\)\.backprop_gradient must return \(gradients "
                       rf"dict, epsilon\), got NDArray of shape \({rows}, 5\)$", rows)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("make, exc, msg", [
    (lambda g, e, eps, mgr: (g, e, None), TypeError,
     r"^layers\[1\] \(Back\)\.backprop_gradient must return \(gradients dict, epsilon\), got a "
     r"tuple of 3$"),
    (lambda g, e, eps, mgr: None, TypeError, r"must return \(gradients dict, epsilon\), got "
                                             r"NoneType$"),
    (lambda g, e, eps, mgr: (g, None), TypeError,
     r"^layers\[1\] \(Back\)\.backprop_gradient returned NoneType, expected an ndws\.NDArray$"),
    (lambda g, e, eps, mgr: (g, e[:-1]), ValueError,
     r"^layers\[1\] \(Back\)\.backprop_gradient returned shape \(31, 5\), expected \(32, 5\) "
     r"\(its input's shape\)$"),
    (lambda g, e, eps, mgr: (g, mgr.create(ArrayType.ACTIVATION_GRAD, (32, 4),
                                           dtype=np.float32)), ValueError,
     r"returned shape \(32, 4\), expected \(32, 5\) \(its input's shape\)$"),
    (lambda g, e, eps, mgr: (g, mgr.create(ArrayType.ACTIVATION_GRAD, (32, 5),
                                           dtype=np.float64)), TypeError,
     r"^layers\[1\] \(Back\)\.backprop_gradient returned dtype float64, expected float32 \(the "
     r"network's dtype\)$"),
    (lambda g, e, eps, mgr: (g, e.numpy()), TypeError,
     r"^layers\[1\] \(Back\)\.backprop_gradient returned ndarray, expected an ndws\.NDArray$"),
])
def test_the_epsilon_is_checked(make, exc, msg, mode):
    assert_fit_refused(network(backprop_layer(make), mode), exc, msg)


# -- activate -------------------------------------------------------------------------------

def activate_layer(make):
    class Act(Shift):
        def activate(self, x, training, mgr):
            return make(super().activate(x, training, mgr), x, mgr)
    return Act()


ACTIVATE_CASES = [
    (lambda y, x, mgr: mgr.create(ArrayType.ACTIVATIONS, (x.shape[0], 6), dtype=x.dtype),
     ValueError, r"^layers\[1\] \(Act\)\.activate returned shape \(32, 6\), expected \(32, 5\) "
                 r"\(its declared output width\)$"),
    (lambda y, x, mgr: y[:-1], ValueError, r"returned shape \(31, 5\), expected \(32, 5\)"),
    (lambda y, x, mgr: y[0], ValueError, r"returned shape \(5,\), expected \(32, 5\)"),
    (lambda y, x, mgr: y.reshape(32, 5, 1), ValueError, r"returned shape \(32, 5, 1\), "
                                                        r"expected \(32, 5\)"),
    (lambda y, x, mgr: mgr.create(ArrayType.ACTIVATIONS, (32, 5), dtype=np.float64), TypeError,
     r"^layers\[1\] \(Act\)\.activate returned dtype float64, expected float32 \(the "
     r"network's dtype\)$"),
    (lambda y, x, mgr: y.numpy(), TypeError,
     r"^layers\[1\] \(Act\)\.activate returned ndarray, expected an ndws\.NDArray$"),
    (lambda y, x, mgr: None, TypeError, r"^layers\[1\] \(Act\)\.activate returned NoneType"),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("make, exc, msg", ACTIVATE_CASES)
@pytest.mark.parametrize("call", ["fit", "output", "score", "score_examples", "feed_forward",
                                  "evaluate"])
def test_what_activate_returns_is_checked_on_every_pass(make, exc, msg, call, mode):
    x, y = data()
    net = network(activate_layer(make), mode)
    before = net.params().numpy()
    ds = DataSet(x, y)
    with pytest.raises(exc, match=msg):
        {"fit": lambda: net.fit(x, y), "output": lambda: net.output(x),
         "score": lambda: net.score(ds), "score_examples": lambda: net.score_examples(ds),
         "feed_forward": lambda: net.feed_forward(x),
         "evaluate": lambda: net.evaluate(x, y)}[call]()
    np.testing.assert_array_equal(net.params().numpy(), before)
    assert net.iteration == 0 and ndws.current_workspace() is None


# -- scores, regularisation, output layers ---------------------------------------------------

@pytest.mark.parametrize("value", ["0.1", None, ndws.zeros(2), [0.0]])
def test_regularization_score_must_be_a_real_number(value):
    class Reg(Shift):
        def regularization_score(self):
            return value

    x, y = data()
    net = network(Reg())
    with pytest.raises(TypeError, match=r"^layers\[1\] \(Reg\)\.regularization_score returned "
                                        r".* for the score, expected a real number$"):
        net.fit(x, y)
    with pytest.raises(TypeError, match=r"regularization_score returned"):
        net.score(DataSet(x, y))
    assert net.iteration == 0 and ndws.current_workspace() is None


def test_a_regularization_score_of_one_element_is_a_number():
    class Reg(Shift):
        def regularization_score(self):
            return ndws.full((), 0.5, dtype=np.float32, detached=True)

    x, y = data()
    plain, reg = network(Shift()), network(Reg())
    ds = DataSet(x, y)
    assert reg.score(ds) == pytest.approx(plain.score(ds) + 0.5)


class FreshGradients(OutputLayer):
    """An output layer that returns new gradient arrays instead of writing into its views."""

    def compute_score_and_gradient(self, labels, mgr, mask=None):
        score, grads, eps = super().compute_score_and_gradient(labels, mgr, mask)
        return score, {k: v.dup() for k, v in grads.items()}, eps


def test_an_output_layers_returned_gradients_are_used():
    # they were dropped: the general path ignored compute_score_and_gradient's gradients
    x, y = data()
    a = network(Shift())
    fresh = FreshGradients(n_out=3, activation="softmax")
    b = network(Shift(), out=fresh)
    for net in (a, b):
        net.fit(x, y, batch_size=8)
    np.testing.assert_array_equal(a.params().numpy(), b.params().numpy())


@pytest.mark.parametrize("result, exc, msg", [
    (lambda s, g, e: (s, g), TypeError,
     r"^layers\[2\] \(Out\)\.compute_score_and_gradient must return \(score, gradients dict, "
     r"epsilon\), got a tuple of 2$"),
    (lambda s, g, e: ("low", g, e), TypeError,
     r"^layers\[2\] \(Out\)\.compute_score_and_gradient returned str 'low' for the score, "
     r"expected a real number$"),
    (lambda s, g, e: (s, {"W": g["W"]}, e), ValueError, r"^layers\[2\] \(Out\): no gradient "
                                                        r"for 'b'"),
    (lambda s, g, e: (s, g, e[:, :4]), ValueError,
     r"^layers\[2\] \(Out\)\.compute_score_and_gradient returned shape \(32, 4\), expected "
     r"\(32, 5\) \(its input's shape\)$"),
])
def test_an_output_layers_answer_is_checked(result, exc, msg):
    class Out(OutputLayer):
        def compute_score_and_gradient(self, labels, mgr, mask=None):
            return result(*super().compute_score_and_gradient(labels, mgr, mask))

    assert_fit_refused(network(Shift(), out=Out(n_out=3, activation="softmax")), exc, msg)


def test_compute_score_and_score_examples_of_a_custom_output_layer_are_checked():
    class Out(OutputLayer):
        def compute_score(self, labels, mgr, mask=None):
            return None

        def compute_score_examples(self, labels, mgr, mask=None):
            return ndws.zeros(3, np.float32)

    x, y = data()
    net = network(Shift(), out=Out(n_out=3, activation="softmax"))
    with pytest.raises(TypeError, match=r"^layers\[2\] \(Out\)\.compute_score returned "
                                        r"NoneType None for the score"):
        net.score(DataSet(x, y))
    with pytest.raises(ValueError, match=r"^layers\[2\] \(Out\)\.compute_score_examples "
                                         r"returned shape \(3,\), expected \(32,\)"):
        net.score_examples(DataSet(x, y))


# -- memory_use -----------------------------------------------------------------------------

@pytest.mark.parametrize("use, exc, msg", [
    ("lots", TypeError, r"^layers\[1\] \(Mem\)\.memory_use\(32, True, 4\) must return a list "
                        r"of \(pass, ArrayType, bytes\) or None, got str$"),
    ([("forward", ArrayType.ACTIVATIONS)], TypeError,
     r"^layers\[1\] \(Mem\)\.memory_use\(32, True, 4\)\[0\]: expected a \(pass, ArrayType, "
     r"bytes\) tuple, got \('forward', "),
    ([("sideways", ArrayType.ACTIVATIONS, 640)], ValueError,
     r"\[0\]: pass must be 'forward' or 'backward', got 'sideways'$"),
    ([("forward", "ACTIVATIONS", 640)], TypeError,
     r"\[0\]: expected an ndws\.nn\.ArrayType, got str 'ACTIVATIONS'$"),
    ([("forward", ArrayType.ACTIVATIONS, -640)], ValueError,
     r"\[0\]: bytes must be in \[0, 2\*\*48\], got -640$"),
    ([("forward", ArrayType.ACTIVATIONS, 2**60)], ValueError, r"bytes must be in \[0, 2\*\*48\]"),
    ([("forward", ArrayType.ACTIVATIONS, 640.0)], TypeError,
     r"\[0\]: bytes must be an int, got float 640\.0$"),
])
def test_memory_use_is_checked_by_the_report_and_by_fit(use, exc, msg):
    class Mem(Shift):
        def memory_use(self, batch, training, itemsize):
            return use

    x, y = data()
    net = network(Mem())
    with pytest.raises(exc, match=msg):
        net.memory_report(32)
    with pytest.raises(exc, match=msg):
        net.fit(x, y)
    assert net.iteration == 0 and ndws.current_workspace() is None


def test_a_correct_memory_use_plans_the_workspaces():
    class Mem(Shift):
        def memory_use(self, batch, training, itemsize):
            size = batch * 5 * itemsize
            use = [("forward", ArrayType.ACTIVATIONS, size)]
            return use + ([("backward", ArrayType.ACTIVATION_GRAD, np.int64(size))]
                          if training else [])

    x, y = data()
    net = network(Mem())
    assert net.memory_report(32).complete
    net.fit(x, y)
