"""ParallelWrapper: data-parallel training on worker threads (docs/parallel.md). Values against
single-network training as the oracle; interleavings arranged with Events, never timing."""
from __future__ import annotations

import logging
import threading

import numpy as np
import pytest

import ndws
from ndws.data.dataset import DataSet
from ndws.data.iterators import ArrayDataSetIterator
from ndws.nn import (Adam, ArrayType, BatchNormalization, DenseLayer, Layer,
                     MultiLayerConfiguration, MultiLayerNetwork, OutputLayer, Sgd)
from ndws.nn.listeners import (CheckpointListener, CollectScoresListener, PerformanceListener,
                               TrainingListener)
from ndws.parallel import ParallelWrapper, TrainingMode

from busy_helpers import WAIT, Hold, clone_during, start


def make_net(updater=None, seed=1, **conf):
    layers = conf.pop("layers", None) or [
        DenseLayer(n_in=6, n_out=16, activation="tanh"),
        OutputLayer(n_out=3, activation="softmax", loss_function="MCXENT")]
    net = MultiLayerNetwork(MultiLayerConfiguration(layers, seed=seed,
                                                    updater=updater or Sgd(0.1), **conf))
    net.init()
    return net


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    x = rng.random((64, 6), dtype=np.float32)
    y = rng.integers(0, 3, 64)
    return x, y


def workers_alive():
    return [t.name for t in threading.enumerate() if t.name.startswith("ParallelWrapper-")]


class Recorder(TrainingListener):
    """What each worker thread saw, per call."""

    def __init__(self):
        self.calls = []
        self.lock = threading.Lock()

    def iteration_done(self, model, iteration, epoch):
        with self.lock:
            self.calls.append((threading.current_thread().name, model, iteration, epoch,
                               ndws.get_num_threads(),
                               ndws.get_workspace_manager()
                               .get_all_workspaces_for_current_thread()))


# -- SHARED_GRADIENTS: exactly one network on the concatenated batches -------------------------

@pytest.mark.parametrize("updater", [Sgd(0.1), Adam(1e-2)], ids=["sgd", "adam"])
@pytest.mark.parametrize("extra", [{}, {"l2": 1e-3, "weight_decay": 1e-2}], ids=["plain", "reg"])
def test_shared_gradients_on_b_rows_each_trains_like_one_network_on_2b(data, updater, extra):
    x, y = data
    pw_net, one = make_net(updater, **extra), make_net(updater, **extra)
    with ParallelWrapper(pw_net, workers=2, training_mode="SHARED_GRADIENTS") as pw:
        history = pw.fit(x, y, batch_size=8, epochs=2, progress=False)
    one.fit(x, y, batch_size=16, epochs=2, progress=False)
    np.testing.assert_allclose(pw_net.params().numpy(), one.params().numpy(), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(pw_net._updater_state_flat(), one._updater_state_flat(),
                               rtol=1e-4, atol=1e-7)
    assert (pw_net.iteration, pw_net.epoch) == (one.iteration, one.epoch) == (8, 2)
    assert history.iterations == list(range(8))
    np.testing.assert_allclose(pw_net.score(), one.score(), rtol=1e-5)
    assert workers_alive() == []


def test_shared_gradients_weights_a_partial_last_round_by_rows(data):
    # 40 rows in batches of 16: rounds (16, 16) and (8, idle) = one network on 32 then 8 rows
    x, y = data[0][:40], data[1][:40]
    pw_net, one = make_net(), make_net()
    with ParallelWrapper(pw_net, workers=2, training_mode=TrainingMode.SHARED_GRADIENTS) as pw:
        history = pw.fit(x, y, batch_size=16, progress=False)
    for lo, hi in ((0, 32), (32, 40)):
        one.fit(x[lo:hi], y[lo:hi], progress=False)
    np.testing.assert_allclose(pw_net.params().numpy(), one.params().numpy(), rtol=1e-5,
                               atol=1e-6)
    assert history.iterations == [0, 1] and pw_net.last_batch_size == 8


def test_three_workers_share_one_parameter_set(data):
    x, y = data[0][:48], data[1][:48]
    pw_net, one = make_net(), make_net()
    with ParallelWrapper(pw_net, workers=3, training_mode="shared_gradients") as pw:
        pw.fit(x, y, batch_size=8, progress=False)
    one.fit(x, y, batch_size=24, progress=False)
    np.testing.assert_allclose(pw_net.params().numpy(), one.params().numpy(), rtol=1e-5,
                               atol=1e-6)


def test_shared_gradients_averages_running_statistics_each_round(data):
    x, y = data
    layers = [DenseLayer(n_in=6, n_out=8, activation="relu"), BatchNormalization(),
              OutputLayer(n_out=3, activation="softmax", loss_function="MCXENT")]
    net = make_net(layers=layers)
    start = net.clone()
    with ParallelWrapper(net, workers=2, training_mode="SHARED_GRADIENTS") as pw:
        pw.fit(x[:16], y[:16], batch_size=8, progress=False)
    # oracle: each worker's training pass moves its own running statistics from the same
    # start; the wrapper averages them
    moved = []
    for lo in (0, 8):
        c = start.clone()
        c.compute_gradient_and_score(DataSet(x[lo:lo + 8], np.eye(3, dtype=np.float32)[
            y[lo:lo + 8]]))
        moved.append({k: c.get_layer(1).params[k].numpy() for k in ("mean", "var")})
    for k in ("mean", "var"):
        np.testing.assert_allclose(net.get_layer(1).params[k].numpy(),
                                   (moved[0][k] + moved[1][k]) / 2, rtol=1e-6)


# -- AVERAGING ---------------------------------------------------------------------------------

def averaged_by_hand(start, batches, workers, frequency, average_updaters=True):
    """The oracle: independent clones, averaged every `frequency` rounds and at the end."""
    nets = [start.clone() for _ in range(workers)]
    rounds = [batches[i:i + workers] for i in range(0, len(batches), workers)]
    since = [False] * workers
    for r, round_ in enumerate(rounds, 1):
        for net, (bx, by) in zip(nets, round_):
            net.fit(bx, by, progress=False)
        for k in range(len(round_)):
            since[k] = True
        if r % frequency == 0 or r == len(rounds):
            members = [k for k in range(workers) if since[k]]
            mean = sum(nets[k].params().numpy().astype(np.float32) for k in members[1:])
            p = (nets[members[0]].params().numpy() + mean) / len(members) if len(members) > 1 \
                else nets[members[0]].params().numpy()
            states = [n._updater_state_flat() for n in nets]
            s = states[members[0]].copy()
            for k in members[1:]:
                s = s + states[k]
            s = s / len(members)
            for net in nets:
                net.set_params(p)
                if average_updaters:
                    net._set_updater_state_flat(s.astype(states[0].dtype), "state")
            since = [False] * workers
    return nets[0]


@pytest.mark.parametrize("frequency", [1, 2, 3])
def test_averaging_equals_independent_workers_averaged_every_frequency_rounds(data, frequency):
    x, y = data
    net = make_net(Adam(1e-2))
    start = net.clone()
    batches = [(x[i:i + 8], y[i:i + 8]) for i in range(0, 64, 8)]
    with ParallelWrapper(net, workers=2, averaging_frequency=frequency) as pw:
        pw.fit(x, y, batch_size=8, progress=False)
    want = averaged_by_hand(start, batches, 2, frequency)
    np.testing.assert_allclose(net.params().numpy(), want.params().numpy(), rtol=1e-6,
                               atol=1e-7)
    np.testing.assert_allclose(net._updater_state_flat(), want._updater_state_flat(),
                               rtol=1e-6, atol=1e-9)


def test_averaging_without_updaters_keeps_the_root_s_updater_state(data):
    x, y = data
    net = make_net(Adam(1e-2))
    start = net.clone()
    batches = [(x[i:i + 8], y[i:i + 8]) for i in range(0, 32, 8)]
    with ParallelWrapper(net, workers=2, average_updaters=False) as pw:
        pw.fit(x[:32], y[:32], batch_size=8, progress=False)
    want = averaged_by_hand(start, batches, 2, 1, average_updaters=False)
    np.testing.assert_allclose(net.params().numpy(), want.params().numpy(), rtol=1e-6,
                               atol=1e-7)
    np.testing.assert_allclose(net._updater_state_flat(), want._updater_state_flat(),
                               rtol=1e-6, atol=1e-9)


def test_averaged_score_is_set_and_reported(data, caplog):
    x, y = data
    net = make_net()
    with ParallelWrapper(net, workers=2, report_score_after_averaging=True) as pw:
        with caplog.at_level(logging.INFO, logger="ndws"):
            history = pw.fit(x[:32], y[:32], batch_size=8, progress=False)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Averaged")]
    assert len(lines) == 2
    assert lines[-1] == f"Averaged score: {net.score()}"
    assert history.scores[-1] == net.score()


# -- workers: threads, kernel threads, workspaces, listeners ------------------------------------

@pytest.mark.parametrize("mode", ["AVERAGING", "SHARED_GRADIENTS"])
def test_workers_are_named_threads_worker_0_trains_the_user_s_model(data, mode):
    x, y = data
    net = make_net()
    rec = Recorder()
    net.set_listeners(rec)
    with ndws.num_threads(2), ParallelWrapper(net, workers=2, training_mode=mode,
                                              workspace_mode="SINGLE") as pw:
        assert net.get_listeners() == [] and pw.get_listeners() == [rec]
        pw.fit(x[:32], y[:32], batch_size=8, progress=False)
    names = {c[0] for c in rec.calls}
    assert names == {"ParallelWrapper-worker-0", "ParallelWrapper-worker-1"}
    for name, model, _, _, threads, workspaces in rec.calls:
        assert (model is net) == (name.endswith("-0"))
        assert threads == 1                         # 2 kernel threads shared by 2 workers
        assert sorted(w.id for w in workspaces) == ["WS_INFERENCE", "WS_SINGLE"]  # presized
    # each worker's workspaces were destroyed when it ended
    assert all(w.current_size == 0 for c in rec.calls for w in c[5])
    assert net.get_listeners() == [rec]             # given back by close()
    assert net.conf.training_workspace_mode is ndws.WorkspaceMode.ENABLED
    assert net._workspace_override is None


def test_root_only_listeners_run_on_worker_0_only(data, tmp_path):
    x, y = data
    net = make_net()
    ckpt = CheckpointListener(tmp_path, every_n_iterations=1)
    scores = CollectScoresListener()
    with ParallelWrapper(net, workers=2) as pw:
        pw.set_listeners(ckpt, scores)
        pw.fit(x[:32], y[:32], batch_size=8, progress=False)
    assert len(list(tmp_path.iterdir())) == 2        # root's 2 iterations, not 4
    assert sorted(scores.iterations) == [0, 0, 1, 1]  # both workers


def test_performance_listener_reports_per_worker(data, caplog):
    x, y = data
    net = make_net()
    with ParallelWrapper(net, workers=2) as pw:
        pw.set_listeners(PerformanceListener(1))
        with caplog.at_level(logging.INFO, logger="ndws"):
            pw.fit(x, y, batch_size=8, progress=False)
    threads = [r.threadName for r in caplog.records if "samples/sec" in r.getMessage()]
    # each worker's first iteration only starts its own timer: 3 reports per worker
    assert sorted(threads) == ["ParallelWrapper-worker-0"] * 3 + ["ParallelWrapper-worker-1"] * 3


def test_an_async_capable_iterator_is_prefetched_and_trains_like_arrays(data):
    x, y = data
    labels = np.eye(3, dtype=np.float32)[y]
    a, b = make_net(), make_net()
    with ParallelWrapper(a, workers=2, training_mode="SHARED_GRADIENTS", prefetch_buffer=1) as pw:
        pw.fit(ArrayDataSetIterator(x, labels, batch_size=8), epochs=2, progress=False)
    with ParallelWrapper(b, workers=2, training_mode="SHARED_GRADIENTS", prefetch_buffer=0) as pw:
        pw.fit(x, labels, batch_size=8, epochs=2, progress=False)
    np.testing.assert_array_equal(a.params().numpy(), b.params().numpy())
    assert workers_alive() == [] and not [t for t in threading.enumerate()
                                          if "prefetch" in t.name]


# -- failure, stop, shutdown -------------------------------------------------------------------

class FailOn(Layer):
    """Doubles its input; raises in worker 1 while `armed` (a class flag: the replicas are
    copies built from the configuration)."""

    armed = True

    def activate(self, x, training, mgr):
        if FailOn.armed and threading.current_thread().name == "ParallelWrapper-worker-1":
            raise ArithmeticError("boom in the layer")
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS, x.shape, dtype=x.dtype)
        return ndws.multiply(x, 2.0, out=y)

    def backprop_gradient(self, epsilon, mgr):
        e = mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, epsilon.shape,
                                     dtype=epsilon.dtype)
        return {}, ndws.multiply(epsilon, 2.0, out=e)


@pytest.mark.parametrize("mode", ["AVERAGING", "SHARED_GRADIENTS"])
def test_a_worker_s_exception_reaches_fit_and_no_thread_is_left(data, mode, monkeypatch):
    x, y = data
    net = make_net(layers=[DenseLayer(n_in=6, n_out=8, activation="tanh"), FailOn(),
                           OutputLayer(n_out=3, activation="softmax", loss_function="MCXENT")])
    pw = ParallelWrapper(net, workers=2, training_mode=mode)
    with pytest.raises(ArithmeticError, match="boom in the layer") as info:
        pw.fit(x, y, batch_size=8, epochs=3, progress=False)
    assert info.value.__notes__ == ["(raised in ParallelWrapper-worker-1)"]
    assert workers_alive() == []
    # fit works again afterwards, with the same wrapper
    monkeypatch.setattr(FailOn, "armed", False)
    history = pw.fit(x, y, batch_size=8, progress=False)
    assert len(history.iterations) == 4 and workers_alive() == []
    pw.close()


def test_a_bad_batch_in_the_data_stops_the_workers_and_raises_in_the_caller(data):
    x, y = data
    net = make_net()
    before = net.params().numpy().copy()
    ds = DataSet(x[:8], np.eye(3, dtype=np.float32)[y[:8]])
    with ParallelWrapper(net, workers=2) as pw:
        with pytest.raises(TypeError, match="data: item 0 is a str, not a DataSet"):
            pw.fit(["not a dataset", ds], progress=False)
        assert workers_alive() == []
        np.testing.assert_array_equal(net.params().numpy(), before)
        assert net.iteration == 0


def test_stop_fit_from_a_listener_ends_after_the_round_and_fit_runs_again(data):
    x, y = data
    net = make_net()

    class Stopper(TrainingListener):
        def iteration_done(self, model, iteration, epoch):
            if iteration == 1 and threading.current_thread().name.endswith("-0"):
                pw.stop_fit()

    pw = ParallelWrapper(net, workers=2, training_mode="SHARED_GRADIENTS")
    pw.set_listeners(Stopper())
    history = pw.fit(x, y, batch_size=8, epochs=5, progress=False)
    # the rounds already dealt when stop_fit came (at most two after the current one) finish;
    # no later round or epoch starts (without the stop: 20 rounds)
    assert 2 <= len(history.iterations) <= 4 and net.epoch == 1 and workers_alive() == []
    pw.set_listeners()
    history = pw.fit(x, y, batch_size=8, progress=False)
    assert len(history.iterations) == 4
    pw.shutdown()
    pw.shutdown()                                  # idempotent
    with pytest.raises(RuntimeError, match="ParallelWrapper: the wrapper is closed"):
        pw.fit(x, y, batch_size=8, progress=False)


def test_the_model_is_busy_while_the_wrapper_fits(data):
    x, y = data
    net = make_net()
    entered, release = threading.Event(), threading.Event()

    class Hold(TrainingListener):
        def iteration_done(self, model, iteration, epoch):
            if iteration == 0 and model is net:
                entered.set()
                release.wait()

    pw = ParallelWrapper(net, workers=2)
    pw.set_listeners(Hold())
    errors = []
    t = threading.Thread(target=lambda: errors.append(pw.fit(x, y, batch_size=8,
                                                             progress=False)))
    t.start()
    entered.wait()
    try:
        with pytest.raises(RuntimeError, match="MultiLayerNetwork.output: the network is in "
                                               "use by another thread"):
            net.output(x)
        with pytest.raises(RuntimeError, match="ParallelWrapper.fit: already fitting"):
            pw.fit(x, y, batch_size=8, progress=False)
    finally:
        release.set()
        t.join()
    pw.close()
    assert workers_alive() == []


def test_shutdown_from_another_thread_stops_a_running_fit(data):
    x, y = data
    net = make_net()
    entered, go = threading.Event(), threading.Event()

    class Hold(TrainingListener):
        def iteration_done(self, model, iteration, epoch):
            if model is net and iteration == 0:
                entered.set()
                go.wait()

    pw = ParallelWrapper(net, workers=2)
    pw.set_listeners(Hold())
    result = []
    t = threading.Thread(target=lambda: result.append(pw.fit(x, y, batch_size=8, epochs=50,
                                                             progress=False)))
    t.start()
    entered.wait()
    stopper = threading.Thread(target=pw.shutdown)
    stopper.start()
    while not pw._stop_requested.is_set():
        pass
    go.set()
    stopper.join()
    t.join()
    assert len(result[0].iterations) < 50 * 4 and workers_alive() == []
    assert [type(l).__name__ for l in net.get_listeners()] == ["Hold"]


# -- validation ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, exc, message", [
    ({"workers": 1}, ValueError,
     "workers: must be at least 2 (one worker is MultiLayerNetwork.fit), got 1"),
    ({"workers": 0}, ValueError,
     "workers: must be at least 2 (one worker is MultiLayerNetwork.fit), got 0"),
    ({"workers": 2.0}, TypeError, "workers: expected an int, got float"),
    ({"workers": True}, TypeError, "workers: expected an int, got bool"),
    ({"workers": 1 << 40}, ValueError, "workers: must be at most 1048576, got 1099511627776"),
    ({"prefetch_buffer": -1}, ValueError, "prefetch_buffer: must be at least 0, got -1"),
    ({"averaging_frequency": 0}, ValueError, "averaging_frequency: must be at least 1, got 0"),
    ({"averaging_frequency": "2"}, TypeError, "averaging_frequency: expected an int, got str"),
    ({"average_updaters": 1}, TypeError, "average_updaters: expected True or False, got 1"),
    ({"report_score_after_averaging": None}, TypeError,
     "report_score_after_averaging: expected True or False, got None"),
    ({"training_mode": "CUSTOM"}, ValueError,
     "training_mode: unknown TrainingMode 'CUSTOM'; expected one of AVERAGING, "
     "SHARED_GRADIENTS (or an ndws.parallel.TrainingMode)"),
    ({"workspace_mode": "FAST"}, ValueError,
     "workspace_mode: unknown WorkspaceMode 'FAST'; expected one of NONE, ENABLED, SINGLE, "
     "SEPARATE"),
])
def test_options_are_validated_at_construction(kwargs, exc, message):
    net = make_net()
    with pytest.raises(exc) as info:
        ParallelWrapper(net, **kwargs)
    assert str(info.value) == message


def test_model_must_be_an_initialised_network():
    with pytest.raises(TypeError, match="ParallelWrapper: model must be an "
                                        "ndws.nn.MultiLayerNetwork or ComputationGraph, got str"):
        ParallelWrapper("net")
    net = MultiLayerNetwork(MultiLayerConfiguration([OutputLayer(n_in=2, n_out=2,
                                                                       activation="softmax")]))
    with pytest.raises(ValueError, match="model is not initialised; call model.init"):
        ParallelWrapper(net)


@pytest.mark.parametrize("call, exc, message", [
    (lambda pw, x, y: pw.fit(x, y, batch_size=8, epochs=0), ValueError,
     "epochs: expected an int >= 1, got 0"),
    (lambda pw, x, y: pw.fit(x, y, batch_size=0), ValueError,
     "batch_size: expected an int >= 1, got 0"),
    (lambda pw, x, y: pw.fit(x, y[:5], batch_size=8), ValueError,
     "labels: 5 rows for 64 examples"),
    (lambda pw, x, y: pw.fit(x.astype(object), y, batch_size=8), TypeError, None),
    (lambda pw, x, y: pw.fit(x[:, :5], y, batch_size=8), ValueError, None),
    (lambda pw, x, y: pw.fit(42), TypeError,
     "data: expected a DataSet, an iterable of DataSets or arrays, got int"),
    (lambda pw, x, y: pw.fit(x, y, progress="yes"), TypeError,
     "progress: expected True, False or None, got 'yes'"),
])
def test_hostile_fit_arguments_change_nothing_and_leave_no_thread(data, call, exc, message):
    x, y = data
    net = make_net()
    before = net.params().numpy().copy()
    with ParallelWrapper(net, workers=2) as pw:
        with pytest.raises(exc) as info:
            call(pw, x, y)
        if message is not None:
            assert str(info.value) == message
    assert workers_alive() == []
    np.testing.assert_array_equal(net.params().numpy(), before)
    assert net.iteration == 0


def test_builder_mirrors_dl4j(data):
    x, y = data
    net = make_net()
    pw = (ParallelWrapper.builder(net).workers(3).prefetch_buffer(4).averaging_frequency(2)
          .training_mode("SHARED_GRADIENTS").build())
    assert (pw.workers, pw.prefetch_buffer, pw.averaging_frequency, pw.training_mode) == (
        3, 4, 2, TrainingMode.SHARED_GRADIENTS)
    with pytest.raises(AttributeError, match="ParallelWrapper.builder has no option 'gpus'"):
        ParallelWrapper.builder(net).gpus(2)
    pw.close()


# -- the workers' barrier ------------------------------------------------------------------------

def test_spin_barrier_orders_generations_and_breaks_on_abort():
    from ndws.parallel._sync import SpinBarrier
    b = SpinBarrier(3)
    log, lock = [], threading.Lock()

    def party(k):
        for gen in range(200):
            with lock:
                log.append((gen, k))
            b.wait()

    threads = [threading.Thread(target=party, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # nobody entered generation g + 1 before all three had reached generation g
    assert [g for g, _ in log] == sorted(g for g, _ in log)
    waiting, broke = threading.Event(), []

    def blocked():
        waiting.set()
        try:
            b.wait()
        except threading.BrokenBarrierError:
            broke.append(True)

    t = threading.Thread(target=blocked)
    t.start()
    waiting.wait()
    b.abort()
    t.join()
    assert broke == [True] and b.broken
    with pytest.raises(threading.BrokenBarrierError):
        b.wait()


@pytest.mark.parametrize("parties, exc", [(0, ValueError), (1 << 21, ValueError),
                                          (2.0, TypeError), (True, TypeError)])
def test_spin_barrier_parties_are_checked(parties, exc):
    from ndws.parallel._sync import SpinBarrier
    with pytest.raises(exc, match="parties: "):
        SpinBarrier(parties)


def test_batches_from_a_closed_workspace_raise_the_stale_array_error(data):
    x, y = data
    net = make_net()
    before = net.params().numpy().copy()
    with ndws.workspace("PW_STALE"):
        xs = ndws.asarray(x)
    labels = np.eye(3, dtype=np.float32)[y]
    with ParallelWrapper(net, workers=2, training_mode="SHARED_GRADIENTS") as pw:
        with pytest.raises(ndws.WorkspaceError) as info:
            pw.fit(xs, labels, batch_size=8, progress=False)
    assert info.value.kind == "leaked"
    assert workers_alive() == []
    np.testing.assert_array_equal(net.params().numpy(), before)
    ndws.destroy_all_workspaces_for_current_thread()


# -- BaseExceptions, threads that cannot start ---------------------------------------------------

class Halt(BaseException):
    """A BaseException of the user's own (not an Exception)."""


@pytest.mark.parametrize("failure", [SystemExit, KeyboardInterrupt, GeneratorExit, Halt])
@pytest.mark.parametrize("mode", ["AVERAGING", "SHARED_GRADIENTS"])
def test_a_base_exception_in_a_worker_reaches_the_fit_caller(data, mode, failure):
    x, y = data

    class Leave(TrainingListener):
        armed = True

        def on_gradient_calculation(self, model):
            if self.armed and threading.current_thread().name.endswith("-1") and \
                    model.iteration == 1:
                raise failure("worker 1 leaves")

    net = make_net()
    leave = Leave()
    pw = ParallelWrapper(net, workers=2, training_mode=mode)
    pw.set_listeners(leave)
    with pytest.raises(failure, match="worker 1 leaves") as info:
        pw.fit(x, y, batch_size=8, epochs=2, progress=False)
    assert info.value.__notes__ == ["(raised in ParallelWrapper-worker-1)"]
    assert workers_alive() == []
    assert net._busy.owner is None and net._busy.crew == frozenset()
    leave.armed = False
    assert len(pw.fit(x, y, batch_size=8, progress=False).iterations) == 4
    pw.close()


@pytest.mark.parametrize("failure", [SystemExit, Halt])
def test_a_base_exception_from_the_data_reaches_the_fit_caller(data, failure):
    x, y = data
    ds = DataSet(x[:8], np.eye(3, dtype=np.float32)[y[:8]])

    def batches():
        yield ds
        yield ds
        raise failure("the data leaves")

    with ParallelWrapper(make_net(), workers=2) as pw:
        with pytest.raises(failure, match="the data leaves"):
            pw.fit(batches(), progress=False)
        assert workers_alive() == []


def test_a_worker_that_cannot_be_started_leaves_none_waiting(data, monkeypatch):
    x, y = data
    net = make_net()
    real = threading.Thread.start

    def start_thread(self):
        if self.name == "ParallelWrapper-worker-1":
            raise RuntimeError("can't start new thread")
        real(self)
    monkeypatch.setattr(threading.Thread, "start", start_thread)
    pw = ParallelWrapper(net, workers=3)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        pw.fit(x, y, batch_size=8, progress=False)
    monkeypatch.undo()
    assert workers_alive() == []
    assert net.output(x).shape == (64, 3)               # the model is free
    assert len(pw.fit(x, y, batch_size=8, progress=False).iterations) == 3
    pw.close()


# -- the model while the wrapper trains it -----------------------------------------------------

@pytest.mark.parametrize("mode", ["AVERAGING", "SHARED_GRADIENTS"])
def test_a_copy_from_another_thread_is_taken_at_worker_0_s_boundary(data, mode):
    x, y = data
    net = make_net()
    hold = Hold("on_gradient_calculation", 1)        # worker 0, inside its second round
    pw = ParallelWrapper(net, workers=2, training_mode=mode)
    pw.set_listeners(hold)
    clone = clone_during(net, hold, lambda: pw.fit(x, y, batch_size=8, progress=False))
    np.testing.assert_array_equal(clone.params().numpy(), hold.boundaries[2])
    pw.close()


@pytest.mark.parametrize("mode", ["AVERAGING", "SHARED_GRADIENTS"])
def test_worker_0_s_listeners_call_back_into_the_model_as_fit_s_would(data, mode, tmp_path):
    x, y = data
    net = make_net()
    seen = {}

    class CallBack(TrainingListener):
        root_worker_only = True

        def on_gradient_calculation(self, model):
            if model.iteration == 1:
                with pytest.raises(RuntimeError) as info:
                    model.save(tmp_path / "inside.zip")
                seen["inside"] = str(info.value)
                seen["inside output"] = model.output(x[:4]).numpy()

        def iteration_done(self, model, iteration, epoch):
            if iteration == 1:
                flat = model.params().numpy().copy()
                model.save(tmp_path / "boundary.zip")
                seen["boundary"] = (flat, model.output(x[:4]).numpy(),
                                    model.clone().params().numpy())
                with pytest.raises(RuntimeError) as info:
                    model.fit(x, y)
                seen["fit"] = str(info.value)

    with ParallelWrapper(net, workers=2, training_mode=mode) as pw:
        pw.set_listeners(CallBack())
        pw.fit(x, y, batch_size=8, progress=False)
    assert seen["inside"].startswith("MultiLayerNetwork.save: called inside a training "
                                     "iteration of ParallelWrapper.fit")
    assert not (tmp_path / "inside.zip").exists()
    assert seen["inside output"].shape == (4, 3)
    flat, out, cloned = seen["boundary"]
    ref = make_net()
    ref.set_params(flat)
    np.testing.assert_allclose(out, ref.output(x[:4]).numpy(), rtol=1e-6)
    np.testing.assert_array_equal(cloned, flat)
    np.testing.assert_array_equal(MultiLayerNetwork.load(tmp_path / "boundary.zip")
                                  .params().numpy(), flat)
    assert seen["fit"].startswith("MultiLayerNetwork.fit: called from inside "
                                  "ParallelWrapper.fit on the same thread")


@pytest.mark.parametrize("mode", ["AVERAGING", "SHARED_GRADIENTS"])
def test_another_worker_copying_the_model_inside_a_round_is_refused_not_a_deadlock(data, mode):
    x, y = data
    net = make_net()
    inside, go = threading.Event(), threading.Event()
    seen = []

    class Worker0(TrainingListener):
        root_worker_only = True

        def on_gradient_calculation(self, model):
            if model.iteration == 1:
                inside.set()                  # worker 0 is inside its round: it writes
                assert go.wait(WAIT)

    class Worker1(TrainingListener):
        def on_gradient_calculation(self, model):
            if threading.current_thread().name.endswith("-1") and model.iteration == 1:
                assert inside.wait(WAIT)
                try:
                    net.clone()               # the user's model, not this worker's
                except RuntimeError as exc:
                    seen.append(str(exc))
                go.set()

    with ParallelWrapper(net, workers=2, training_mode=mode) as pw:
        pw.set_listeners(Worker0(), Worker1())
        pw.fit(x, y, batch_size=8, progress=False)
    assert seen == [
        "MultiLayerNetwork.clone: called from a ParallelWrapper worker while a round writes "
        "this network's parameters, and the round cannot end while this worker waits for it; "
        "call it from a listener with root_worker_only = True (worker 0, at its iteration "
        "boundary) or after fit returns"]
    assert workers_alive() == []


def test_a_wrapper_is_not_built_around_a_model_fitting_in_another_thread(data):
    x, y = data
    net = make_net()
    hold = Hold("iteration_done", 1)
    net.set_listeners(hold)
    fitter, fitted = start(lambda: net.fit(x, y, batch_size=16, progress=False))
    assert hold.inside.wait(WAIT)
    try:
        with pytest.raises(RuntimeError, match=r"^ParallelWrapper: the network is in use by "
                                               r"another thread \(MultiLayerNetwork\.fit\)"):
            ParallelWrapper(net, workers=2)
        assert net.get_listeners() == [hold]          # not taken from under the fit
    finally:
        hold.go.set()
        fitter.join(WAIT)
    assert "error" not in fitted
