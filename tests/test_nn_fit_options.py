"""MultiLayerNetwork.fit's options around the batches (ndws.nn._fit_options): ``shuffle=``
(a seeded order per epoch, reproducible and resumable) and ``validation_data=`` (held-out data
scored after each epoch), each against a hand-made oracle, and their hostile arguments."""
import numpy as np
import pytest

import ndws
from ndws.data import ArrayDataSetIterator, ExistingDataSetIterator
from ndws.data.dataset import DataSet
from ndws.nn import Adam, DenseLayer, MultiLayerConfiguration, MultiLayerNetwork, OutputLayer
from ndws.nn._fit_options import shuffled


def network(seed=3, dropout=None, output="softmax", loss="MCXENT", n_out=3):
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=6, n_out=10, activation="relu", dropout=dropout),
         OutputLayer(n_out=n_out, activation=output, loss_function=loss)],
        seed=seed, updater=Adam(1e-2)))
    net.init()
    return net


@pytest.fixture
def data(rng):
    x = rng.standard_normal((50, 6)).astype(np.float32)
    y = rng.integers(0, 3, 50)
    return x, y


def params(net):
    return net.params().numpy()


# -- shuffle -----------------------------------------------------------------------------------

def test_shuffle_visits_the_seeded_order_of_each_epoch(data):
    x, y = data
    shuffled_net = network()
    shuffled_net.fit(x, y, batch_size=8, epochs=3, shuffle=True)
    oracle = network()
    for epoch in range(3):                   # the order: (seed, 2, epoch), the batches in it
        order = np.random.default_rng([3, 2, epoch]).permutation(50)
        oracle.fit([DataSet(x[order][s:s + 8], y[order][s:s + 8]) for s in range(0, 50, 8)])
    np.testing.assert_array_equal(params(shuffled_net), params(oracle))
    plain = network()
    plain.fit(x, y, batch_size=8, epochs=3)
    assert not np.array_equal(params(plain), params(shuffled_net))
    seeded = network()
    seeded.fit(x, y, batch_size=8, epochs=1, shuffle=True, seed=np.int64(11))
    order = np.random.default_rng([11, 2, 0]).permutation(50)
    by_hand = network()
    by_hand.fit(x[order], y[order], batch_size=8)
    np.testing.assert_array_equal(params(seeded), params(by_hand))


def test_a_shuffled_run_resumes_exactly(data, tmp_path):
    x, y = data
    straight = network(dropout=0.8)
    straight.fit(x, y, batch_size=8, epochs=2, shuffle=True)
    first = network(dropout=0.8)
    first.fit(x, y, batch_size=8, shuffle=True)
    first.save(tmp_path / "half.zip")
    resumed = MultiLayerNetwork.load(tmp_path / "half.zip")
    resumed.fit(x, y, batch_size=8, shuffle=True)           # epoch 1's order, not epoch 0's
    np.testing.assert_array_equal(params(resumed), params(straight))


def test_shuffled_keeps_rows_and_labels_together(data):
    x, y = data
    sx, sy = shuffled(ndws.asarray(x), ndws.asarray(y), 5, 2)
    order = np.random.default_rng([5, 2, 2]).permutation(50)
    np.testing.assert_array_equal(sx.numpy(), x[order])
    np.testing.assert_array_equal(sy.numpy(), y[order])
    assert not sx.is_attached()


@pytest.mark.parametrize("kwargs, exc, msg", [
    (dict(shuffle=1), TypeError, r"^shuffle: expected True or False, got 1$"),
    (dict(shuffle="yes"), TypeError, r"^shuffle: expected True or False, got 'yes'$"),
    (dict(seed=4), ValueError, r"^seed: only with shuffle=True \(it seeds the order of the "
                               r"rows\)$"),
    (dict(shuffle=True, seed=-1), ValueError, r"^seed: expected an int in \[0, 2\*\*63\), "
                                              r"got -1$"),
    (dict(shuffle=True, seed=True), ValueError, r"^seed: expected an int in"),
    (dict(shuffle=True, seed=2**63), ValueError, r"^seed: expected an int in"),
    (dict(shuffle=True, seed=1.5), ValueError, r"^seed: expected an int in"),
    (dict(epochs=True), ValueError, r"^epochs: expected an int >= 1, got True$"),
    (dict(epochs=np.int64(0)), ValueError, r"^epochs: expected an int >= 1, got np.int64\(0\)$"),
    (dict(epochs=2.0), ValueError, r"^epochs: expected an int >= 1, got 2.0$"),
    (dict(batch_size=np.bool_(True)), ValueError, r"^batch_size: expected an int >= 1, got "),
    (dict(batch_size=0), ValueError, r"^batch_size: expected an int >= 1, got 0$"),
])
def test_bad_fit_arguments_are_refused_before_anything_trains(data, kwargs, exc, msg):
    x, y = data
    net = network()
    before = params(net)
    with pytest.raises(exc, match=msg):
        net.fit(x, y, **kwargs)
    assert net.iteration == 0 and net.epoch == 0
    np.testing.assert_array_equal(params(net), before)


def test_shuffle_and_batch_size_need_arrays(data):
    x, y = data
    net = network()
    onehot = np.eye(3, dtype=np.float32)[y]
    with pytest.raises(ValueError, match=r"^shuffle: only with features and labels arrays \(a "
                                         r"DataSet or an iterator brings its own order, e.g. "
                                         r"ArrayDataSetIterator\(..., shuffle=True, seed=...\)\)$"):
        net.fit(DataSet(x, onehot), shuffle=True)
    with pytest.raises(ValueError, match=r"^batch_size: only with features and labels arrays"):
        net.fit(DataSet(x, onehot), batch_size=8)
    with pytest.raises(ValueError, match=r"^labels: 49 rows for 50 examples$"):
        net.fit(x, y[:49], shuffle=True)
    with pytest.raises(TypeError, match=r"^labels: expected an array of numbers, got dtype <U"):
        net.fit(x, y.astype(str))
    with pytest.raises(TypeError, match=r"^labels: expected an array of numbers, got dtype "
                                        r"object$"):
        net.fit(x, [object()] * 50)
    assert net.iteration == 0


def test_numpy_integers_train_as_ints(data):
    x, y = data
    a, b = network(), network()
    a.fit(x, y, batch_size=8, epochs=2)
    b.fit(x, y, batch_size=np.int64(8), epochs=np.uint16(2))
    np.testing.assert_array_equal(params(a), params(b))
    assert a.memory_report(32).total_bytes(ndws.WorkspaceMode.SEPARATE) == \
        b.memory_report(np.int32(32)).total_bytes(ndws.WorkspaceMode.SEPARATE)
    assert b.memory_report(np.int64(32)).batch_size == 32
    with pytest.raises(ValueError, match=r"^batch_size: expected an int >= 1, got True$"):
        b.memory_report(True)
    b.iteration, b.epoch = np.int64(3), np.int8(1)
    assert (type(b.iteration), b.iteration, b.epoch) == (int, 3, 1)


# -- validation_data ---------------------------------------------------------------------------

def test_validation_scores_and_accuracy_match_the_network_after_each_epoch(rng, data):
    x, y = data
    xv = rng.standard_normal((20, 6)).astype(np.float32)
    yv = rng.integers(0, 3, 20)
    onehot = np.eye(3, dtype=np.float32)[yv]
    net = network()
    seen = []
    for _ in range(2):          # the oracle: score and output of the network as it stands
        history = net.fit(x, y, batch_size=10, validation_data=(xv, yv))
        seen.append((net.score(DataSet(xv, onehot)),
                     float((net.output(xv).numpy().argmax(1) == yv).mean())))
        assert history.validation_scores == pytest.approx([seen[-1][0]], rel=1e-6)
        assert history.validation_accuracy == [seen[-1][1]]
    both = network()
    history = both.fit(x, y, batch_size=10, epochs=2, validation_data=(xv, onehot))
    assert history.validation_scores == pytest.approx([s for s, _ in seen], rel=1e-6)
    assert history.validation_accuracy == [a for _, a in seen]


@pytest.mark.parametrize("form", ["arrays", "dataset", "list", "iterator", "ndarrays"])
def test_every_form_of_validation_data_scores_alike(rng, data, form):
    x, y = data
    xv = rng.standard_normal((30, 6)).astype(np.float32)
    yv = rng.integers(0, 3, 30)
    onehot = np.eye(3, dtype=np.float32)[yv]
    given = {"arrays": (xv, yv), "dataset": DataSet(xv, onehot),
             "list": [DataSet(xv[:16], onehot[:16]), DataSet(xv[16:], onehot[16:])],
             "iterator": ArrayDataSetIterator(xv, yv, 7),
             "ndarrays": (ndws.asarray(xv), ndws.asarray(onehot))}[form]
    reference = network().fit(x, y, batch_size=10, epochs=3, validation_data=(xv, yv))
    history = network().fit(x, y, batch_size=10, epochs=3, validation_data=given)
    assert history.validation_scores == pytest.approx(reference.validation_scores, rel=1e-5)
    assert history.validation_accuracy == reference.validation_accuracy


def test_a_large_held_out_set_is_scored_in_chunks_as_one(rng, data):
    x, y = data
    xv = rng.standard_normal((2500, 6)).astype(np.float32)        # chunks of 1024, 1024, 452
    yv = rng.integers(0, 3, 2500)
    net = network()
    history = net.fit(x, y, batch_size=10, validation_data=(xv, yv))
    whole = net.score(DataSet(xv, np.eye(3, dtype=np.float32)[yv]))
    assert history.validation_scores[0] == pytest.approx(whole, rel=1e-5)


def test_validation_does_not_change_training(data):
    x, y = data
    a, b = network(dropout=0.7), network(dropout=0.7)
    a.fit(x, y, batch_size=8, epochs=3)
    b.fit(x, y, batch_size=8, epochs=3, validation_data=(x[:10], y[:10]))
    np.testing.assert_array_equal(params(a), params(b))


def test_a_regression_output_records_no_accuracy(rng):
    net = network(output="identity", loss="MSE", n_out=1)
    x = rng.standard_normal((20, 6)).astype(np.float32)
    t = x[:, :1] * 2
    history = net.fit(x, t, batch_size=5, epochs=2, validation_data=(x, t))
    assert len(history.validation_scores) == 2 and history.validation_accuracy == []
    assert history.validation_scores[-1] == pytest.approx(net.score(DataSet(x, t)), rel=1e-6)


def test_masked_rows_are_left_out_of_the_accuracy(rng, data):
    x, y = data
    onehot = np.eye(3, dtype=np.float32)[y[:10]]
    mask = np.array([[1], [1], [1], [1], [1], [0], [0], [0], [0], [0]], dtype=np.float32)
    net = network()
    history = net.fit(x, y, batch_size=10,
                      validation_data=DataSet(x[:10], onehot, labels_mask=mask))
    right = net.output(x[:5]).numpy().argmax(1) == y[:5]
    assert history.validation_accuracy == [float(right.mean())]


@pytest.mark.parametrize("given, exc, msg", [
    (lambda x, y: (d for d in [DataSet(x, np.eye(3, dtype=np.float32)[y])]), TypeError,
     r"^validation_data: a generator can be read only once, but the held-out data is scored "
     r"after every epoch: pass a list of DataSets, \(features, labels\) arrays or a "
     r"DataSetIterator$"),
    (lambda x, y: ExistingDataSetIterator(d for d in []), TypeError,
     r"^validation_data: a ExistingDataSetIterator can be read only once"),
    (lambda x, y: (x[:, :5], y), ValueError,
     r"^validation_data\[0\]: expected 6 features \(layers\[0\].n_in\), got 5$"),
    (lambda x, y: (x, y[:9]), ValueError,
     r"^validation_data: labels of shape \(9,\) for 50 examples$"),
    (lambda x, y: (x[:0], y[:0]), ValueError, r"^validation_data: no examples$"),
    (lambda x, y: (x, y.astype(str)), TypeError,
     r"^validation_data\[1\]: expected an array of numbers, got dtype <U"),
    (lambda x, y: (x.astype(str), y), TypeError,
     r"^validation_data\[0\]: expected an array of numbers, got dtype <U"),
    (lambda x, y: 7, TypeError, r"^validation_data: expected \(features, labels\) arrays, a "
                                r"DataSet or an iterable of DataSets, got int$"),
    (lambda x, y: "data.csv", TypeError, r"^validation_data: expected \(features, labels\)"),
    (lambda x, y: [DataSet(x, np.eye(3, dtype=np.float32)[y]), (x, y)], TypeError,
     r"^validation_data: item 1 is a tuple, not a DataSet$"),
    (lambda x, y: [], ValueError, r"^validation_data: no examples$"),
])
def test_bad_validation_data_is_refused_before_anything_trains(data, given, exc, msg):
    x, y = data
    net = network()
    with pytest.raises(exc, match=msg):
        net.fit(x, y, batch_size=10, validation_data=given(x, y))
    assert net.iteration == 0 and net.history is None
