"""TensorBoardListener: the event files read back with TensorBoard's own EventAccumulator
(skipped only when the ``tensorboard`` extra is not installed: the test extra installs it)."""
from __future__ import annotations

import os

import numpy as np
import pytest

import ndws
from ndws.nn import (Adam, DenseLayer, ExponentialSchedule, MultiLayerConfiguration,
                     MultiLayerNetwork, OutputLayer, ScheduleType, Sgd)
from ndws.nn.listeners import TensorBoardListener

pytest.importorskip("tensorboardX")
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def _read(log_dir):
    acc = event_accumulator.EventAccumulator(
        str(log_dir), size_guidance={event_accumulator.SCALARS: 0,
                                     event_accumulator.HISTOGRAMS: 0})
    acc.Reload()
    return acc


def _scalars(acc, tag):
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def _net(updater=None, mode="SEPARATE"):
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=4, n_out=8, activation="tanh"),
         OutputLayer(n_out=3, activation="softmax", updater=Sgd(0.05))],
        seed=3, updater=updater or Adam(1e-2), training_workspace_mode=mode))
    net.init()
    return net


def _data(rng, n=40):
    return rng.standard_normal((n, 4)).astype(np.float32), rng.integers(0, 3, n)


def test_scalars_workspaces_and_allocations(rng, tmp_path):
    x, y = _data(rng)
    net = _net()
    tb = TensorBoardListener(tmp_path / "run")
    net.set_listeners(tb)
    history = net.fit(x, y, batch_size=10, epochs=3, validation_data=(x, y), progress=False)
    tb.close()
    acc = _read(tmp_path / "run")
    scores = _scalars(acc, "score")
    assert [s for s, _ in scores] == history.iterations
    np.testing.assert_allclose([v for _, v in scores], history.scores, rtol=1e-6)
    # samples per second from the second iteration of each epoch
    assert [s for s, _ in _scalars(acc, "samples_per_second")] == [1, 2, 3, 5, 6, 7, 9, 10, 11]
    assert all(v > 0 for _, v in _scalars(acc, "samples_per_second"))
    # the learning rate: constant, so its first point and the epochs' last ones
    lr = _scalars(acc, "learning_rate")
    assert [v for _, v in lr] == pytest.approx([1e-2] * len(lr))
    assert lr[0][0] == 0 and lr[-1][0] == 11
    lr1 = [v for _, v in _scalars(acc, "learning_rate/layer1")]
    assert lr1 == pytest.approx([0.05] * len(lr1))
    # each workspace of the thread, as its statistics say at the end
    stats = ndws.get_workspace_manager().statistics()
    assert "WS_ALL_LAYERS_ACT" in stats
    for ws_id, s in stats.items():
        assert _scalars(acc, f"workspace/{ws_id}/size")[-1][1] == s["current_size"]
        assert _scalars(acc, f"workspace/{ws_id}/last_cycle")[-1][1] == \
            s["last_cycle_allocations"]
        assert _scalars(acc, f"workspace/{ws_id}/spilled")[-1][1] == s["spilled_size"]
    # a step function: the value before a change is repeated at the step before it
    size = _scalars(acc, "workspace/WS_ALL_LAYERS_ACT/size")
    for (s0, v0), (s1, v1) in zip(size, size[1:]):
        assert v0 == v1 or s1 == s0 + 1
    # heap allocations per iteration: none once the workspaces have learned their sizes
    allocs = _scalars(acc, "memory/heap_allocations")
    assert allocs[-1] == (11, 0.0)
    # the held-out score of each epoch at its last iteration
    val = _scalars(acc, "validation_score")
    assert [s for s, _ in val] == [3, 7, 11]
    np.testing.assert_allclose([v for _, v in val], history.validation_scores, rtol=1e-6)
    assert os.path.basename(tb.path).startswith("events.out.tfevents.")


def test_histograms_and_norms(rng, tmp_path):
    x, y = _data(rng)
    net = _net(updater=Sgd(0.1))
    tb = TensorBoardListener(tmp_path, frequency=2, histograms_every=4)
    net.set_listeners(tb)
    seen = {}

    class Keep(ndws.nn.listeners.TrainingListener):
        def on_gradient_calculation(self, model):
            if model.iteration == 4:
                seen["before"] = model.params().numpy()
                seen["grad"] = model.gradient().numpy()

        def iteration_done(self, model, iteration, epoch):
            if iteration == 4:
                seen["after"] = model.params().numpy()

    net.add_listeners(Keep())
    net.fit(x, y, batch_size=10, epochs=2, progress=False)
    tb.close()
    acc = _read(tmp_path)
    assert [s for s, _ in _scalars(acc, "score")] == [0, 2, 4, 6]
    tags = acc.Tags()["histograms"]
    assert sorted(tags) == sorted(f"{kind}/layer{i}_{p}" for kind in ("params", "gradients",
                                                                       "updates")
                                  for i in (0, 1) for p in ("W", "b"))
    assert [h.step for h in acc.Histograms("params/layer0_W")] == [0, 4]
    # the norms and histograms of step 4 against the arrays
    w0 = net.layers[0].params["W"].numpy()
    off, size = 0, w0.size
    update = (seen["after"] - seen["before"])[off:off + size]
    assert _scalars(acc, "update_norm/layer0_W")[-1][1] == pytest.approx(
        np.linalg.norm(update), rel=1e-5)
    np.testing.assert_allclose(update, -0.1 * seen["grad"][:size], rtol=1e-4, atol=1e-7)
    assert _scalars(acc, "param_norm/layer0_W")[-1][1] == pytest.approx(
        np.linalg.norm(seen["after"][:size]), rel=1e-5)
    assert _scalars(acc, "gradient_norm/layer0_W")[-1][1] == pytest.approx(
        np.linalg.norm(seen["grad"][:size]), rel=1e-5)
    h = acc.Histograms("params/layer0_W")[-1].histogram_value
    assert h.num == size and h.min == pytest.approx(seen["after"][:size].min())
    assert h.max == pytest.approx(seen["after"][:size].max())


def test_learning_rate_schedule_is_a_step_function(rng, tmp_path):
    x, y = _data(rng)
    net = _net(updater=Sgd(ExponentialSchedule(ScheduleType.ITERATION, 0.1, 0.5)))
    tb = TensorBoardListener(tmp_path)
    net.set_listeners(tb)
    net.fit(x, y, batch_size=10, epochs=1, progress=False)
    tb.close()
    lr = _scalars(_read(tmp_path), "learning_rate")
    assert [s for s, _ in lr] == [0, 1, 2, 3]
    np.testing.assert_allclose([v for _, v in lr], [0.1 * 0.5 ** i for i in range(4)],
                               rtol=1e-6)


def test_hostile_input(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(NotADirectoryError, match="TensorBoardListener.log_dir: .* exists and "
                                                 "is not a directory"):
        TensorBoardListener(f)
    with pytest.raises(ValueError, match="TensorBoardListener.frequency: expected an int > 0"):
        TensorBoardListener(tmp_path, frequency=0)
    with pytest.raises(ValueError, match="TensorBoardListener.histograms_every: expected an "
                                         "int > 0"):
        TensorBoardListener(tmp_path, histograms_every=-1)
    with pytest.raises(TypeError, match="TensorBoardListener.log_dir: expected a path"):
        TensorBoardListener(None)
    tb = TensorBoardListener(tmp_path / "x")
    tb.close()
    tb.close()                        # idempotent; nothing reported after it
    assert not (tmp_path / "missing").exists()
