"""ndws.nn.network: MultiLayerNetwork against a pure-NumPy reference, the workspace modes
(equivalent, and allocation-free after warm-up), detached output, custom layers and the
location check, thread exclusion, hostile input."""
import threading

import numpy as np
import pytest

import ndws
from ndws._memory import allocation_counters
from ndws.data.dataset import DataSet
from ndws.datasets import load_digits
from ndws.nn import (ActivationLayer, Adam, ArrayType, BatchNormalization, DenseLayer, Layer,
                     LossLayer,
                     MultiLayerConfiguration,
                     MultiLayerNetwork, OutputLayer, Sgd)

MODES = ["NONE", "SINGLE", "SEPARATE", "ENABLED"]


@pytest.fixture(autouse=True)
def _clean():
    yield
    ndws.destroy_all_workspaces_for_current_thread()


def conf_for(mode, *, dtype="float32", dropout=None, updater=None, layers=None, loss="MCXENT",
             out_act="softmax"):
    layers = layers or [DenseLayer(n_in=6, n_out=7, activation="relu"),
                        DenseLayer(n_out=5, activation="tanh", dropout=dropout),
                        OutputLayer(n_out=3, activation=out_act, loss_function=loss)]
    return MultiLayerConfiguration(layers, seed=11, updater=updater or Sgd(0.1), dtype=dtype,
                                   training_workspace_mode=mode, inference_workspace_mode=mode)


def data(rng, n=16, dtype=np.float32):
    return rng.standard_normal((n, 6)).astype(dtype), rng.integers(0, 3, n)


class NumpyMLP:
    """The same relu/tanh/softmax-cross-entropy network and SGD step, in float64 NumPy."""

    def __init__(self, params):
        shapes = [(6, 7), (7,), (7, 5), (5,), (5, 3), (3,)]
        self.p, off = [], 0
        for s in shapes:
            size = int(np.prod(s))
            self.p.append(params[off:off + size].reshape(s).astype(np.float64))
            off += size

    def step(self, x, y, lr):
        W1, b1, W2, b2, W3, b3 = self.p
        z1 = x @ W1 + b1
        a1 = np.maximum(z1, 0)
        z2 = a1 @ W2 + b2
        a2 = np.tanh(z2)
        z3 = a2 @ W3 + b3
        e = np.exp(z3 - z3.max(axis=1, keepdims=True))
        prob = e / e.sum(axis=1, keepdims=True)
        n = x.shape[0]
        loss = -np.log(prob[np.arange(n), y]).mean()
        dz3 = prob.copy()
        dz3[np.arange(n), y] -= 1
        dz3 /= n
        dz2 = (dz3 @ W3.T) * (1 - a2 ** 2)
        dz1 = (dz2 @ W2.T) * (z1 > 0)
        grads = [x.T @ dz1, dz1.sum(0), a1.T @ dz2, dz2.sum(0), a2.T @ dz3, dz3.sum(0)]
        for p, g in zip(self.p, grads):
            p -= lr * g
        return loss


@pytest.mark.parametrize("mode", MODES)
def test_fifty_steps_match_numpy_reference(mode, rng):
    net = MultiLayerNetwork(conf_for(mode, dtype="float64"))
    net.init()
    ref = NumpyMLP(net.params().numpy())
    for _ in range(50):
        x, y = data(rng, dtype=np.float64)
        net.fit(DataSet(x, y))
        loss = ref.step(x, y, 0.1)
        assert net.score() == pytest.approx(loss, rel=1e-10, abs=1e-12)
    np.testing.assert_allclose(net.params().numpy(), np.concatenate([p.ravel() for p in ref.p]),
                               rtol=1e-10, atol=1e-12)
    assert net.iteration == 50 and net.epoch == 50


def test_modes_train_to_identical_parameters_with_dropout(rng):
    x, y = data(rng, 32)
    results = {}
    for mode in MODES:
        net = MultiLayerNetwork(conf_for(mode, dropout=0.7, updater=Adam(1e-2)))
        net.init()
        net.fit(x, y, batch_size=8, epochs=5)
        results[mode] = (net.params().numpy(), net.score(), net.output(x).numpy())
        ndws.destroy_all_workspaces_for_current_thread()
    for mode in MODES[1:]:
        for a, b in zip(results[mode], results["NONE"]):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("mode", ["SINGLE", "SEPARATE", "ENABLED"])
def test_no_heap_allocation_after_warm_up(mode, rng):
    layers = [DenseLayer(n_in=6, n_out=7, activation="relu", l1=1e-3, l2=1e-2),
              DenseLayer(n_out=5, activation="tanh", dropout=0.8),
              OutputLayer(n_out=3, activation="softmax")]
    net = MultiLayerNetwork(conf_for(mode, updater=Adam(1e-3), layers=layers))
    net.init()
    x, y = data(rng, 32)
    ds = DataSet(ndws.from_numpy(x), ndws.from_numpy(y))
    for _ in range(30):
        net.fit(ds)
        net.output(x)
    before = allocation_counters()
    for _ in range(20):
        net.fit(ds)
    assert allocation_counters()["allocations"] == before["allocations"]
    out_before = allocation_counters()
    out = net.output(x)
    assert allocation_counters()["allocations"] == out_before["allocations"] + 1  # the result
    assert out.nbytes == 32 * 3 * 4 and not out.is_attached()


@pytest.mark.parametrize("mode", MODES)
def test_output_is_detached_repeatable_and_leaves_the_caller_alone(mode, rng):
    net = MultiLayerNetwork(conf_for(mode))
    net.init()
    x, _ = data(rng)
    with ndws.workspace("CALLER") as caller:
        xin = ndws.asarray(x)                       # an input that lives in a workspace
        used = caller.this_cycle_allocations
        a = net.output(xin)
        b = net.output(xin)
        assert ndws.current_workspace() is caller
        assert caller.this_cycle_allocations == used     # input not copied, nothing left here
    assert not a.is_attached() and a.stale is None
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_allclose(a.numpy().sum(axis=1), 1.0, rtol=1e-5)


def test_output_workspace_receives_the_result(rng):
    net = MultiLayerNetwork(conf_for("ENABLED"))
    net.init()
    x, _ = data(rng)
    with ndws.workspace("OUT") as out_ws:
        y = net.output(x, output_workspace=out_ws)
        assert y.workspace_id == "OUT"
        np.testing.assert_array_equal(y.numpy(), net.output(x).numpy())
    closed = ndws.get_workspace_manager().get_workspace_for_current_thread("OUT")
    with pytest.raises(ndws.WorkspaceError, match=r"output_workspace: workspace \[OUT\] is not "
                                                  r"open"):
        net.output(x, output_workspace=closed)
    with pytest.raises(TypeError, match="output_workspace: expected an open ndws.Workspace"):
        net.output(x, output_workspace="OUT")


def test_an_output_workspace_of_another_thread_is_refused_by_name(rng, foreign_workspace):
    # open in its own thread, so "not open" would be wrong: the error says whose it is
    net = MultiLayerNetwork(conf_for("ENABLED"))
    net.init()
    x, _ = data(rng)
    theirs, owner = foreign_workspace("THEIRS", open=True)
    used = theirs.this_cycle_allocations
    with pytest.raises(ndws.WorkspaceError, match=(
            rf"output_workspace: workspace \[THEIRS\] belongs to thread {owner.ident} and "
            rf"can't be used from thread {threading.get_ident()}$")) as e:
        net.output(x, output_workspace=theirs)
    assert e.value.kind == "thread" and theirs.this_cycle_allocations == used


class Doubling(Layer):
    """A custom layer without parameters: y = 2x."""

    def activate(self, x, training, mgr):
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS, x.shape, dtype=x.dtype)
        ndws.multiply(x, 2.0, out=y)
        return y

    def backprop_gradient(self, epsilon, mgr):
        eps = mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, epsilon.shape,
                                       dtype=epsilon.dtype)
        ndws.multiply(epsilon, 2.0, out=eps)
        return {}, eps


class LeakyDoubling(Doubling):
    """The workspace mistake: the result is left in working memory."""

    def activate(self, x, training, mgr):
        y = mgr.create_uninitialized(ArrayType.FF_WORKING_MEM, x.shape, dtype=x.dtype)
        ndws.multiply(x, 2.0, out=y)
        return y


@pytest.mark.parametrize("mode", MODES)
def test_custom_layer_trains_in_every_mode(mode, rng):
    layers = [DenseLayer(n_in=6, n_out=7, activation="relu"), Doubling(),
              OutputLayer(n_out=3, activation="softmax")]
    plain = [DenseLayer(n_in=6, n_out=7, activation="relu"),
             OutputLayer(n_out=3, activation="softmax")]
    net = MultiLayerNetwork(conf_for(mode, layers=layers))
    net.init()
    x, y = data(rng, 32)
    first = None
    for _ in range(30):
        net.fit(x, y)
        first = first if first is not None else net.score()
    assert net.score() < first
    twin = MultiLayerNetwork(conf_for(mode, layers=plain))
    twin.init()
    assert net.num_params() == twin.num_params()          # the custom layer has none
    out = net.output(x)
    assert not out.is_attached()


def test_layer_returning_working_memory_is_named():
    layers = [DenseLayer(n_in=6, n_out=7), LeakyDoubling(),
              OutputLayer(n_out=3, activation="softmax")]
    net = MultiLayerNetwork(conf_for("SEPARATE", layers=layers))
    net.init()
    x = np.ones((4, 6), np.float32)
    with pytest.raises(ndws.WorkspaceError,
                       match=r'^layers\[1\] \(LeakyDoubling\).activate: array \(ACTIVATIONS\) '
                             r'workspace validation failed - array is defined in incorrect '
                             r'workspace: .*"WS_LAYER_WORKING_MEM".* mgr.create\(ACTIVATIONS'):
        net.fit(x, np.zeros(4, np.int64))
    assert ndws.current_workspace() is None
    assert not any(ws.is_scope_active for ws in
                   ndws.get_workspace_manager().get_all_workspaces_for_current_thread())
    with pytest.raises(ndws.WorkspaceError, match=r"^layers\[1\] \(LeakyDoubling\)"):
        net.output(x)
    assert ndws.current_workspace() is None


def test_a_busy_network_refuses_a_second_thread(rng):
    inside, release = threading.Event(), threading.Event()

    class Waiting(Doubling):
        def activate(self, x, training, mgr):
            inside.set()
            release.wait(10)
            return super().activate(x, training, mgr)

    layers = [DenseLayer(n_in=6, n_out=7), Waiting(), OutputLayer(n_out=3, activation="softmax")]
    net = MultiLayerNetwork(conf_for("ENABLED", layers=layers))
    net.init()
    x, y = data(rng)
    errors = []
    t = threading.Thread(target=lambda: net.fit(x, y))
    t.start()
    assert inside.wait(10)
    try:
        with pytest.raises(RuntimeError, match=r"^MultiLayerNetwork.output: the network is in "
                                               r"use by another thread"):
            net.output(x)
    finally:
        release.set()
        t.join(10)
    assert not t.is_alive() and not errors
    assert net.iteration == 1


def test_digits_reach_95_percent(rng):
    X, y = load_digits()
    X = X / 16.0
    order = rng.permutation(len(X))
    X, y = X[order], y[order]
    conf = MultiLayerConfiguration(
        [DenseLayer(n_in=64, n_out=128, activation="relu"),
         OutputLayer(n_out=10, activation="softmax", loss_function="MCXENT")],
        seed=1, updater=Adam(3e-3))
    net = MultiLayerNetwork(conf)
    net.init()
    net.fit(X[:1400], y[:1400], batch_size=32, epochs=15)
    acc = (net.output(X[1400:]).numpy().argmax(axis=1) == y[1400:]).mean()
    assert acc >= 0.95


@pytest.mark.parametrize("loss, act", [("XENT", "sigmoid"), ("MSE", "identity"), ("L2", "tanh"),
                                       ("L1", "identity"), ("MEAN_ABSOLUTE_ERROR", "sigmoid")])
def test_other_losses_follow_dl4j_scaling(loss, act, rng):
    net = MultiLayerNetwork(conf_for("ENABLED", dtype="float64", loss=loss, out_act=act))
    net.init()
    x = rng.standard_normal((8, 6))
    t = rng.random((8, 3))
    pred = net.output(x).numpy()
    net.fit(x, t)
    per_example = {"XENT": lambda: -(t * np.log(pred) + (1 - t) * np.log(1 - pred)).sum(1),
                   "MSE": lambda: ((pred - t) ** 2).mean(1),
                   "L2": lambda: ((pred - t) ** 2).sum(1),
                   "L1": lambda: np.abs(pred - t).sum(1),
                   "MEAN_ABSOLUTE_ERROR": lambda: np.abs(pred - t).mean(1)}[loss]()
    assert net.score() == pytest.approx(per_example.mean(), rel=1e-9)


@pytest.mark.parametrize("call, exc, msg", [
    (lambda n: n.fit(np.ones((4, 5)), np.zeros(4, np.int64)), ValueError,
     r"^x: expected 6 features \(layers\[0\].n_in\), got 5$"),
    (lambda n: n.fit(np.ones((4, 6)), np.zeros(3, np.int64)), ValueError,
     r"^labels: 3 rows for 4 examples$"),
    (lambda n: n.fit(np.ones((4, 6)), np.zeros(4, np.int64), epochs=0), ValueError,
     r"^epochs: expected an int >= 1, got 0$"),
    (lambda n: n.fit(np.ones((4, 6)), np.zeros(4, np.int64), batch_size=0), ValueError,
     r"^batch_size: expected an int >= 1, got 0$"),
    (lambda n: n.fit(42), TypeError, r"^data: expected a DataSet"),
    (lambda n: n.fit(DataSet(np.ones((4, 6)), np.zeros(4, np.int64)), batch_size=2), ValueError,
     r"^batch_size: only with features and labels arrays"),
    (lambda n: n.fit([np.ones(3)]), TypeError, r"^data: item 0 is a ndarray, not a DataSet$"),
    (lambda n: n.output(np.ones((2, 3, 6))), ValueError,
     r"^x: expected one example \(n_features,\) or a batch \(n_samples, n_features\), got "
     r"shape \(2, 3, 6\)$"),
    (lambda n: n.output(np.array([["a"] * 6])), TypeError, r"^x: expected an array of numbers"),
    (lambda n: n.output(object()), TypeError, r"^x: expected an array of numbers"),
    (lambda n: n.set_params(np.zeros(3)), ValueError, r"^params: expected shape \("),
    (lambda n: n.set_params(np.zeros(n.num_params(), np.int64)), TypeError,
     r"^params: expected a float array"),
    (lambda n: n.fit(np.ones((4, 6)), np.full(4, 7)), ValueError, r"out of range"),
])
def test_hostile_input(call, exc, msg):
    net = MultiLayerNetwork(conf_for("ENABLED"))
    net.init()
    before = net.params().numpy()
    with pytest.raises(exc, match=msg):
        call(net)
    np.testing.assert_array_equal(net.params().numpy(), before)   # nothing half-applied
    assert ndws.current_workspace() is None and net.iteration == 0


def test_uninitialised_and_wrong_construction():
    with pytest.raises(TypeError, match=r"^conf: expected an ndws.nn.MultiLayerConfiguration"):
        MultiLayerNetwork({"layers": []})
    net = MultiLayerNetwork(conf_for("NONE"))
    with pytest.raises(RuntimeError, match=r"call init\(\) first"):
        net.output(np.ones((1, 6)))


def test_set_params_clone_and_views(rng):
    net = MultiLayerNetwork(conf_for("ENABLED"))
    net.init()
    n = net.num_params()
    assert n == 6 * 7 + 7 + 7 * 5 + 5 + 5 * 3 + 3
    w = net.get_layer(0).params["W"]
    new = rng.standard_normal(n).astype(np.float32)
    net.set_params(new)
    np.testing.assert_array_equal(w.numpy().ravel(), new[:42])   # layers' weights are views
    twin = net.clone()
    x, y = data(rng)
    net.fit(x, y)
    twin.fit(x, y)
    np.testing.assert_array_equal(net.params().numpy(), twin.params().numpy())


def _gradient_check(net, ds, eps=1e-6, score=None):
    # score: the loss the gradient is of; net.score(ds) (an inference pass) unless a layer
    # behaves differently in training (batch normalisation: then the training pass itself)
    score = score or net.score
    net.compute_gradient_and_score(ds)
    analytic = net.gradient().numpy()
    p0 = net.params().numpy()
    numeric = np.empty_like(p0)
    for i in range(p0.size):
        for sign in (1, -1):
            p = p0.copy()
            p[i] += sign * eps
            net.set_params(p)
            numeric[i] = score(ds) if sign == 1 else (numeric[i] - score(ds)) / (2 * eps)
    net.set_params(p0)
    return analytic, numeric


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("hidden, loss, out_act", [
    ("relu", "MCXENT", "softmax"), ("leakyrelu", "NEGATIVELOGLIKELIHOOD", "softmax"),
    ("elu", "XENT", "sigmoid"), ("sigmoid", "MSE", "identity"), ("tanh", "L2", "tanh"),
    ("softplus", "L1", "identity"), ("gelu", "MEAN_ABSOLUTE_ERROR", "sigmoid"),
    ("identity", "SQUARED_LOSS", "softplus"),
])
def test_gradients_match_finite_differences(mode, hidden, loss, out_act, rng):
    # DL4J GradientCheckUtil style: float64, central differences, every parameter
    layers = [DenseLayer(n_in=4, n_out=5, activation=hidden, l2=0.01, l1=0.001),
              ActivationLayer(activation="tanh"),
              OutputLayer(n_out=3, activation=out_act, loss_function=loss)]
    net = MultiLayerNetwork(conf_for(mode, dtype="float64", layers=layers))
    net.init()
    x = rng.standard_normal((6, 4))
    if loss in ("MCXENT", "NEGATIVELOGLIKELIHOOD"):
        y = np.eye(3)[rng.integers(0, 3, 6)]               # one-hot labels, DL4J's form
    else:
        y = rng.random((6, 3))
    analytic, numeric = _gradient_check(net, DataSet(x, y))
    np.testing.assert_allclose(analytic, numeric, rtol=1e-4, atol=1e-7)


def test_gradient_check_through_a_loss_layer_and_custom_layer(rng):
    layers = [DenseLayer(n_in=4, n_out=3, activation="identity"), Doubling(),
              LossLayer(loss_function="MCXENT", activation="softmax")]
    net = MultiLayerNetwork(conf_for("SEPARATE", dtype="float64", layers=layers))
    net.init()
    x = rng.standard_normal((5, 4))
    analytic, numeric = _gradient_check(net, DataSet(x, rng.integers(0, 3, 5)))
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("mode", MODES)
def test_batch_normalization_gradients_and_running_statistics(mode, rng):
    layers = [DenseLayer(n_in=4, n_out=5, activation="identity"), BatchNormalization(decay=0.5),
              ActivationLayer(activation="tanh"), OutputLayer(n_out=3, activation="softmax")]
    net = MultiLayerNetwork(conf_for(mode, dtype="float64", layers=layers))
    net.init()
    x = rng.standard_normal((7, 4))
    ds = DataSet(x, rng.integers(0, 3, 7))
    analytic, numeric = _gradient_check(net, ds, score=net.compute_gradient_and_score)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8)
    bn = net.get_layer(1)
    assert not analytic[_offset(net, 1, "mean"):_offset(net, 1, "var") + 5].any()
    # running statistics: decay 0.5 towards the batch's, untouched by the updater
    net.set_params(net.params().numpy())
    bn.params["mean"].fill(0.0)
    bn.params["var"].fill(1.0)
    z = x @ net.get_layer(0).params["W"].numpy() + net.get_layer(0).params["b"].numpy()
    net.fit(ds)
    np.testing.assert_allclose(bn.params["mean"].numpy(), 0.5 * z.mean(0), rtol=1e-12)
    np.testing.assert_allclose(bn.params["var"].numpy(), 0.5 + 0.5 * z.var(0), rtol=1e-12)
    # inference uses the running statistics: the NumPy formula
    net2_out = net.output(x).numpy()
    assert net2_out.shape == (7, 3) and np.allclose(net2_out.sum(1), 1)


def _offset(net, index, name):
    off = 0
    for layer in net.layers:
        for pname, shape in layer.param_shapes().items():
            if layer.index == index and pname == name:
                return off
            off += int(np.prod(shape))
    raise KeyError(name)


def test_fit_never_collects_unless_occasional_gc_is_configured(monkeypatch, rng):
    import gc
    calls = []
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append(1) or 0)
    net = MultiLayerNetwork(conf_for("ENABLED"))
    net.init()
    x, y = data(rng, 32)
    net.fit(x, y, batch_size=8, epochs=2)
    assert calls == []
    mm = ndws.get_memory_manager()
    saved = mm.occasional_gc_frequency, mm.auto_gc_window
    mm.set_occasional_gc_frequency(2)
    mm.set_auto_gc_window(0)
    try:
        net.fit(x, y, batch_size=8, epochs=1)
    finally:
        mm.set_occasional_gc_frequency(saved[0])
        mm.set_auto_gc_window(saved[1])
    assert len(calls) == 2                                   # every second iteration of 4


@pytest.mark.parametrize("loss, act", [("MCXENT", "softmax"), ("XENT", "sigmoid"),
                                       ("MSE", "identity"), ("L1", "tanh")])
def test_score_examples_average_to_the_score(loss, act, rng):
    layers = [DenseLayer(n_in=6, n_out=5, activation="tanh", l2=0.1),
              OutputLayer(n_out=3, activation=act, loss_function=loss)]
    net = MultiLayerNetwork(conf_for("ENABLED", dtype="float64", layers=layers))
    net.init()
    x = rng.standard_normal((9, 6))
    t = np.eye(3)[rng.integers(0, 3, 9)] if loss == "MCXENT" else rng.random((9, 3))
    ds = DataSet(x, t)
    per = net.score_examples(ds, add_regularization=False)
    assert per.shape == (9,) and not per.is_attached()
    reg = net.get_layer(0).regularization_score()
    assert per.numpy().mean() + reg == pytest.approx(net.score(ds), rel=1e-12)
    with_reg = net.score_examples(ds)
    np.testing.assert_allclose(with_reg.numpy(), per.numpy() + reg, rtol=1e-12)
    with pytest.raises(TypeError, match=r"^add_regularization: expected a bool"):
        net.score_examples(ds, add_regularization="yes")


def test_feed_forward_is_detached_and_matches_output(rng):
    net = MultiLayerNetwork(conf_for("SEPARATE"))
    net.init()
    x, _ = data(rng)
    acts = net.feed_forward(x)
    assert [a.shape for a in acts] == [(16, 6), (16, 7), (16, 5), (16, 3)]
    assert not any(a.is_attached() for a in acts)
    np.testing.assert_array_equal(acts[-1].numpy(), net.output(x).numpy())
    np.testing.assert_array_equal(acts[0].numpy(), x)


def test_history_records_and_plots(rng):
    import matplotlib
    matplotlib.use("Agg")
    net = MultiLayerNetwork(conf_for("ENABLED"))
    net.init()
    x, y = data(rng, 32)
    history = net.fit(x, y, batch_size=8, epochs=3)
    assert history.iterations == list(range(12)) and history.epochs == [0, 1, 2]
    assert history.epoch_scores[0] == pytest.approx(np.mean(history.scores[:4]))
    assert len(history.epoch_seconds) == 3 and all(s > 0 for s in history.samples_per_second)
    ax = history.plot()
    assert [line.get_label() for line in ax.get_lines()] == ["iteration score", "epoch mean"]
    assert repr(history).startswith("<History 3 epochs, 12 iterations, last epoch score ")
    with pytest.raises(TypeError, match=r"^progress: expected True, False or None"):
        net.fit(x, y, progress="yes")


def test_training_in_a_worker_thread(rng):
    import threading
    net = MultiLayerNetwork(conf_for("ENABLED"))
    net.init()
    x, y = data(rng, 32)
    done = threading.Event()
    errors = []

    def work():
        try:
            net.fit(x, y, batch_size=8, epochs=2)
        except BaseException as exc:             # reported below
            errors.append(exc)
        finally:
            ndws.destroy_all_workspaces_for_current_thread()
            done.set()

    t = threading.Thread(target=work)
    t.start()
    assert done.wait(30)
    t.join()
    assert errors == [] and net.iteration == 8
    assert net.output(x).shape == (32, 3)        # then used from this thread


def test_async_capable_iterators_are_prefetched(rng):
    from ndws.data.iterators import ArrayDataSetIterator
    x, y = data(rng, 40)
    onehot = np.eye(3, dtype=np.float32)[y]

    class Loader(ArrayDataSetIterator):     # as if it loaded each batch (an in-memory one is
        def async_supported(self):           # not prefetched: docs/data.md)
            return True

    it = Loader(x, onehot, batch_size=8)
    import threading
    before = set(threading.enumerate())
    a = MultiLayerNetwork(conf_for("ENABLED", dropout=0.8))
    a.init()
    a.fit(it, epochs=2)                               # through AsyncDataSetIterator
    assert set(threading.enumerate()) == before       # its producer thread is gone
    b = MultiLayerNetwork(conf_for("ENABLED", dropout=0.8))
    b.init()
    b.fit([DataSet(x[i:i + 8], onehot[i:i + 8]) for i in range(0, 40, 8)], epochs=2)
    np.testing.assert_array_equal(a.params().numpy(), b.params().numpy())
    assert a.iteration == 10 and a.last_etl_time >= 0


def test_weight_decay_shrinks_weights_after_the_update(rng):
    layers = [DenseLayer(n_in=6, n_out=7, activation="relu", weight_decay=0.5),
              OutputLayer(n_out=3, activation="softmax")]
    plain = MultiLayerNetwork(conf_for("ENABLED", dtype="float64", layers=[
        DenseLayer(n_in=6, n_out=7, activation="relu"), OutputLayer(n_out=3, activation="softmax")]))
    decayed = MultiLayerNetwork(conf_for("ENABLED", dtype="float64", layers=layers))
    plain.init()
    decayed.init()
    x, y = data(rng, dtype=np.float64)
    plain.fit(x, y)
    decayed.fit(x, y)
    w_plain = plain.get_layer(0).params["W"].numpy()
    np.testing.assert_allclose(decayed.get_layer(0).params["W"].numpy(),
                               w_plain * (1 - 0.1 * 0.5), rtol=1e-12)   # lr 0.1 (Sgd)
    np.testing.assert_array_equal(decayed.get_layer(1).params["W"].numpy(),
                                  plain.get_layer(1).params["W"].numpy())
    assert decayed.score() == plain.score()          # not part of the score


@pytest.mark.parametrize("scheme, std", [("XAVIER", (2 / (300 + 200)) ** 0.5),
                                         ("RELU", (2 / 300) ** 0.5), ("NORMAL", 300 ** -0.5),
                                         ("UNIFORM", 300 ** -0.5 / 3 ** 0.5), ("ZERO", 0.0)])
def test_weight_init_schemes(scheme, std):
    conf = MultiLayerConfiguration([DenseLayer(n_in=300, n_out=200, weight_init=scheme,
                                               bias_init=0.25)], seed=9)
    net = MultiLayerNetwork(conf)
    net.init()
    w = net.get_layer(0).params["W"].numpy()
    assert w.std() == pytest.approx(std, rel=0.02, abs=1e-12)
    assert abs(w.mean()) < 0.01
    if scheme == "UNIFORM":
        assert np.abs(w).max() <= 300 ** -0.5
    assert (net.get_layer(0).params["b"].numpy() == 0.25).all()
    again = MultiLayerNetwork(conf)
    again.init()
    np.testing.assert_array_equal(again.params().numpy(), net.params().numpy())  # seeded


@pytest.mark.parametrize("loss, act", [("MCXENT", "softmax"), ("XENT", "sigmoid"),
                                       ("MSE", "identity"), ("L1", "tanh")])
def test_label_masks_follow_dl4j(loss, act, rng):
    layers = [DenseLayer(n_in=6, n_out=5, activation="tanh"),
              OutputLayer(n_out=3, activation=act, loss_function=loss)]
    net = MultiLayerNetwork(conf_for("ENABLED", dtype="float64", layers=layers))
    net.init()
    x = rng.standard_normal((8, 6))
    t = np.eye(3)[rng.integers(0, 3, 8)] if loss == "MCXENT" else rng.random((8, 3))
    per = net.score_examples(DataSet(x, t), add_regularization=False).numpy()
    ones = DataSet(x, t, labels_mask=np.ones((8, 1)))
    assert net.score(ones) == pytest.approx(net.score(DataSet(x, t)), rel=1e-12)
    keep = np.array([1, 0, 1, 1, 0, 0, 1, 1.0])
    masked = DataSet(x, t, labels_mask=keep.reshape(8, 1))
    # masked-out examples add nothing; the sum is still divided by the batch size (DL4J)
    assert net.score(masked) == pytest.approx((per * keep).sum() / 8, rel=1e-12)
    np.testing.assert_allclose(net.score_examples(masked, False).numpy(), per * keep,
                               rtol=1e-12)
    analytic, numeric = _gradient_check(net, masked)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8)
    weighted = DataSet(x, t, labels_mask=np.linspace(0.5, 2.0, 8).reshape(8, 1))
    assert net.score(weighted) == pytest.approx((per * np.linspace(0.5, 2.0, 8)).sum() / 8,
                                                rel=1e-12)


@pytest.mark.skipif(ndws._core._build_info()["sanitized"],
                    reason="AddressSanitizer keeps freed memory in its quarantine, so RSS grows "
                           "with any allocation (Python's own included)")
def test_rss_stays_flat_over_10000_iterations(rng):
    # after the learning iterations, training and output() reuse the same memory: RSS does not
    # grow (measured from the kernel's own count of resident pages)
    import resource
    net = MultiLayerNetwork(conf_for("ENABLED", dropout=0.9, updater=Adam(1e-3)))
    net.init()
    x, y = data(rng, 16)
    ds = DataSet(ndws.from_numpy(x), ndws.from_numpy(y))

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()

    for _ in range(1000):
        net.fit(ds)
        net.output(x)
    before, allocs = rss(), allocation_counters()["allocations"]
    for _ in range(9000):
        net.fit(ds)
    assert allocation_counters()["allocations"] == allocs
    assert rss() - before < 256 * 1024


def test_exotic_inputs(rng):
    net = MultiLayerNetwork(conf_for("ENABLED"))
    net.init()
    x = rng.random((8, 6)).astype(np.float32)
    ref = net.output(x).numpy()
    # views of any layout give the contiguous copy's answer
    np.testing.assert_allclose(net.output(ndws.asarray(x)[::-1]).numpy(), ref[::-1], rtol=1e-6)
    np.testing.assert_allclose(net.output(ndws.asarray(np.asfortranarray(x))).numpy(), ref,
                               rtol=1e-6)
    wide = ndws.asarray(np.repeat(x, 2, axis=1))
    np.testing.assert_allclose(net.output(wide[:, ::2]).numpy(), ref, rtol=1e-6)
    # other dtypes are cast to the network's; bool is a number; complex is refused
    assert net.output(x.astype(np.float64)).dtype == np.float32
    assert net.output(x > 0.5).shape == (8, 3)
    with pytest.raises(TypeError, match=r"^x: expected an array of numbers, got dtype complex64"):
        net.output(x.astype(np.complex64))
    # empty batches and NaN: NumPy semantics, no crash
    assert net.output(np.zeros((0, 6), np.float32)).shape == (0, 3)
    assert np.isnan(net.output(np.full((2, 6), np.nan, np.float32)).numpy()).all()
    before = net.params().numpy()
    with pytest.raises(ValueError, match=r"^fit: no examples \(the DataSet has 0 rows\)$"):
        net.fit(DataSet(np.zeros((0, 6), np.float32), np.zeros(0, np.int64)))
    np.testing.assert_array_equal(net.params().numpy(), before)   # nothing to learn from
    with pytest.raises(ValueError, match=r"labels has shape \(8, 4\), expected \(8, 3\)"):
        net.fit(x, np.zeros((8, 4), np.float32))
    with pytest.raises(TypeError, match=r"^labels: expected an array of numbers, got dtype "
                                        r"object$"):
        net.fit(x, np.array([None] * 8))
    np.testing.assert_array_equal(net.params().numpy(), before)


def test_inputs_from_closed_and_foreign_workspaces(rng):
    import threading
    net = MultiLayerNetwork(conf_for("ENABLED"))
    net.init()
    x, y = data(rng)
    with ndws.workspace("GONE"):
        stale = ndws.asarray(x)
    with pytest.raises(ndws.WorkspaceError, match="leaked"):
        net.output(stale)
    with pytest.raises(ndws.WorkspaceError, match="leaked"):
        net.fit(stale, y)
    assert net.iteration == 0
    ready, done = threading.Event(), threading.Event()
    box = {}

    def owner():                                   # another thread's valid array: read pinned
        with ndws.workspace("THEIRS"):
            box["x"] = ndws.asarray(x)
            ready.set()
            done.wait(10)
        ndws.destroy_all_workspaces_for_current_thread()

    t = threading.Thread(target=owner)
    t.start()
    try:
        assert ready.wait(10)
        np.testing.assert_allclose(net.output(box["x"]).numpy(), net.output(x).numpy(),
                                   rtol=1e-6)
    finally:
        done.set()
        t.join(10)


@pytest.mark.parametrize("mode", MODES)
def test_output_in_training_mode_applies_dropout(mode, rng):
    net = MultiLayerNetwork(conf_for(mode, dropout=0.5))
    net.init()
    x, _ = data(rng)
    plain = net.output(x).numpy()
    noisy = net.output(x, train=True)
    assert not noisy.is_attached()
    assert not np.allclose(noisy.numpy(), plain)            # dropped inputs, scaled kept ones
    np.testing.assert_array_equal(net.output(x).numpy(), plain)   # inference is deterministic


@pytest.mark.parametrize("mode", MODES)
def test_layers_keep_no_workspace_arrays_between_iterations(mode, rng):
    layers = [DenseLayer(n_in=6, n_out=7, activation="tanh", dropout=0.8), BatchNormalization(),
              OutputLayer(n_out=3, activation="softmax")]
    net = MultiLayerNetwork(conf_for(mode, layers=layers))
    net.init()
    x, y = data(rng)
    net.fit(x, y)
    net.output(x)
    for layer in net.layers:
        kept = [k for k in Layer._pass_state if k in layer.__dict__]
        assert kept == [], (type(layer).__name__, kept)


def test_init_with_bad_params_changes_nothing(rng):
    net = MultiLayerNetwork(conf_for("ENABLED"))
    net.init()
    before, layers = net.params().numpy(), net.layers
    with pytest.raises(ValueError, match=r"^params: expected shape \(\d+,\), got \(3,\)$"):
        net.init(np.zeros(3))
    with pytest.raises(TypeError, match=r"^params: expected a float array, got dtype int64$"):
        net.init(np.zeros(net.num_params(), np.int64))
    assert net.layers is layers
    np.testing.assert_array_equal(net.params().numpy(), before)
    fresh = MultiLayerNetwork(conf_for("ENABLED"))
    with pytest.raises(ValueError):
        fresh.init(np.zeros(3))
    with pytest.raises(RuntimeError, match=r"call init\(\) first"):
        fresh.params()
