"""ndws.nn.history: the History fit returns, its plot, and the epoch frame every trainer shares
(one progress bar over the whole fit, numbered from 1; a warning when the score stops being
finite)."""
import sys
import types
import warnings

import numpy as np
import pytest
import tqdm
import tqdm.auto as tqdm_auto

import ndws
from ndws.data.dataset import DataSet
from ndws.nn import (Adam, DenseLayer, MultiLayerConfiguration, MultiLayerNetwork, OutputLayer,
                     Sgd)
from ndws.nn.history import History, _interactive
from ndws.nn.listeners import TrainingListener
from ndws.parallel import ParallelWrapper


def network(seed=5, output="softmax", loss="MCXENT", n_out=3, updater=None, hidden="tanh"):
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=6, n_out=8, activation=hidden),
         OutputLayer(n_out=n_out, activation=output, loss_function=loss)],
        seed=seed, updater=updater or Adam(1e-2)))
    net.init()
    return net


def batches(rng, n=4, rows=10):
    return [DataSet(rng.standard_normal((rows, 6)).astype(np.float32),
                    np.eye(3, dtype=np.float32)[rng.integers(0, 3, rows)]) for _ in range(n)]


def open_bars():
    return [b for b in list(tqdm.tqdm._instances) if not b.disable]


# -- the progress bar --------------------------------------------------------------------------

def test_one_bar_over_the_whole_fit_numbered_from_1(rng, capsys):
    net, data = network(), batches(rng)
    net.fit(data, epochs=3, progress=True)
    err = capsys.readouterr().err
    assert "epoch 1/3:" in err and "epoch 2/3:" in err and "epoch 0" not in err
    assert "epoch 3/3: 100%" in err and "| 12/12 [" in err        # 4 batches x 3 epochs
    assert err.endswith("\n") and open_bars() == []                 # left on screen, closed
    net.fit(data, epochs=2, progress=True)                          # the counters go on
    err = capsys.readouterr().err
    assert "epoch 4/5:" in err and "epoch 5/5: 100%" in err and "| 8/8 [" in err
    net.fit(data, progress=True)                                    # one epoch: no "/N"
    err = capsys.readouterr().err
    assert "epoch 6: 100%" in err and "/6" not in err


def test_the_bar_of_an_iterator_of_unknown_length_and_of_parallel_wrapper(rng, capsys):
    net, data = network(), batches(rng)
    net.fit((ds for ds in data), progress=True)
    assert "epoch 1: 4batch [" in capsys.readouterr().err
    x = rng.standard_normal((32, 6)).astype(np.float32)
    y = rng.integers(0, 3, 32)
    with ParallelWrapper(network(), workers=2) as pw:
        pw.fit(x, y, batch_size=8, epochs=2, progress=True)       # 2 rounds of 2 batches
    err = capsys.readouterr().err
    assert "epoch 1/2:" in err and "epoch 2/2: 100%" in err and "| 4/4 [" in err
    assert open_bars() == []


def test_a_fit_that_raises_closes_its_bar(rng, capsys):
    net, data = network(), batches(rng)

    class Boom(TrainingListener):
        def iteration_done(self, model, iteration, epoch):
            if iteration == 5:
                raise KeyError("stop here")

    net.set_listeners(Boom())
    with pytest.raises(KeyError, match="stop here"):
        net.fit(data, epochs=3, progress=True)
    assert open_bars() == []
    assert "epoch 2/3:" in capsys.readouterr().err


def test_a_bar_left_open_by_a_stopped_fit_is_closed_by_the_next(rng, capsys):
    x = rng.standard_normal((32, 6)).astype(np.float32)
    y = rng.integers(0, 3, 32)
    with ParallelWrapper(network(), workers=2) as pw:

        class Stop(TrainingListener):
            def on_epoch_end(self, model):
                pw.stop_fit()                    # after the first of three epochs

        pw.set_listeners(Stop())
        history = pw.fit(x, y, batch_size=8, epochs=3, progress=True)
    assert history.epochs == [0]
    net = network()
    net.fit(x, y, batch_size=8, progress=True)
    assert open_bars() == []


def test_notebooks_get_a_bar_from_tqdm_auto(rng, monkeypatch):
    made = []

    class Recorded(tqdm.tqdm):
        def __init__(self, *args, **kwargs):
            made.append(kwargs.get("desc"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(tqdm_auto, "tqdm", Recorded)
    assert not _interactive()                             # pytest: no terminal, no kernel
    net, data = network(), batches(rng)
    net.fit(data)
    assert made == []
    kernel = types.SimpleNamespace(config={"IPKernelApp": {"connection_file": "k.json"}})
    monkeypatch.setitem(sys.modules, "IPython",
                        types.SimpleNamespace(get_ipython=lambda: kernel))
    assert _interactive()
    net.fit(data, epochs=2)                               # progress=None: shown in a notebook
    assert made == ["epoch 2/3"]
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: None))
    assert not _interactive()                             # IPython in a terminal shell


# -- listeners see the History -----------------------------------------------------------------

def test_listeners_read_the_running_history(rng):
    net, data = network(), batches(rng)
    seen = []

    class Look(TrainingListener):
        def on_epoch_end(self, model):
            h = model.history
            seen.append((model.epoch, len(h.epoch_scores), h.validation_scores[-1]))

    net.set_listeners(Look())
    history = net.fit(data, epochs=2, validation_data=data[:1])
    assert net.history is history
    assert seen == [(1, 1, history.validation_scores[0]), (2, 2, history.validation_scores[1])]


# -- a score that is not finite ----------------------------------------------------------------

def test_a_nan_row_warns_once_naming_the_iteration(rng):
    net, data = network(), batches(rng)
    bad = data[1].features.numpy()
    bad[3, 2] = np.nan
    data[1] = DataSet(bad, data[1].labels)
    with pytest.warns(RuntimeWarning) as record:
        history = net.fit(data, epochs=2)
    assert len(record) == 1                               # once, though every later one is NaN
    message = str(record[0].message)
    assert message.startswith("fit: the score is nan at iteration 1 (epoch 0): training has "
                              "diverged or the batch holds NaN or infinite values")
    assert "np.isfinite(x).all()" in message and "docs/networks.md" in message
    assert record[0].filename == __file__                 # points at the user's fit call
    assert np.isnan(history.scores[1:]).all() and np.isnan(net.params().numpy()).all()


def test_an_infinite_score_warns_too(rng):
    net = network(output="identity", loss="MSE", n_out=1, updater=Sgd(1e-3), hidden="identity")
    x = np.full((4, 6), 1e30, dtype=np.float32)
    with pytest.warns(RuntimeWarning, match=r"^fit: the score is inf at iteration 0 \(epoch 0\)"):
        net.fit(x, np.zeros((4, 1), np.float32))


def test_the_warning_comes_from_every_trainer(rng):
    x = rng.standard_normal((32, 6)).astype(np.float32)
    x[20] = np.inf
    y = rng.integers(0, 3, 32)
    with ParallelWrapper(network(), workers=2) as pw:
        with pytest.warns(RuntimeWarning, match=r"^fit: the score is nan at iteration 1 "):
            pw.fit(x, y, batch_size=8)
    pytest.importorskip("mpi4py")
    from mpi4py import MPI
    from ndws.parallel import MPITrainer
    with MPITrainer(network(), MPI.COMM_SELF) as trainer:
        with pytest.warns(RuntimeWarning, match=r"^fit: the score is nan at iteration 2 "):
            trainer.fit(x, y, batch_size=8)


def test_finite_scores_do_not_warn(rng):
    net, data = network(), batches(rng)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        net.fit(data, epochs=2)


# -- History -----------------------------------------------------------------------------------

def test_history_records_and_plots_the_validation(rng):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    net, data = network(), batches(rng)
    history = net.fit(data, epochs=3, validation_data=data[:2])
    assert len(history.validation_scores) == len(history.validation_accuracy) == 3
    assert repr(history).endswith(f"validation score {history.validation_scores[-1]:.6g}>")
    ax = history.plot()
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"iteration score", "epoch mean", "validation score"}
    held = lines["validation score"]
    assert list(held.get_xdata()) == [3, 7, 11]           # each epoch's last iteration
    np.testing.assert_allclose(held.get_ydata(), history.validation_scores)
    plt.close(ax.figure)
    bare = History()
    assert bare.validation_scores == [] and repr(bare) == "<History 0 epochs, 0 iterations>"
    ndws.destroy_all_workspaces_for_current_thread()
