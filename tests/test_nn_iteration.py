"""ndws.nn._iteration: the compiled training iteration of networks of built-in dense layers does
exactly what the general path of MultiLayerNetwork does: bit-identical parameters, gradients and
scores, the same workspaces with the same statistics, the same errors with nothing left open;
and it is taken exactly for the networks and batches it covers."""
import threading

import numpy as np
import pytest

import ndws
from ndws.data.dataset import DataSet
from ndws.nn import (ActivationLayer, Adam, DenseLayer, MultiLayerConfiguration,
                     MultiLayerNetwork, Nesterovs, OutputLayer, Sgd)
from ndws.nn.listeners import TrainingListener
from ndws.workspace import DebugMode

MODES = ["NONE", "SINGLE", "SEPARATE", "ENABLED"]


@pytest.fixture(autouse=True)
def _clean():
    yield
    ndws.get_workspace_manager().debug_mode = DebugMode.DISABLED
    ndws.destroy_all_workspaces_for_current_thread()


def layers(hidden=("relu", "tanh"), **out):
    return ([DenseLayer(n_in=9, n_out=8, activation=hidden[0])]
            + [DenseLayer(n_out=6, activation=a) for a in hidden[1:]]
            + [OutputLayer(n_out=4, activation="softmax", **out)])


def network(mode="ENABLED", *, dtype="float32", updater=None, stack=None, compiled=True):
    conf = MultiLayerConfiguration(stack or layers(), seed=5, updater=updater or Sgd(0.1),
                                   dtype=dtype, training_workspace_mode=mode)
    net = MultiLayerNetwork(conf)
    net.init()
    if not compiled:
        net._dense_plan = None         # the general path of _gradient_and_score
    return net


class Spy:
    """Counts the runs of the network's compiled iteration (and runs it)."""

    def __init__(self, plan):
        self.plan, self.runs = plan, 0

    def run(self, *args):
        self.runs += 1
        return self.plan.run(*args)


def train(net, x, y, batch_size, epochs=3):
    scores = []
    for _ in range(epochs):
        scores += net.fit(x, y, batch_size=batch_size, progress=False).scores
    stats = {ws.id: (ws.max_cycle_allocations, ws.last_cycle_allocations, ws.cycles_count,
                     ws.generation, ws.current_size, ws.spilled_size)
             for ws in ndws.get_workspace_manager().get_all_workspaces_for_current_thread()}
    return net.params().numpy(), net.gradient().numpy(), scores, stats


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("updater", [Sgd(0.1), Adam(1e-2), Nesterovs(0.05)],
                         ids=["sgd", "adam", "nesterovs"])
@pytest.mark.parametrize("hidden", [("relu", "tanh"), ("identity", "relu", "gelu")],
                         ids=["relu-tanh", "identity-relu-gelu"])
def test_same_as_the_general_path(mode, dtype, updater, hidden):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((40, 9)).astype(dtype)
    y = rng.integers(0, 4, 40)
    results = []
    for compiled in (True, False):
        net = network(mode, dtype=dtype, updater=updater, stack=layers(hidden),
                      compiled=compiled)
        if compiled:
            net._dense_plan = spy = Spy(net._dense_plan)
        results.append(train(net, x, y, batch_size=16))       # a ragged last batch of 8
        ndws.destroy_all_workspaces_for_current_thread()
    assert spy.runs == 9
    (p1, g1, s1, w1), (p2, g2, s2, w2) = results
    assert np.array_equal(p1, p2) and np.array_equal(g1, g2)
    assert s1 == s2
    assert w1 == w2


@pytest.mark.parametrize("mode", MODES)
def test_one_hot_labels_and_negative_log_likelihood(mode):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((24, 9)).astype(np.float32)
    y = np.eye(4, dtype=np.float32)[rng.integers(0, 4, 24)]
    runs = [train(network(mode, stack=layers(loss_function="NEGATIVELOGLIKELIHOOD"),
                          compiled=c), x, y, batch_size=8) for c in (True, False)]
    assert np.array_equal(runs[0][0], runs[1][0]) and runs[0][2] == runs[1][2]


@pytest.mark.parametrize("mode", MODES)
def test_memory_plan_equals_what_the_workspaces_learn(mode):
    net = network(mode)
    x = np.random.default_rng(3).standard_normal((32, 9)).astype(np.float32)
    y = np.arange(32) % 4
    for _ in range(4):
        net.fit(x, y, progress=False)
    learned = {ws.id: ws.max_cycle_allocations
               for ws in ndws.get_workspace_manager().get_all_workspaces_for_current_thread()}
    planned = net.memory_report(32).workspace_bytes(net._train_mode(), True)
    assert {k: v for k, v in learned.items() if v} == {k: v for k, v in planned.items() if v}


def spied(net):
    net._dense_plan = spy = Spy(net._dense_plan)
    return spy


@pytest.mark.parametrize("stack", [
    [DenseLayer(n_in=9, n_out=8, dropout=0.5), OutputLayer(n_out=4, activation="softmax")],
    [DenseLayer(n_in=9, n_out=8, l2=1e-3), OutputLayer(n_out=4, activation="softmax")],
    [DenseLayer(n_in=9, n_out=8), ActivationLayer(activation="relu"),
     OutputLayer(n_out=4, activation="softmax")],
    [DenseLayer(n_in=9, n_out=8), OutputLayer(n_out=4, activation="sigmoid", loss_function="XENT")],
    [DenseLayer(n_in=9, n_out=8), OutputLayer(n_out=4, activation="identity", loss_function="MSE")],
], ids=["dropout", "l2", "activation-layer", "xent", "mse"])
def test_other_networks_take_the_general_path(stack):
    assert network(stack=stack)._dense_plan is None


def test_subclassed_dense_layer_takes_the_general_path():
    class Scaled(DenseLayer):
        def activate(self, x, training, mgr):
            return super().activate(x, training, mgr)
    assert network(stack=[Scaled(n_in=9, n_out=8), OutputLayer(n_out=4, activation="softmax")]
                   )._dense_plan is None


def test_batches_it_does_not_cover_and_listeners_it_does():
    net = network()
    spy = spied(net)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((8, 9)).astype(np.float32)
    y = np.eye(4, dtype=np.float32)[rng.integers(0, 4, 8)]
    net.fit(DataSet(x, y), progress=False)
    assert spy.runs == 1
    net.fit(DataSet(x, y, labels_mask=np.ones((8, 1), np.float32)), progress=False)   # label mask
    assert spy.runs == 1

    class Counting(TrainingListener):
        calls = 0

        def iteration_done(self, model, iteration, epoch):
            Counting.calls += 1

    class Forward(TrainingListener):
        def on_forward_pass(self, model, activations):
            self.shapes = [a.shape for a in activations]

    net.set_listeners(Counting())                 # does not look at the activations
    net.fit(DataSet(x, y), progress=False)
    assert spy.runs == 2 and Counting.calls == 1
    forward = Forward()                           # looks at them: called back from it
    net.set_listeners(forward)
    net.fit(DataSet(x, y), progress=False)
    assert spy.runs == 3 and forward.shapes == [(8, 9), (8, 8), (8, 6), (8, 4)]
    net.set_listeners()
    ndws.get_workspace_manager().debug_mode = DebugMode.SPILL_EVERYTHING
    net.fit(DataSet(x, y), progress=False)
    assert spy.runs == 3


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "general"])
def test_stale_features_raise_and_leave_nothing_open(mode, compiled):
    net = network(mode, compiled=compiled)
    before = net.params().numpy()
    with ndws.workspace("USER"):
        x = ndws.asarray(np.ones((4, 9), np.float32))
    with pytest.raises(ndws.WorkspaceError, match=r"Op \[linear\] x argument uses leaked "
                                                  r"workspace pointer from workspace \[USER\]"):
        net.fit(DataSet(x, ndws.asarray(np.arange(4) % 4)), progress=False)
    assert ndws.current_workspace() is None
    assert not any(ws.is_scope_active for ws in
                   ndws.get_workspace_manager().get_all_workspaces_for_current_thread())
    assert np.array_equal(net.params().numpy(), before)


@pytest.mark.parametrize("mode", MODES)
def test_bad_labels_raise_the_same_error_on_both_paths(mode):
    x = np.ones((4, 9), np.float32)
    errors = []
    for compiled in (True, False):
        net = network(mode, compiled=compiled)
        with pytest.raises(ValueError) as info:
            net.fit(DataSet(x, np.array([0, 1, 2, 9])), progress=False)
        errors.append(str(info.value))
        assert ndws.current_workspace() is None
    assert errors[0] == errors[1] and "out of range" in errors[0]


def test_features_of_another_thread_are_read_pinned():
    rng = np.random.default_rng(6)
    xs = rng.standard_normal((16, 9)).astype(np.float32)
    y = ndws.asarray(np.arange(16) % 4)
    held, done = {}, threading.Event()
    ready = threading.Event()

    def owner():
        with ndws.workspace("OWNER"):
            held["x"] = ndws.asarray(xs)
            ready.set()
            done.wait(10)

    t = threading.Thread(target=owner)
    t.start()
    ready.wait(10)
    try:
        nets = [network(compiled=c) for c in (True, False)]
        for net in nets:
            net.fit(DataSet(held["x"], y), progress=False)
    finally:
        done.set()
        t.join()
    assert np.array_equal(nets[0].params().numpy(), nets[1].params().numpy())
