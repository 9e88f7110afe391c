"""MultiLayerNetwork.predict (DL4J's class indices) and one example (n_features,) answered 1-d
by output, predict and feed_forward, as ndws.parallel.ParallelInference answers it."""
import numpy as np
import pytest

import ndws
from ndws.nn import DenseLayer, MultiLayerConfiguration, MultiLayerNetwork, OutputLayer
from ndws.parallel import ParallelInference

MODES = ["NONE", "SINGLE", "SEPARATE", "ENABLED"]


def classifier(mode="ENABLED", n_out=4, activation="softmax", loss="MCXENT"):
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=5, n_out=12, activation="tanh"),
         OutputLayer(n_out=n_out, activation=activation, loss_function=loss)],
        seed=4, inference_workspace_mode=mode, training_workspace_mode=mode))
    net.init()
    return net


@pytest.mark.parametrize("mode", MODES)
def test_predict_is_the_argmax_of_output(mode, rng):
    net = classifier(mode)
    x = rng.standard_normal((33, 5)).astype(np.float32)
    got = net.predict(x)
    assert isinstance(got, ndws.NDArray) and not got.is_attached()
    assert got.dtype == np.int64 and got.shape == (33,)
    np.testing.assert_array_equal(got.numpy(), net.output(x).numpy().argmax(axis=1))
    one = net.predict(x[5])
    assert isinstance(one, np.int64) and one == got.numpy()[5]
    assert net.predict(x[:0]).shape == (0,)
    assert ndws.current_workspace() is None


def test_predict_of_one_column_thresholds_at_one_half(rng):
    net = classifier(n_out=1, activation="sigmoid", loss="XENT")
    x = rng.standard_normal((50, 5)).astype(np.float32) * 3
    p = net.output(x).numpy()[:, 0]
    assert 0 < (p > 0.5).sum() < 50                        # both classes occur
    np.testing.assert_array_equal(net.predict(x).numpy(), (p > 0.5).astype(np.int64))


@pytest.mark.parametrize("call, exc, msg", [
    (lambda n: n.predict(np.full((3, 5), np.nan, np.float32)), ValueError,
     r"^predict: the output of row 0 holds NaN \(rows \[0, 1, 2\] of 3\): no class can be "
     r"chosen$"),
    (lambda n: n.predict(np.ones((2, 3, 5))), ValueError,
     r"^x: expected one example \(n_features,\) or a batch \(n_samples, n_features\), got "
     r"shape \(2, 3, 5\)$"),
    (lambda n: n.predict(np.float32(1.0)), ValueError, r"^x: expected one example"),
    (lambda n: n.predict(np.ones(4)), ValueError, r"^x: expected 5 features \(layers\[0\]"
                                                   r".n_in\), got 4$"),
    (lambda n: n.predict(np.ones((2, 6))), ValueError, r"^x: expected 5 features"),
    (lambda n: n.predict(["a"] * 5), TypeError, r"^x: expected an array of numbers, got dtype"),
    (lambda n: n.predict(None), TypeError, r"^x: expected an array of numbers"),
    (lambda n: n.output(np.ones(0)), ValueError, r"^x: expected 5 features"),
    (lambda n: n.feed_forward(np.ones((1, 1, 5))), ValueError, r"^x: expected one example"),
])
def test_bad_input_is_refused_by_name(call, exc, msg):
    net = classifier()
    with pytest.raises(exc, match=msg):
        call(net)
    assert ndws.current_workspace() is None


def test_a_row_with_nan_among_good_ones_names_the_rows(rng):
    net = classifier()
    x = rng.standard_normal((8, 5)).astype(np.float32)
    x[[2, 6], 1] = np.nan
    with pytest.raises(ValueError, match=r"^predict: the output of row 2 holds NaN \(rows "
                                         r"\[2, 6\] of 8\)"):
        net.predict(x)


@pytest.mark.parametrize("mode", MODES)
def test_one_example_is_answered_1d_by_output_and_feed_forward(mode, rng):
    net = classifier(mode)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    batch = net.output(x).numpy()
    for i in range(6):
        row = net.output(x[i])
        assert row.shape == (4,) and not row.is_attached()
        np.testing.assert_array_equal(row.numpy(), net.output(x[i:i + 1]).numpy()[0])
        np.testing.assert_allclose(row.numpy(), batch[i], rtol=1e-6)
    acts = net.feed_forward(x[1])
    assert [a.shape for a in acts] == [(5,), (12,), (4,)]
    np.testing.assert_array_equal(acts[-1].numpy(), net.output(x[1]).numpy())
    # as an NDArray, strided, of another dtype
    np.testing.assert_array_equal(net.output(ndws.asarray(x)[1]).numpy(),
                                  net.output(x[1]).numpy())
    wide = np.repeat(x[1], 2)[::2]
    np.testing.assert_array_equal(net.output(wide).numpy(), net.output(x[1]).numpy())
    np.testing.assert_array_equal(net.output(x[1].astype(np.float64)).numpy(),
                                  net.output(x[1]).numpy())


def test_one_example_into_an_output_workspace(rng):
    net = classifier()
    x = rng.standard_normal(5).astype(np.float32)
    with ndws.workspace("MINE") as ws:
        row = net.output(x, output_workspace=ws)
        assert row.shape == (4,) and row.workspace_id == "MINE"
        np.testing.assert_array_equal(row.numpy(), net.output(x).numpy())


@pytest.mark.parametrize("inference_mode", ["SEQUENTIAL", "BATCHED", "INPLACE"])
def test_output_and_parallel_inference_agree_on_one_example(inference_mode, rng):
    net = classifier()
    x = rng.standard_normal((4, 5)).astype(np.float32)
    with ParallelInference(net, inference_mode=inference_mode) as pi:
        for i in range(4):
            mine, theirs = net.output(x[i]), pi.output(x[i])
            assert mine.shape == theirs.shape == (4,)
            assert mine.is_attached() == theirs.is_attached() == False   # noqa: E712
            np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
        np.testing.assert_array_equal(net.output(x).numpy(), pi.output(x).numpy())
        # both refuse what is neither one example nor a batch, with the same words
        for bad in (np.ones((1, 1, 5)), np.ones(3)):
            with pytest.raises(ValueError) as mine:
                net.output(bad)
            with pytest.raises(ValueError) as theirs:
                pi.output(bad)
            assert str(mine.value).split(",")[0] == str(theirs.value).split(",")[0]
