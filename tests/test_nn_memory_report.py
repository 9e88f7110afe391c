"""ndws.nn.memory_report: the plan from the shapes equals what the workspaces learn, in every
mode; the network pre-sizes its workspaces so the first iteration does not spill."""
import numpy as np
import pytest

import ndws
from ndws.data.dataset import DataSet
from ndws.nn import (ActivationLayer, Adam, ArrayType, BatchNormalization, DenseLayer,
                     DropoutLayer, Layer, LossLayer, MultiLayerConfiguration, MultiLayerNetwork,
                     OutputLayer)

MODES = ["NONE", "SINGLE", "SEPARATE", "ENABLED"]


@pytest.fixture(autouse=True)
def _clean():
    yield
    ndws.destroy_all_workspaces_for_current_thread()


def stack(kind):
    if kind == "classifier":
        return [DenseLayer(n_in=20, n_out=32, activation="relu", l2=0.01, l1=0.001),
                DenseLayer(n_out=16, activation="tanh", dropout=0.8), DropoutLayer(0.9),
                ActivationLayer(activation="elu"), OutputLayer(n_out=5, activation="softmax")]
    if kind == "regression":
        return [DenseLayer(n_in=20, n_out=12, activation="sigmoid"),
                OutputLayer(n_out=3, activation="tanh", loss_function="MSE")]
    if kind == "batchnorm":
        return [DenseLayer(n_in=20, n_out=12, activation="identity"), BatchNormalization(),
                ActivationLayer(activation="relu"),
                OutputLayer(n_out=5, activation="softmax")]
    return [DenseLayer(n_in=20, n_out=7, activation="identity"),
            LossLayer(loss_function="XENT", activation="sigmoid")]


def batch(rng, kind, n):
    x = rng.standard_normal((n, 20)).astype(np.float32)
    if kind in ("classifier", "batchnorm"):
        return DataSet(x, rng.integers(0, 5, n))
    width = 3 if kind == "regression" else 7
    return DataSet(x, rng.random((n, width)).astype(np.float32))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["classifier", "regression", "loss layer", "batchnorm"])
@pytest.mark.parametrize("n", [1, 33])
def test_plan_equals_what_the_workspaces_learn(mode, kind, n, rng):
    net = MultiLayerNetwork(MultiLayerConfiguration(
        stack(kind), seed=2, updater=Adam(1e-3), training_workspace_mode=mode,
        inference_workspace_mode=mode))
    net.init()
    report = net.memory_report(n)
    assert report.complete
    ds = batch(rng, kind, n)
    net.fit(ds)
    net.output(ds.features)
    wsm = ndws.get_workspace_manager()
    spilled = {w.id: w.spilled_size for w in wsm.get_all_workspaces_for_current_thread()}
    assert set(spilled.values()) <= {0}              # the first iteration did not spill
    for _ in range(6):
        net.fit(ds)
        net.output(ds.features)
    learned = {w.id: w.max_cycle_allocations for w in wsm.get_all_workspaces_for_current_thread()}
    assert report.workspaces(ndws.WorkspaceMode[mode]) == learned


def test_totals_show_the_trade_off():
    net = MultiLayerNetwork(MultiLayerConfiguration(stack("classifier"), seed=1))
    net.init()
    r = net.memory_report(64)
    W = ndws.WorkspaceMode
    assert r.total_bytes(W.NONE) == r.parameter_bytes == (2 * net.num_params()) * 4  # Sgd
    assert r.total_bytes(W.SEPARATE) < r.total_bytes(W.SINGLE)
    assert r.workspace_bytes(W.ENABLED, True) == r.workspace_bytes(W.SEPARATE, True)
    assert r.workspace_bytes(W.ENABLED, False) == r.workspace_bytes(W.SINGLE, False)
    row = r.layers[0]
    assert row["type"] == "DenseLayer"
    w = 20 * 32 * 4                        # the l2 and l1 terms' temporaries are weight-sized
    assert row["training"] == {"ACTIVATIONS": 64 * 32 * 4, "BP_WORKING_MEM": 64 * 32 * 4 + 3 * w,
                               "UPDATER_WORKING_MEM": 2 * (w + 64)}
    assert row["inference"] == {"ACTIVATIONS": 64 * 32 * 4}
    text = str(r)
    assert text.startswith("Memory report, batch size 64 (bytes)")
    assert "SEPARATE: total " in text and "WS_LAYER_WORKING_MEM" in text


class WhereEpsilon(Layer):
    # keeps its width and notes the workspace of the epsilon it passes back
    keeps_width = True
    seen: list = []

    def memory_use(self, batch, training, itemsize):
        size = batch * self.n_in * itemsize
        use = [("forward", ArrayType.ACTIVATIONS, size)]
        return use + [("backward", ArrayType.ACTIVATION_GRAD, size)] if training else use

    def activate(self, x, training, mgr):
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS, x.shape, dtype=x.dtype)
        return ndws.add(x, 0.0, out=y)

    def backprop_gradient(self, epsilon, mgr):
        e = mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, epsilon.shape,
                                     dtype=epsilon.dtype)
        WhereEpsilon.seen.append((self.index, e.workspace_id))
        return {}, ndws.add(epsilon, 0.0, out=e)


def test_separate_gives_the_ping_pong_workspaces_one_size_for_training_and_inference(rng):
    # layer i's epsilon has the shape of layer i - 1's activations: it goes to the workspace
    # that holds them at inference, so a network that trains and infers in SEPARATE sizes each
    # workspace of the pair for one of them (widths 64, 8, 48, 8: the pair needs 64 and 48
    # wide, not 64 and 64)
    W = ndws.WorkspaceMode
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=20, n_out=64), DenseLayer(n_out=8), WhereEpsilon(),
         DenseLayer(n_out=48), WhereEpsilon(), OutputLayer(n_out=5, activation="softmax")],
        seed=1, training_workspace_mode="SEPARATE", inference_workspace_mode="SEPARATE"))
    net.init()
    n = 16
    r = net.memory_report(n)
    training, inference = r.workspace_bytes(W.SEPARATE, True), r.workspace_bytes(W.SEPARATE, False)
    pair = ("WS_LAYER_ACT_1", "WS_LAYER_ACT_2")
    assert [training[k] for k in pair] == [inference[k] for k in pair] == [n * 64 * 4, n * 48 * 4]
    WhereEpsilon.seen = []
    ds = batch(rng, "classifier", n)
    net.fit(ds)
    # layer 2's epsilon has layer 1's shape (ACT_2 at inference), layer 4's layer 3's (ACT_2)
    assert WhereEpsilon.seen == [(4, "WS_LAYER_ACT_2"), (2, "WS_LAYER_ACT_2")]
    net.output(ds.features)
    sizes = {w.id: w.max_cycle_allocations
             for w in ndws.get_workspace_manager().get_all_workspaces_for_current_thread()}
    assert [sizes[k] for k in pair] == [n * 64 * 4, n * 48 * 4]


class Opaque(Layer):
    def activate(self, x, training, mgr):
        y = mgr.create(ArrayType.ACTIVATIONS, x.shape, dtype=x.dtype)
        return ndws.add(x, 0.0, out=y)

    def backprop_gradient(self, epsilon, mgr):
        e = mgr.create(ArrayType.ACTIVATION_GRAD, epsilon.shape, dtype=epsilon.dtype)
        return {}, ndws.add(epsilon, 0.0, out=e)


def test_a_layer_without_memory_use_leaves_the_plan_unknown(rng):
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=20, n_out=8), Opaque(), OutputLayer(n_out=5, activation="softmax")],
        seed=1))
    net.init()
    r = net.memory_report(16)
    assert not r.complete and r.total_bytes(ndws.WorkspaceMode.SINGLE) is None
    assert r.layers[1]["training"] is None
    assert "unknown (a layer does not declare its memory use)" in str(r)
    net.fit(batch(rng, "classifier", 16))             # the workspaces learn as usual
    assert net.iteration == 1


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, None])
def test_batch_size_is_checked(bad):
    net = MultiLayerNetwork(MultiLayerConfiguration(stack("classifier"), seed=1))
    net.init()
    with pytest.raises(ValueError, match=r"^batch_size: expected an int >= 1"):
        net.memory_report(bad)
