"""Zero rows: training and scoring refuse "no examples" before any counter, score, parameter or
hook moves; inference answers zero rows with zero rows; evaluation counts nothing
(docs/networks.md, "No examples")."""
import numpy as np
import pytest

import ndws
from ndws.data import ArrayDataSetIterator
from ndws.data.dataset import DataSet
from ndws.nn import (DenseLayer, MultiLayerConfiguration, MultiLayerNetwork, Nesterovs,
                     OutputLayer)
from ndws.nn.listeners import TrainingListener

MODES = ["NONE", "SINGLE", "SEPARATE", "ENABLED"]


class Hooks(TrainingListener):
    def __init__(self):
        self.calls = []

    def on_epoch_start(self, model):
        self.calls.append("on_epoch_start")

    def iteration_done(self, model, iteration, epoch):
        self.calls.append("iteration_done")


def network(mode="ENABLED", dense=DenseLayer):
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [dense(n_in=6, n_out=8, activation="relu"),
         OutputLayer(n_out=3, activation="softmax")],
        seed=2, updater=Nesterovs(0.1), training_workspace_mode=mode))
    net.init()
    return net


class PlainDense(DenseLayer):
    """Not covered by the compiled iteration: the general path."""


def state(net):
    return (net.params().numpy(), net._updater_state_flat(), net.iteration, net.epoch,
            net.score(), net.gradient().numpy())


def assert_unchanged(net, before):
    after = state(net)
    for a, b in zip(after, before):
        np.testing.assert_array_equal(a, b)


EMPTY_X = np.zeros((0, 6), np.float32)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dense", [DenseLayer, PlainDense], ids=["compiled", "general"])
@pytest.mark.parametrize("call, msg", [
    (lambda n: n.fit(EMPTY_X, np.zeros(0, np.int64)), r"^fit: no examples \(data has 0 rows\)$"),
    (lambda n: n.fit(EMPTY_X, np.zeros((0, 3), np.float32), batch_size=4),
     r"^fit: no examples \(data has 0 rows\)$"),
    (lambda n: n.fit(ndws.asarray(EMPTY_X), ndws.zeros((0, 3))),
     r"^fit: no examples \(data has 0 rows\)$"),
    (lambda n: n.fit(EMPTY_X.tolist(), []), r"^fit: no examples \(data has 0 rows\)$"),
    (lambda n: n.fit(DataSet(EMPTY_X, np.zeros(0, np.int64))),
     r"^fit: no examples \(the DataSet has 0 rows\)$"),
    (lambda n: n.fit(DataSet(EMPTY_X, np.zeros((0, 3), np.float32)), epochs=3),
     r"^fit: no examples \(the DataSet has 0 rows\)$"),
    (lambda n: n.score(DataSet(EMPTY_X, np.zeros((0, 3), np.float32))),
     r"^score: no examples \(the DataSet has 0 rows\)$"),
    (lambda n: n.compute_gradient_and_score(DataSet(EMPTY_X, np.zeros(0, np.int64))),
     r"^compute_gradient_and_score: no examples \(the DataSet has 0 rows\)$"),
    (lambda n: n.fit([DataSet(EMPTY_X, np.zeros(0, np.int64))]),
     r"^fit: no examples in the batch of iteration 0 \(0 rows\)$"),
])
def test_no_examples_is_refused_before_anything_moves(call, msg, dense, mode):
    net = network(mode, dense)
    hooks = Hooks()
    net.set_listeners(hooks)
    before = state(net)
    with pytest.raises(ValueError, match=msg):
        call(net)
    assert_unchanged(net, before)
    if "batch of iteration" not in msg:
        assert hooks.calls == []                 # not even on_epoch_start
    assert ndws.current_workspace() is None


def test_an_empty_batch_mid_epoch_stops_the_fit_where_it_is(rng):
    # decided: an empty batch is refused like an empty DataSet (a batching mistake, usually),
    # after the batches before it were trained on, as any bad batch; nothing of its own moves
    net = network()
    x = rng.standard_normal((16, 6)).astype(np.float32)
    y = rng.integers(0, 3, 16)
    batches = [DataSet(x[:8], y[:8]), DataSet(x[8:8], y[8:8]), DataSet(x[8:], y[8:])]
    with pytest.raises(ValueError, match=r"^fit: no examples in the batch of iteration 1 "
                                         r"\(0 rows\)$"):
        net.fit(batches)
    oracle = network()
    oracle.fit(batches[0])
    np.testing.assert_array_equal(net.params().numpy(), oracle.params().numpy())
    assert net.iteration == 1 and net.epoch == 0


def test_inference_answers_zero_rows_with_zero_rows():
    net = network()
    assert net.output(EMPTY_X).shape == (0, 3)
    assert net.predict(EMPTY_X).shape == (0,)
    assert [a.shape for a in net.feed_forward(EMPTY_X)] == [(0, 6), (0, 8), (0, 3)]
    per = net.score_examples(DataSet(EMPTY_X, np.zeros((0, 3), np.float32)))
    assert per.shape == (0,)
    ev = net.evaluate(EMPTY_X, np.zeros(0, np.int64))
    assert ev.num_row_counter == 0


def test_a_shard_with_an_empty_last_batch(rng):
    # a short last global batch gives later ranks' shards an empty batch: MPITrainer steps
    # over it with the other ranks; a plain fit over such a shard refuses it by iteration
    x = rng.standard_normal((10, 6)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[np.arange(10) % 3]
    shard = ArrayDataSetIterator(x, y, batch_size=2).shard(3, 4)
    net = network()
    with pytest.raises(ValueError, match=r"^fit: no examples in the batch of iteration 1"):
        net.fit(shard)
    assert net.evaluate(ArrayDataSetIterator(x, y, batch_size=2).shard(3, 4)).num_row_counter \
        == 2
