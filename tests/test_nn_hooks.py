"""Every TrainingListener hook fires on every path of a training iteration (the compiled dense
iteration and the general path), in the same order, with the same arguments, and under every
trainer (fit, ParallelWrapper, MPITrainer)."""
import numpy as np
import pytest

import ndws
from ndws.data.dataset import DataSet
from ndws.nn import Adam, DenseLayer, MultiLayerConfiguration, MultiLayerNetwork, OutputLayer
from ndws.nn.listeners import TrainingListener

MODES = ["NONE", "SINGLE", "SEPARATE", "ENABLED"]


class Recorder(TrainingListener):
    """Records every hook: its name, the network's counters and what it can see then."""

    def __init__(self):
        self.calls = []

    def on_epoch_start(self, model):
        self.calls.append(("on_epoch_start", model.iteration, model.epoch))

    def on_epoch_end(self, model):
        self.calls.append(("on_epoch_end", model.iteration, model.epoch))

    def on_forward_pass(self, model, activations):
        self.calls.append(("on_forward_pass", model.iteration,
                           [np.array(a, copy=True) for a in activations]))

    def on_backward_pass(self, model):
        self.calls.append(("on_backward_pass", model.iteration, model.gradient().numpy()))

    def on_gradient_calculation(self, model):
        self.calls.append(("on_gradient_calculation", model.iteration, model.score(),
                           model.gradient().numpy()))

    def iteration_done(self, model, iteration, epoch):
        self.calls.append(("iteration_done", iteration, epoch, model.score(),
                           model.params().numpy()))


class NoForward(Recorder):
    """Every hook but on_forward_pass (the base class's)."""

    on_forward_pass = TrainingListener.on_forward_pass


class PlainDense(DenseLayer):
    """A DenseLayer the compiled iteration does not cover (it takes exact classes only)."""


def network(mode, dense=DenseLayer):
    conf = MultiLayerConfiguration(
        [dense(n_in=6, n_out=8, activation="relu"), DenseLayer(n_out=5, activation="tanh"),
         OutputLayer(n_out=3, activation="softmax")],
        seed=7, updater=Adam(1e-2), training_workspace_mode=mode)
    net = MultiLayerNetwork(conf)
    net.init()
    return net


def data():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, 6)).astype(np.float32)
    return x, rng.integers(0, 3, 40)


def assert_same_records(a, b):
    assert [c[0] for c in a] == [c[0] for c in b]
    for ca, cb in zip(a, b):
        assert len(ca) == len(cb)
        for va, vb in zip(ca[1:], cb[1:]):
            if isinstance(va, list):
                assert len(va) == len(vb)
                for xa, xb in zip(va, vb):
                    np.testing.assert_array_equal(xa, xb)
            else:
                np.testing.assert_array_equal(va, vb)


def hooks_of_one_iteration(forward=True):
    one = ["on_forward_pass"] if forward else []
    return one + ["on_backward_pass", "on_gradient_calculation", "iteration_done"]


@pytest.mark.parametrize("listener", [Recorder, NoForward])
@pytest.mark.parametrize("mode", MODES)
def test_the_compiled_and_the_general_path_call_the_same_hooks_with_the_same_arguments(
        mode, listener):
    x, y = data()
    records = {}
    for path, dense in (("compiled", DenseLayer), ("general", PlainDense)):
        net = network(mode, dense)
        assert (net._compiled(DataSet(x[:8], y[:8])) is not None) == (path == "compiled")
        rec = listener()
        net.set_listeners(rec)
        net.fit(x, y, batch_size=8, epochs=2, progress=False)
        records[path] = rec.calls
    names = [c[0] for c in records["compiled"]]
    epoch = ["on_epoch_start"] + hooks_of_one_iteration(listener is Recorder) * 5 + [
        "on_epoch_end"]
    assert names == epoch * 2
    assert_same_records(records["compiled"], records["general"])
    if listener is Recorder:
        forward = records["compiled"][1]
        assert [a.shape for a in forward[2]] == [(8, 6), (8, 8), (8, 5), (8, 3)]
        # the output layer's probabilities are computed for the listener: rows sum to 1
        np.testing.assert_allclose(forward[2][-1].sum(axis=1), 1.0, rtol=1e-6)
        np.testing.assert_array_equal(forward[2][0], x[:8])


@pytest.mark.parametrize("mode", MODES)
def test_a_label_mask_takes_the_general_path_with_the_same_hooks(mode):
    x, y = data()
    onehot = np.eye(3, dtype=np.float32)[y]
    records = {}
    for path in ("compiled", "general"):
        net = network(mode)
        rec = Recorder()
        net.set_listeners(rec)
        mask = None if path == "compiled" else np.ones((8, 1), np.float32)
        for s in range(0, 40, 8):
            ds = DataSet(x[s:s + 8], onehot[s:s + 8], labels_mask=mask)
            assert (net._compiled(ds) is not None) == (path == "compiled")
            net.fit(ds, progress=False)
        records[path] = rec.calls
    assert [c[0] for c in records["compiled"]] == [c[0] for c in records["general"]]
    for ca, cb in zip(records["compiled"], records["general"]):
        for va, vb in zip(ca[1:], cb[1:]):     # a mask of ones: the same values, rounded apart
            for xa, xb in zip(va if isinstance(va, list) else [va],
                              vb if isinstance(vb, list) else [vb]):
                np.testing.assert_allclose(xa, xb, rtol=1e-5, atol=1e-6)


def test_compute_gradient_and_score_calls_the_pass_hooks_on_both_paths():
    x, y = data()
    for dense in (DenseLayer, PlainDense):
        net = network("ENABLED", dense)
        rec = Recorder()
        net.set_listeners(rec)
        net.compute_gradient_and_score(DataSet(x[:8], y[:8]))
        assert [c[0] for c in rec.calls] == ["on_forward_pass", "on_backward_pass"]


@pytest.mark.parametrize("training_mode", ["AVERAGING", "SHARED_GRADIENTS"])
@pytest.mark.parametrize("dense", [DenseLayer, PlainDense], ids=["compiled", "general"])
def test_parallel_wrapper_workers_call_every_hook(training_mode, dense):
    from ndws.parallel import ParallelWrapper
    x, y = data()
    net = network("ENABLED", dense)
    rec = Recorder()
    net.set_listeners(rec)
    with ParallelWrapper(net, workers=2, training_mode=training_mode) as pw:
        pw.fit(x, y, batch_size=10, progress=False)   # 2 rounds of 2 batches
    names = [c[0] for c in rec.calls]
    # both workers call the (shared) listener: each of its 4 iterations calls all four hooks
    for hook in hooks_of_one_iteration():
        assert names.count(hook) == 4, hook
    assert names[0] == "on_epoch_start" and names[-1] == "on_epoch_end"


@pytest.mark.parametrize("dense", [DenseLayer, PlainDense], ids=["compiled", "general"])
def test_mpi_trainer_calls_every_hook(dense):
    pytest.importorskip("mpi4py")
    from mpi4py import MPI
    from ndws.parallel import MPITrainer
    x, y = data()
    net = network("ENABLED", dense)
    rec = Recorder()
    net.set_listeners(rec)
    with MPITrainer(net, MPI.COMM_SELF) as trainer:
        trainer.fit(x, y, batch_size=8, progress=False)
    names = [c[0] for c in rec.calls]
    assert names == ["on_epoch_start"] + hooks_of_one_iteration() * 5 + ["on_epoch_end"]
    assert ndws.current_workspace() is None


@pytest.mark.parametrize("mode", ["SINGLE", "SEPARATE", "ENABLED"])
@pytest.mark.parametrize("dense", [DenseLayer, PlainDense], ids=["compiled", "general"])
def test_a_forward_listener_that_trains_a_network_is_named_and_nothing_moves(mode, dense):
    # the forward pass's listeners are the one call into user code with the iteration's
    # workspace open (its activations live there); training a network in this thread starts
    # a new cycle of that workspace (the same names) under the iteration
    x, y = data()
    other = network(mode)

    class Trains(TrainingListener):
        def on_forward_pass(self, model, activations):
            other.fit(x[:8], y[:8], progress=False)

    net = network(mode, dense)
    net.set_listeners(Trains())
    before = net.params().numpy()
    name = "WS_SINGLE" if mode == "SINGLE" else "WS_ALL_LAYERS_ACT"
    with pytest.raises(ndws.WorkspaceError,
                       match=rf"^Trains.on_forward_pass started a new cycle of workspace "
                             rf"\[{name}\] while this network's training iteration had it open"):
        net.fit(x[:8], y[:8], progress=False)
    assert net.iteration == 0 and net.epoch == 0
    np.testing.assert_array_equal(net.params().numpy(), before)
    assert ndws.current_workspace() is None

    class TrainsAfter(TrainingListener):                 # where it belongs: it works
        def iteration_done(self, model, iteration, epoch):
            other.fit(x[:8], y[:8], progress=False)

    net.set_listeners(TrainsAfter())
    net.fit(x[:8], y[:8], progress=False)
    assert net.iteration == 1
