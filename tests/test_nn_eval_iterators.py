"""Evaluation and training over every kind of data ndws ships, in every workspace mode: no
batch is taken from an iterator (and no user code runs) while one of the network's workspace
cycles is open, so a batch is never born in a cycle that ends under it (docs/networks.md,
"Evaluating")."""
import numpy as np
import pytest

import ndws
from ndws.data import (ArrayDataSetIterator, AsyncDataSetIterator, AsyncShieldDataSetIterator,
                       CSVRecordReader, DataSet, ExistingDataSetIterator, ListDataSetIterator,
                       RecordReaderDataSetIterator, WorkspacesShieldDataSetIterator,
                       as_data_set_iterator)
from ndws.datasets import load_digits, load_iris
from ndws.evaluation import Evaluation, RegressionEvaluation, ROCMultiClass
from ndws.nn import Adam, DenseLayer, MultiLayerConfiguration, MultiLayerNetwork, OutputLayer
from ndws.nn._layout import (WS_ALL_LAYERS_ACT, WS_INFERENCE, WS_LAYER_ACT,
                             WS_LAYER_WORKING_MEM, WS_OUTPUT_MEM, WS_SINGLE)
from ndws.nn.listeners import EvaluativeListener, TrainingListener

MODES = ["NONE", "SINGLE", "SEPARATE", "ENABLED"]
NETWORK_WORKSPACES = (WS_ALL_LAYERS_ACT, WS_INFERENCE, WS_LAYER_WORKING_MEM, WS_OUTPUT_MEM,
                      WS_SINGLE) + WS_LAYER_ACT


def open_network_workspaces():
    mgr = ndws.get_workspace_manager()
    return [n for n in NETWORK_WORKSPACES if mgr.check_if_workspace_exists_and_active(n)]


def problem():
    rng = np.random.default_rng(9)
    x = rng.normal(size=(200, 5)).astype(np.float32)
    y = np.eye(4, dtype=np.float32)[rng.integers(0, 4, 200)]
    return x, y


class Probe:
    """Wraps a source's batches: records the network's workspaces open at each pull."""

    def __init__(self, source):
        self.source = source
        self.open_at_pull = []

    def __iter__(self):
        for ds in self.source:
            self.open_at_pull.append(open_network_workspaces())
            yield ds


def _csv(tmp_path, x, y):
    path = tmp_path / "data.csv"
    rows = [",".join(f"{v:.9g}" for v in row) + f",{int(c)}" for row, c in zip(x, y.argmax(1))]
    path.write_text("\n".join(rows) + "\n")
    return RecordReaderDataSetIterator(CSVRecordReader(str(path)), 20, label_index=5,
                                       num_classes=4)


class Protocol:
    """A user's own iterator: only the protocol's methods."""

    def __init__(self, x, y):
        self.x, self.y, self.i = x, y, 0

    def has_next(self):
        return self.i < len(self.x)

    def next(self):
        s = self.i
        self.i += 20
        return DataSet(self.x[s:s + 20], self.y[s:s + 20])

    def reset(self):
        self.i = 0


def _datasets(x, y):
    return [DataSet(x[i:i + 20], y[i:i + 20]) for i in range(0, len(x), 20)]


# name -> (make(tmp_path) -> data, reusable: can be iterated again after reset)
SOURCES = {
    "ArrayDataSetIterator": (lambda t, x, y: ArrayDataSetIterator(x, y, 20), True),
    "ArrayDataSetIterator-shuffled": (
        lambda t, x, y: ArrayDataSetIterator(x, y, 20, shuffle=True, seed=3), True),
    "shard": (lambda t, x, y: ArrayDataSetIterator(x, y, 20).shard(1, 2), True),
    "ListDataSetIterator": (lambda t, x, y: ListDataSetIterator(_datasets(x, y)), True),
    "ExistingDataSetIterator": (
        lambda t, x, y: ExistingDataSetIterator(_datasets(x, y)), True),
    "RecordReaderDataSetIterator": (lambda t, x, y: _csv(t, x, y), True),
    "AsyncDataSetIterator": (
        lambda t, x, y: AsyncDataSetIterator(ArrayDataSetIterator(x, y, 20), queue_size=2),
        True),
    "AsyncShieldDataSetIterator": (
        lambda t, x, y: AsyncShieldDataSetIterator(ArrayDataSetIterator(x, y, 20)), True),
    "WorkspacesShieldDataSetIterator": (
        lambda t, x, y: WorkspacesShieldDataSetIterator(ArrayDataSetIterator(x, y, 20)), True),
    "protocol-object": (lambda t, x, y: as_data_set_iterator(Protocol(x, y)), True),
    "list": (lambda t, x, y: _datasets(x, y), True),
    "list-of-pairs": (lambda t, x, y: [(x[i:i + 20], y[i:i + 20]) for i in range(0, 200, 20)],
                      True),
    "list-class-indices": (lambda t, x, y: _datasets(x, y.argmax(1)), True),
    "generator": (lambda t, x, y: (ds for ds in _datasets(x, y)), False),
    "load_digits": (lambda t, x, y: load_digits(as_iterator=True, batch_size=300), True),
    "load_iris": (lambda t, x, y: load_iris(as_iterator=True, batch_size=40), True),
}


def make(name, tmp_path):
    x, y = problem()
    return SOURCES[name][0](tmp_path, x, y)


def batches_of(data):
    # the oracle's copy of every batch: (features, labels) as NumPy arrays
    out = []
    for item in data:                       # a fresh source: its first epoch, as fit sees it
        f, l = (item.features, item.labels) if isinstance(item, DataSet) else item
        out.append((np.array(f, dtype=np.float32), np.array(l)))
    return out


def network(width, classes, mode):
    conf = MultiLayerConfiguration(
        [DenseLayer(n_in=width, n_out=12, activation="tanh"),
         OutputLayer(n_out=classes, activation="softmax", loss_function="MCXENT")],
        seed=4, updater=Adam(1e-2), training_workspace_mode=mode, inference_workspace_mode=mode)
    net = MultiLayerNetwork(conf)
    net.init()
    return net


def oracle(net, batches, classes):
    # the same evaluations fed directly from output(), batch by batch
    ev, roc, reg = Evaluation(), ROCMultiClass(), RegressionEvaluation()
    for f, l in batches:
        if l.ndim == 1:
            l = np.eye(classes, dtype=np.float32)[l]
        p = net.output(f).numpy()
        for e in (ev, roc, reg):
            e.eval(l, p)
    return ev, roc, reg


def assert_same(got, want):
    ev, roc, reg = got
    ev0, roc0, reg0 = want
    np.testing.assert_array_equal(ev.get_confusion_matrix(), ev0.get_confusion_matrix())
    assert roc.calculate_average_auc() == roc0.calculate_average_auc()
    # (a shuffled source visits the rows in another order each epoch: sums round apart)
    np.testing.assert_allclose(
        [reg.mean_squared_error(c) for c in range(reg.num_columns())],
        [reg0.mean_squared_error(c) for c in range(reg0.num_columns())], rtol=1e-12)


def shape_of(name, tmp_path):
    data = make(name, tmp_path)
    b = batches_of(data)
    if isinstance(data, AsyncDataSetIterator):
        data.shutdown()
    width = b[0][0].shape[1]
    classes = b[0][1].shape[1] if b[0][1].ndim == 2 else 4
    return b, width, classes


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(SOURCES))
def test_do_evaluation_over_every_source(name, mode, tmp_path):
    batches, width, classes = shape_of(name, tmp_path)
    net = network(width, classes, mode)
    want = oracle(net, batches, classes)
    probe = Probe(make(name, tmp_path))
    got = net.do_evaluation(probe, Evaluation(), ROCMultiClass(), RegressionEvaluation())
    assert_same(got, want)
    assert len(probe.open_at_pull) == len(batches)
    assert probe.open_at_pull == [[]] * len(batches)       # every batch pulled with none open
    assert ndws.current_workspace() is None
    if SOURCES[name][1]:                                     # the helpers, on the same data
        data = make(name, tmp_path)
        assert_same((net.evaluate(data), net.evaluate_roc_multi_class(data),
                     net.evaluate_regression(data)), want)
    if isinstance(probe.source, AsyncDataSetIterator):
        probe.source.shutdown()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(SOURCES))
def test_evaluative_listener_over_every_source_during_fit(name, mode, tmp_path):
    # the issue's case: an EvaluativeListener made fit itself raise; fit's own data comes
    # through the async prefetch of an ArrayDataSetIterator
    batches, width, classes = shape_of(name, tmp_path)
    net = network(width, classes, mode)
    x = np.random.default_rng(1).normal(size=(60, width)).astype(np.float32)
    y = np.eye(classes, dtype=np.float32)[np.arange(60) % classes]
    reusable = SOURCES[name][1]
    probe = Probe(make(name, tmp_path))
    ev = Evaluation()
    listener = EvaluativeListener(probe, 1, ev,
                                  invocation="iteration_end" if reusable else "epoch_end")
    net.set_listeners(listener)
    net.fit(ArrayDataSetIterator(x, y, 20), epochs=1, progress=False)
    assert listener.last is ev
    want = oracle(net, batches, classes)[0]                  # the last run: the final network
    np.testing.assert_array_equal(ev.get_confusion_matrix(), want.get_confusion_matrix())
    assert len(probe.open_at_pull) == len(batches) * (3 if reusable else 1)
    assert all(opened == [] for opened in probe.open_at_pull)
    if isinstance(probe.source, AsyncDataSetIterator):
        probe.source.shutdown()


class WorkspaceWatch(TrainingListener):
    """Records the network's workspaces open when each hook runs."""

    def __init__(self):
        self.seen = []

    def _note(self, hook):
        self.seen.append((hook, open_network_workspaces()))

    def on_epoch_start(self, model):
        self._note("epoch_start")

    def on_epoch_end(self, model):
        self._note("epoch_end")

    def on_backward_pass(self, model):
        self._note("backward")

    def on_gradient_calculation(self, model):
        self._note("gradient")

    def iteration_done(self, model, iteration, epoch):
        self._note("iteration_done")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", [n for n in SOURCES if n != "list-of-pairs"])
def test_fit_over_every_source_pulls_and_calls_listeners_with_no_cycle_open(name, mode,
                                                                           tmp_path):
    batches, width, classes = shape_of(name, tmp_path)
    net = network(width, classes, mode)
    oracle_net = network(width, classes, mode)
    watch = WorkspaceWatch()
    net.set_listeners(watch)
    probe = Probe(make(name, tmp_path))
    net.fit(probe, progress=False)
    for f, l in batches:                                     # the same steps, batch by batch
        oracle_net.fit(DataSet(f, l))
    np.testing.assert_array_equal(net.params().numpy(), oracle_net.params().numpy())
    assert probe.open_at_pull == [[]] * len(batches)
    assert len(watch.seen) == 2 + 3 * len(batches)
    assert all(opened == [] for _, opened in watch.seen)
    if isinstance(probe.source, AsyncDataSetIterator):
        probe.source.shutdown()


def train_with(trainer, net, data):
    # fit through one of the trainers that take an EvaluativeListener
    if trainer == "mpi":
        pytest.importorskip("mpi4py")
        from mpi4py import MPI
        from ndws.parallel import MPITrainer
        with MPITrainer(net, MPI.COMM_SELF) as t:
            t.fit(data, progress=False)
        return
    from ndws.parallel import ParallelWrapper
    with ParallelWrapper(net, workers=2, training_mode=trainer) as pw:
        pw.fit(data, progress=False)


@pytest.mark.parametrize("trainer", ["AVERAGING", "SHARED_GRADIENTS", "mpi"])
@pytest.mark.parametrize("name", ["ArrayDataSetIterator", "RecordReaderDataSetIterator",
                                  "AsyncDataSetIterator", "generator", "list",
                                  "list-class-indices", "load_iris"])
def test_parallel_trainers_with_an_evaluative_listener(name, trainer, tmp_path):
    batches, width, classes = shape_of(name, tmp_path)
    net = network(width, classes, "ENABLED")
    ev = Evaluation()
    listener = EvaluativeListener(Probe(make(name, tmp_path)), 1, ev, invocation="epoch_end")
    net.set_listeners(listener)
    x = np.random.default_rng(1).normal(size=(64, width)).astype(np.float32)
    y = np.eye(classes, dtype=np.float32)[np.arange(64) % classes]
    data = Probe(ArrayDataSetIterator(x, y, 16))
    train_with(trainer, net, data)
    want = oracle(net, batches, classes)[0]
    np.testing.assert_array_equal(ev.get_confusion_matrix(), want.get_confusion_matrix())
    assert listener.iterator.open_at_pull == [[]] * len(batches)
    assert data.open_at_pull == [[]] * 4
    if isinstance(listener.iterator.source, AsyncDataSetIterator):
        listener.iterator.source.shutdown()


def test_the_issue_reproducer():
    rng = np.random.default_rng(9)
    x = rng.normal(size=(200, 5)).astype(np.float32)
    y = np.eye(4, dtype=np.float32)[rng.integers(0, 4, 200)]
    net = MultiLayerNetwork(MultiLayerConfiguration(layers=[
        DenseLayer(n_in=5, n_out=12, activation="tanh"),
        OutputLayer(n_out=4, activation="softmax", loss_function="MCXENT")], seed=4))
    net.init()
    ev = net.do_evaluation(ArrayDataSetIterator(x, y, batch_size=20), Evaluation(num_classes=4))
    predicted = net.output(x).numpy().argmax(1)
    assert ev.accuracy() == pytest.approx((predicted == y.argmax(1)).mean())
    assert ev.num_row_counter == 200


# -- what the evaluation entries accept: what fit accepts -----------------------------------

def trained_classifier():
    x, y = problem()
    net = network(5, 4, "ENABLED")
    net.fit(x, y, batch_size=50, epochs=3, progress=False)
    return net, x, y


def test_evaluate_takes_arrays_class_indices_a_dataset_an_iterator_and_a_list():
    net, x, y = trained_classifier()
    idx = y.argmax(1)
    want = oracle(net, [(x, y)], 4)
    cm = want[0].get_confusion_matrix()
    for got in (net.evaluate(x, y), net.evaluate(x, idx), net.evaluate(x, idx.astype(np.int32)),
                net.evaluate(x, y, batch_size=7), net.evaluate(x, labels=idx),
                net.evaluate(ndws.asarray(x), ndws.asarray(idx)),
                net.evaluate(DataSet(x, y)), net.evaluate(DataSet(x, idx)),
                net.evaluate(ArrayDataSetIterator(x, idx, 30)), net.evaluate(_datasets(x, idx)),
                net.evaluate([(x, idx)])):
        np.testing.assert_array_equal(got.get_confusion_matrix(), cm)
    ev, roc = net.do_evaluation(x, idx, Evaluation(), ROCMultiClass(), batch_size=64)
    np.testing.assert_array_equal(ev.get_confusion_matrix(), cm)
    assert roc.calculate_average_auc() == want[1].calculate_average_auc()
    ev = net.do_evaluation(x, Evaluation(), labels=y)
    np.testing.assert_array_equal(ev.get_confusion_matrix(), cm)
    assert net.evaluate_roc_multi_class(x, idx).calculate_average_auc() == \
        want[1].calculate_average_auc()
    reg = net.evaluate_regression(x, idx)
    assert reg.mean_squared_error(2) == want[2].mean_squared_error(2)
    # DL4J's evaluateROCMultiClass(iterator, steps): an int after the data is the steps
    steps = net.evaluate_roc_multi_class(ArrayDataSetIterator(x, y, 50), 8)
    assert steps.threshold_steps == 8
    assert ndws.current_workspace() is None


def test_regression_labels_of_one_column_may_be_1d(rng):
    conf = MultiLayerConfiguration([DenseLayer(n_in=3, n_out=6, activation="tanh"),
                                    OutputLayer(n_out=1, activation="identity",
                                                loss_function="MSE")], seed=2)
    net = MultiLayerNetwork(conf)
    net.init()
    x = rng.standard_normal((40, 3)).astype(np.float32)
    t = x.sum(axis=1)
    reg = net.evaluate_regression(x, t)
    pred = net.output(x).numpy()[:, 0]
    assert reg.mean_squared_error(0) == pytest.approx(((pred - t) ** 2).mean(), rel=1e-6)
    assert net.evaluate_regression(x, t[:, None]).mean_squared_error(0) == \
        reg.mean_squared_error(0)


@pytest.mark.parametrize("call, exc, msg", [
    (lambda n, x, y: n.evaluate(x), TypeError,
     r"^labels: features arrays need their labels \(e.g. evaluate\(X, y\) or "
     r"do_evaluation\(X, y, Evaluation\(\)\)\)$"),
    (lambda n, x, y: n.evaluate(x, y[:-1]), ValueError, r"^labels: 199 rows for 200 examples$"),
    (lambda n, x, y: n.evaluate(x, 3), ValueError, r"^labels: no rows for 200 examples$"),
    (lambda n, x, y: n.evaluate(x, np.full(200, 4)), ValueError,
     r"^labels\[0\] = 4 is not a class index in \[0, 4\) \(the predictions have 4 columns\)$"),
    (lambda n, x, y: n.evaluate(x, -y.argmax(1)), ValueError,
     r"^labels\[\d+\] = -\d is not a class index in \[0, 4\)"),
    (lambda n, x, y: n.evaluate(x, y, batch_size=0), ValueError,
     r"^batch_size: expected an int >= 1, got 0$"),
    (lambda n, x, y: n.evaluate(x, y, batch_size=True), ValueError,
     r"^batch_size: expected an int >= 1, got True$"),
    (lambda n, x, y: n.evaluate(x, y, batch_size=2.5), ValueError,
     r"^batch_size: expected an int >= 1, got 2.5$"),
    (lambda n, x, y: n.evaluate(_datasets(x, y), batch_size=4), ValueError,
     r"^batch_size: only with features and labels arrays"),
    (lambda n, x, y: n.evaluate(42), TypeError, r"^data: expected a DataSet, an iterable"),
    (lambda n, x, y: n.evaluate(DataSet(x, y), y), ValueError,
     r"^labels: only with features arrays \(the DataSet brings its own labels\)$"),
    (lambda n, x, y: n.evaluate(ArrayDataSetIterator(x, y, 20), y), ValueError,
     r"^labels: only with features arrays \(the ArrayDataSetIterator brings its own labels\)$"),
    (lambda n, x, y: n.fit(DataSet(x, y), y), ValueError,
     r"^labels: only with features arrays \(the DataSet brings its own labels\)$"),
    (lambda n, x, y: n.evaluate(x[:, :3], y), ValueError,
     r"^x: expected 5 features \(layers\[0\].n_in\), got 3$"),
    (lambda n, x, y: n.evaluate(x.astype(str), y), TypeError,
     r"^x: expected an array of numbers, got dtype <U"),
    (lambda n, x, y: n.do_evaluation(x, y), ValueError,
     r"^evaluate needs at least one evaluation$"),
    (lambda n, x, y: n.do_evaluation(_datasets(x, y), "accuracy"), TypeError,
     r"^evaluations must have an eval\(labels, predictions, mask\) method, got str$"),
    (lambda n, x, y: n.evaluate([(x, y[:, :3])]), ValueError,
     r"labels have 3 columns but this Evaluation has 4 classes|not same shape"),
    (lambda n, x, y: n.evaluate([DataSet(x[:20], y[:20]), 7]), TypeError,
     r"^batch 1 of the iterator must be a \(features, labels\) pair"),
])
def test_evaluation_refuses_bad_input_by_name(call, exc, msg):
    net, x, y = trained_classifier()
    with pytest.raises(exc, match=msg):
        call(net, x, y)
    assert ndws.current_workspace() is None
    assert open_network_workspaces() == []


def test_a_refused_batch_is_counted_by_no_evaluation_and_earlier_batches_stay():
    net, x, y = trained_classifier()
    ev, roc = Evaluation(), ROCMultiClass()
    idx = y.argmax(1)
    bad = idx[20:40].copy()
    bad[3] = 9
    with pytest.raises(ValueError, match=r"^labels\[3\] = 9 is not a class index"):
        net.do_evaluation([DataSet(x[:20], idx[:20]), DataSet(x[20:40], bad)], ev, roc)
    assert ev.num_row_counter == 20                     # the first batch, not the second
    np.testing.assert_array_equal(
        ev.get_confusion_matrix(), oracle(net, [(x[:20], y[:20])], 4)[0].get_confusion_matrix())


def test_zero_rows_and_empty_batches_count_nothing():
    # an evaluation accumulates: no examples (arrays of zero rows, an empty batch of a shard,
    # an empty iterator) add nothing, and the evaluation says so when asked
    net, x, y = trained_classifier()
    ev = net.evaluate(x[:0], y[:0])
    assert ev.num_row_counter == 0
    assert "No data" in ev.stats()
    assert net.evaluate([]).num_row_counter == 0
    ev = net.evaluate([DataSet(x[:20], y[:20]), DataSet(x[:0], y[:0]), DataSet(x[20:40],
                                                                               y[20:40])])
    np.testing.assert_array_equal(
        ev.get_confusion_matrix(), oracle(net, [(x[:40], y[:40])], 4)[0].get_confusion_matrix())


@pytest.mark.parametrize("mode", MODES)
def test_a_refused_batch_leaves_no_view_of_the_output_behind(mode):
    # the refusing evaluation's frames held NumPy views of the batch's output when its cycle
    # ended: the workspace warned and left its block to them (warnings are errors here)
    x, y = problem()
    net = network(5, 4, mode)
    x[3:7] = np.nan
    for _ in range(2):
        with pytest.raises(ValueError, match=r"^Cannot perform evaluation with NaNs present in "
                                             r"predictions: 16 NaNs"):
            net.do_evaluation(ArrayDataSetIterator(x, y, 20), Evaluation(), ROCMultiClass())
    assert ndws.current_workspace() is None and open_network_workspaces() == []
