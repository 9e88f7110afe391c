"""DL4J's other activations and losses inside networks: gradient checks through every
activation (compiled and general iteration) and every loss (DL4J's GradientCheckUtil style),
DL4J's score scaling and label masks, configuration round trips and the memory plan."""
import numpy as np
import pytest

import ndws
from ndws.data.dataset import DataSet
from ndws.nn import (Activation, ActivationLayer, Adam, DenseLayer, LossFunction, LossLayer,
                     MultiLayerConfiguration, MultiLayerNetwork, OutputLayer, Sgd)
from test_activations import REF
from test_nn_network import _gradient_check

MODES = ["NONE", "SINGLE", "SEPARATE", "ENABLED"]
ACTIVATIONS = ["HARDTANH", "HARDSIGMOID", "SELU", "SWISH", "SOFTSIGN", "RATIONALTANH",
               "RECTIFIEDTANH", "CUBE", "THRESHOLDEDRELU"]
#: the NumPy reference of each (test_activations' oracle; THRESHOLDEDRELU at DL4J's theta 1.0)
REF_NAME = {"HARDTANH": "hardtanh", "HARDSIGMOID": "hardsigmoid", "SELU": "selu",
            "SWISH": "swish", "SOFTSIGN": "softsign", "RATIONALTANH": "rational_tanh",
            "RECTIFIEDTANH": "rectified_tanh", "CUBE": "cube",
            "THRESHOLDEDRELU": "thresholded_relu"}

def _softmax_out():
    return OutputLayer(n_out=3, activation="softmax", loss_function="MCXENT")


#: loss -> (output activation, label maker, per-example NumPy score of (pred, labels))
EPS = 1e-5


def _pm1(rng, shape):
    return np.where(rng.random(shape) < 0.5, -1.0, 1.0)


def _probs(rng, shape):
    p = rng.random(shape) + 0.1
    return p / p.sum(axis=1, keepdims=True)


def _cosine(p, t):
    return -(p * t).sum(1) / (np.maximum(np.linalg.norm(p, axis=1), EPS)
                              * np.maximum(np.linalg.norm(t, axis=1), EPS))


LOSSES = {
    "COSINE_PROXIMITY": ("tanh", lambda r, s: r.standard_normal(s), _cosine),
    "HINGE": ("tanh", _pm1, lambda p, t: np.maximum(0, 1 - t * p).sum(1)),
    "SQUARED_HINGE": ("identity", _pm1, lambda p, t: (np.maximum(0, 1 - t * p) ** 2).sum(1)),
    "KL_DIVERGENCE": ("softmax", _probs,
                      lambda p, t: (np.clip(t, EPS, 1)
                                    * np.log(np.clip(t, EPS, 1) / np.clip(p, EPS, 1))).sum(1)),
    "POISSON": ("softplus", lambda r, s: r.integers(0, 4, s).astype(float),
                lambda p, t: (p - t * np.log(p)).sum(1)),
    "MEAN_SQUARED_LOGARITHMIC_ERROR": ("sigmoid", lambda r, s: r.random(s) * 2,
                                       lambda p, t: ((np.log1p(p) - np.log1p(t)) ** 2).mean(1)),
    "MEAN_ABSOLUTE_PERCENTAGE_ERROR": ("identity", lambda r, s: (r.random(s) + 0.5) * _pm1(r, s),
                                       lambda p, t: (100 * np.abs(p - t) / np.abs(t)).mean(1)),
    "WASSERSTEIN": ("identity", _pm1, lambda p, t: (t * p).mean(1)),
}


@pytest.fixture(autouse=True)
def _clean():
    yield
    ndws.destroy_all_workspaces_for_current_thread()


def _net(layers, mode="ENABLED", dtype="float64", seed=11):
    net = MultiLayerNetwork(MultiLayerConfiguration(
        layers, seed=seed, updater=Sgd(0.1), dtype=dtype, training_workspace_mode=mode,
        inference_workspace_mode=mode))
    net.init()
    return net


# ------------------------------------------------------------------------------------------------
# activations


@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("mode", MODES)
def test_gradient_check_through_each_activation(act, mode, rng):
    x = rng.standard_normal((6, 4)) * 1.5
    y = np.eye(3)[rng.integers(0, 3, 6)]
    ds = DataSet(x, y)
    # the compiled dense iteration (dense layers under softmax + MCXENT, nothing else) ...
    net = _net([DenseLayer(n_in=4, n_out=5, activation=act),
                DenseLayer(n_out=4, activation=act), _softmax_out()], mode)
    assert net._compiled(ds) is not None
    analytic, numeric = _gradient_check(net, ds)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8)
    # ... and the general one (an ActivationLayer, l2), which must agree with it
    general = _net([DenseLayer(n_in=4, n_out=5, activation=act, l2=0.01),
                    ActivationLayer(activation=act), _softmax_out()], mode)
    assert general._compiled(ds) is None
    analytic, numeric = _gradient_check(general, ds)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8)
    # the same network on both paths (a label mask of ones, which weighs nothing differently,
    # turns the compiled one off): the same score and gradient
    score = net.compute_gradient_and_score(ds)
    compiled = net.gradient().numpy().copy()
    masked = DataSet(x, y, labels_mask=np.ones((6, 1)))
    assert net._compiled(masked) is None
    assert net.compute_gradient_and_score(masked) == pytest.approx(score, rel=1e-14)
    np.testing.assert_allclose(net.gradient().numpy(), compiled, rtol=1e-13, atol=1e-16)


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_dense_layer_output_is_the_numpy_activation(act, rng):
    # inference (the fused linear) against the NumPy oracle with DL4J's default parameters
    net = _net([DenseLayer(n_in=4, n_out=6, activation=act), _softmax_out()])
    x = rng.standard_normal((9, 4)) * 2
    layer = net.get_layer(0)
    z = x @ layer.params["W"].numpy() + layer.params["b"].numpy()
    ref = REF[REF_NAME[act]][0]
    expected = ref(z, theta=1.0) if act == "THRESHOLDEDRELU" else ref(z)
    np.testing.assert_allclose(net.feed_forward(x)[1].numpy(), expected, rtol=1e-12,
                               atol=1e-14)


def test_activation_names_parse_and_round_trip():
    assert Activation.parse("hard_tanh", "x") is Activation.HARDTANH
    assert Activation.parse("ThresholdedReLU", "x") is Activation.THRESHOLDEDRELU
    assert Activation.parse("silu", "x") is Activation.SWISH
    assert Activation.parse("RATIONAL_TANH", "x") is Activation.RATIONALTANH
    with pytest.raises(ValueError, match=r"^DenseLayer.activation: unknown activation 'mish'; "
                                         r"expected one of identity, relu, .*, cube, "
                                         r"thresholdedrelu, softmax \(or an "
                                         r"ndws.nn.Activation\)$"):
        DenseLayer(activation="mish")
    layers = [DenseLayer(n_in=3, n_out=4, activation=a) for a in ACTIVATIONS]
    conf = MultiLayerConfiguration(layers[:1] + [DenseLayer(n_out=4, activation=a)
                                                 for a in ACTIVATIONS[1:]]
                                   + [OutputLayer(n_out=2, activation="selu",
                                                  loss_function="HINGE")],
                                   activation="swish")
    again = MultiLayerConfiguration.from_json(conf.to_json())
    assert again == conf
    assert [layer.activation for layer in again.resolved_layers[:-1]] == \
        [Activation[a] for a in ACTIVATIONS]
    assert again.activation is Activation.SWISH
    assert again.resolved_layers[-1].loss_function is LossFunction.HINGE


# ------------------------------------------------------------------------------------------------
# losses


def _loss_case(loss, rng, n=6, width=3):
    act, labels, per_example = LOSSES[loss]
    x = rng.standard_normal((n, 4))
    return act, x, labels(rng, (n, width)), per_example


@pytest.mark.parametrize("loss", list(LOSSES))
@pytest.mark.parametrize("mode", MODES)
def test_gradient_check_through_each_loss(loss, mode, rng):
    act, x, t, _ = _loss_case(loss, rng)
    net = _net([DenseLayer(n_in=4, n_out=5, activation="tanh", l2=0.01),
                OutputLayer(n_out=3, activation=act, loss_function=loss)], mode)
    analytic, numeric = _gradient_check(net, DataSet(x, t))
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("loss", list(LOSSES))
def test_gradient_check_through_a_loss_layer(loss, rng):
    act, x, t, _ = _loss_case(loss, rng)
    net = _net([DenseLayer(n_in=4, n_out=3, activation="identity"),
                LossLayer(loss_function=loss, activation=act)], "SEPARATE")
    analytic, numeric = _gradient_check(net, DataSet(x, t))
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("loss", list(LOSSES))
def test_scores_follow_dl4j_scaling_and_masks(loss, rng):
    act, x, t, per_example = _loss_case(loss, rng, n=8)
    net = _net([DenseLayer(n_in=4, n_out=5, activation="tanh"),
                OutputLayer(n_out=3, activation=act, loss_function=loss)])
    pred = net.output(x).numpy()
    expected = per_example(pred, t)
    ds = DataSet(x, t)
    assert net.score(ds) == pytest.approx(expected.mean(), rel=1e-10)
    per = net.score_examples(ds, add_regularization=False)
    np.testing.assert_allclose(per.numpy(), expected, rtol=1e-10)
    # a per-example mask: masked examples add nothing, the sum is still divided by n (DL4J)
    keep = np.array([1, 0, 1, 1, 0, 0, 1, 1.0])
    masked = DataSet(x, t, labels_mask=keep.reshape(8, 1))
    assert net.score(masked) == pytest.approx((expected * keep).sum() / 8, rel=1e-10)
    analytic, numeric = _gradient_check(net, masked)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8)
    per_output = DataSet(x, t, labels_mask=(rng.random((8, 3)) > 0.3).astype(float))
    if loss == "COSINE_PROXIMITY":
        # DL4J refuses it too: masking outputs would change the norms
        with pytest.raises(ValueError, match=r"mask must have shape \(8,\) \(one value per "
                                             r"example"):
            net.score(per_output)
        return
    m = per_output.labels_mask.numpy()
    pm = np.where(m != 0, pred, 1.0)          # masked entries: any finite stand-in, weight 0
    # each element's loss: the per-example formula on one-output "examples"
    elementwise = per_example(pm.reshape(-1, 1),
                              np.where(m != 0, t, 1.0).reshape(-1, 1)).reshape(8, 3)
    reduce_mean = loss in ("MEAN_SQUARED_LOGARITHMIC_ERROR", "MEAN_ABSOLUTE_PERCENTAGE_ERROR",
                           "WASSERSTEIN")
    per_ex = (elementwise * m).sum(1) / (3 if reduce_mean else 1)
    assert net.score(per_output) == pytest.approx(per_ex.mean(), rel=1e-10)
    analytic, numeric = _gradient_check(net, per_output)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("loss", ["HINGE", "POISSON", "KL_DIVERGENCE", "COSINE_PROXIMITY"])
@pytest.mark.parametrize("mode", MODES)
def test_training_modes_agree_and_the_plan_is_exact(loss, mode, rng):
    act, x, t, _ = _loss_case(loss, rng, n=16)
    layers = [DenseLayer(n_in=4, n_out=8, activation="selu"),
              DenseLayer(n_out=6, activation="swish"),
              OutputLayer(n_out=3, activation=act, loss_function=loss)]
    conf = MultiLayerConfiguration(layers, seed=3, updater=Adam(1e-2), dtype="float32",
                                   training_workspace_mode=mode, inference_workspace_mode=mode)
    net = MultiLayerNetwork(conf)
    net.init()
    report = net.memory_report(16)
    ds = DataSet(x.astype(np.float32), t.astype(np.float32))
    for _ in range(5):
        net.fit(ds)
        net.output(ds.features)
    wsm = ndws.get_workspace_manager()
    learned = {w.id: w.max_cycle_allocations for w in wsm.get_all_workspaces_for_current_thread()}
    assert report.workspaces(ndws.WorkspaceMode[mode]) == learned
    assert all(w.spilled_size == 0 for w in wsm.get_all_workspaces_for_current_thread())
    reference = MultiLayerNetwork(MultiLayerConfiguration(
        layers, seed=3, updater=Adam(1e-2), dtype="float32", training_workspace_mode="NONE"))
    reference.init()
    for _ in range(5):
        reference.fit(ds)
    np.testing.assert_array_equal(net.params().numpy(), reference.params().numpy())
    assert np.isfinite(net.score())
