"""ParallelInference: one network served to many threads (docs/parallel.md). Values against the
network's own output() as the oracle; interleavings arranged with Events, never timing."""
from __future__ import annotations

import asyncio
import threading
from concurrent.futures import CancelledError, Future

import numpy as np
import pytest

import ndws
from ndws._memory import allocation_counters
from ndws.nn import (ArrayType, BatchNormalization, DenseLayer, Layer, MultiLayerConfiguration,
                     MultiLayerNetwork, OutputLayer, Sgd)
from ndws.data.dataset import DataSet
from ndws.nn.listeners import TrainingListener
from ndws.parallel import InferenceMode, LoadBalanceMode, ParallelInference

from busy_helpers import Hold, copy_while_held, start_fit

MODES = ["SEQUENTIAL", "BATCHED", "INPLACE"]
WAIT = 30      # seconds: a bound for Events that must fire, never a timing assumption


class Halt(BaseException):
    """A BaseException of the user's own (not an Exception)."""


class Gate(Layer):
    """An identity layer that records each forward pass (thread, rows, first value), can hold
    a pass until the test releases it, and fails a pass that holds a row whose first value
    (after the first layer) is `poison`, raising `failure` (ValueError by default)."""

    lock = threading.Lock()
    passes: list = []
    hold: threading.Event | None = None
    entered = threading.Event()
    poison: float | None = None
    failure: type = ValueError

    def activate(self, x, training, mgr):
        cls = Gate
        values = x.numpy()
        with cls.lock:
            cls.passes.append((threading.current_thread().name, x.shape[0],
                               float(values[0, 0])))
        cls.entered.set()
        if cls.hold is not None:
            assert cls.hold.wait(WAIT)
        if cls.poison is not None and (values[:, 0] == cls.poison).any():
            raise cls.failure(f"Gate: refused a batch of {x.shape[0]} rows")
        y = mgr.create_uninitialized(ArrayType.ACTIVATIONS, x.shape, dtype=x.dtype)
        y.assign(x)
        return y

    def backprop_gradient(self, epsilon, mgr):
        e = mgr.create_uninitialized(ArrayType.ACTIVATION_GRAD, epsilon.shape,
                                     dtype=epsilon.dtype)
        e.assign(epsilon)
        return {}, e


@pytest.fixture(autouse=True)
def _gate():
    Gate.passes = []
    Gate.hold = None
    Gate.entered = threading.Event()
    Gate.poison = None
    Gate.failure = ValueError
    yield
    if Gate.hold is not None:
        Gate.hold.set()


def make_net(gate=False, seed=1, **conf):
    layers = [DenseLayer(n_in=6, n_out=16, activation="tanh")]
    if gate:
        layers.append(Gate())
    layers.append(OutputLayer(n_out=3, activation="softmax", loss_function="MCXENT"))
    net = MultiLayerNetwork(MultiLayerConfiguration(layers, seed=seed, updater=Sgd(0.1),
                                                    **conf))
    net.init()
    return net


@pytest.fixture
def x():
    return np.random.default_rng(0).random((64, 6), dtype=np.float32)


def workers_alive():
    return [t.name for t in threading.enumerate() if t.name.startswith("InferenceThread-")]


class WatchedQueue:
    """A stand-in for one of ParallelInference's SimpleQueues that sets `waiting` when a
    thread is about to block in get() on it empty (so a test knows a caller waits, without
    timing)."""

    def __init__(self, inner):
        self.inner = inner
        self.waiting = threading.Event()

    def get(self):
        if self.inner.empty():
            self.waiting.set()
        return self.inner.get()

    def __getattr__(self, name):
        return getattr(self.inner, name)


def hold_the_worker(pi, x):
    """Submit one request and wait until a worker is inside its forward pass, held there."""
    Gate.passes = []
    Gate.entered.clear()
    Gate.hold = threading.Event()
    first = pi.submit(x[63])
    assert Gate.entered.wait(WAIT)
    return first


# -- values ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_outputs_equal_the_network_s_from_many_threads(mode, x, threaded):
    net = make_net()
    ref = net.output(x).numpy()
    with ParallelInference(net, inference_mode=mode, workers=2) as pi:
        def call(i):
            got = []
            for k in range(20):
                row = (i * 7 + k) % 64
                got.append((row, pi.output(x[row]).numpy(), pi.output(x[row:row + 3])))
            return got
        for got in threaded(call, 8):
            for row, one, three in got:
                np.testing.assert_allclose(one, ref[row], rtol=1e-5, atol=1e-7)
                assert one.shape == (3,)
                assert three.shape == (min(3, 64 - row), 3) and not three.is_attached()
                np.testing.assert_allclose(three.numpy(), ref[row:row + 3], rtol=1e-5,
                                           atol=1e-7)
    assert workers_alive() == []


@pytest.mark.parametrize("mode", MODES)
def test_results_are_detached_and_stay_valid(mode, x):
    net = make_net()
    ref = net.output(x).numpy()
    with ParallelInference(net, inference_mode=mode, workers=2) as pi:
        kept = [pi.output(x[i:i + 2]) for i in range(0, 20, 2)]
        with ndws.workspace("PI_CALLER"):
            inside = pi.output(ndws.asarray(x[:4]))
        for _ in range(10):
            pi.output(x[:5])
    for i, out in enumerate(kept):
        assert not out.is_attached()
        np.testing.assert_allclose(out.numpy(), ref[2 * i:2 * i + 2], rtol=1e-5, atol=1e-7)
    assert not inside.is_attached()
    np.testing.assert_allclose(inside.numpy(), ref[:4], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("mode", MODES)
def test_exotic_inputs_give_the_network_s_values(mode, x):
    net = make_net()
    with ParallelInference(net, inference_mode=mode, workers=2) as pi:
        f64 = x.astype(np.float64)
        for arr in (f64[::-2], np.asfortranarray(x[:7]), x[:9, ::-1][:, ::-1], f64[3],
                    x[:5].astype(np.int32), ndws.asarray(x)[::3]):
            want = net.output(np.atleast_2d(np.asarray(arr))).numpy()
            got = pi.output(arr).numpy()
            np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=1e-7)
        nan = x[:3].copy()
        nan[1, 2] = np.nan
        got = pi.output(nan).numpy()
        assert np.isnan(got[1]).all() and np.isfinite(got[[0, 2]]).all()


# -- BATCHED: merging ------------------------------------------------------------------------------

def test_requests_arriving_while_the_worker_is_busy_are_one_batch(x):
    net = make_net(gate=True)
    ref = net.output(x).numpy()
    Gate.passes = []
    with ParallelInference(net, workers=1, batch_limit=32) as pi:
        first = hold_the_worker(pi, x)
        futures = [pi.submit(x[i:i + 1 + i % 3]) for i in range(10)]   # 1-3 rows each
        Gate.hold.set()
        for i, fut in enumerate(futures):
            np.testing.assert_allclose(fut.result(WAIT).numpy(), ref[i:i + 1 + i % 3],
                                       rtol=1e-5, atol=1e-7)
        first.result(WAIT)
    rows = sum(1 + i % 3 for i in range(10))
    assert [(name, n) for name, n, _ in Gate.passes] == [("InferenceThread-0", 1),
                                                         ("InferenceThread-0", rows)]


def test_a_batch_holds_at_most_batch_limit_rows_and_one_feature_shape(x):
    net = make_net(gate=True)
    Gate.passes = []
    with ParallelInference(net, workers=1, batch_limit=4) as pi:
        first = hold_the_worker(pi, x)
        futures = [pi.submit(x[i]) for i in range(5)]           # 4 rows, then 1
        futures.append(pi.submit(x[10:13]))                     # 3 rows: fits with the 1
        futures.append(pi.submit(x[20:26]))                     # 6 rows > limit: alone
        wrong = pi.submit(x[:2, :5])                            # another shape: its own
        futures.append(pi.submit(x[30]))                        # a new batch after it
        Gate.hold.set()
        for fut in futures:
            fut.result(WAIT)
        with pytest.raises(ValueError, match=r"x: expected 6 features \(layers\[0\].n_in\), "
                                             r"got 5"):
            wrong.result(WAIT)
        first.result(WAIT)
    assert [n for _, n, _ in Gate.passes] == [1, 4, 4, 6, 1]


def test_sequential_runs_each_request_alone(x):
    net = make_net(gate=True)
    Gate.passes = []
    with ParallelInference(net, inference_mode="SEQUENTIAL", workers=1) as pi:
        first = hold_the_worker(pi, x)
        futures = [pi.submit(x[i:i + 2]) for i in range(5)]
        Gate.hold.set()
        for fut in futures:
            fut.result(WAIT)
        first.result(WAIT)
    assert [n for _, n, _ in Gate.passes] == [1, 2, 2, 2, 2, 2]


def poison_row(net, x, i):
    """Make the Gate fail every pass that holds row x[i]."""
    Gate.poison = float(net.feed_forward(x[i:i + 1])[1].numpy()[0, 0])


def test_a_failing_pass_raises_in_every_caller_of_it_and_later_requests_work(x):
    net = make_net(gate=True)
    ref = net.output(x).numpy()
    poison_row(net, x, 5)
    with ParallelInference(net, workers=1) as pi:
        first = hold_the_worker(pi, x)
        calls = [pi.submit(x[i]) for i in (1, 2, 5, 3)]       # one batch, poisoned by x[5]
        alone = pi.submit(x[:2, :3])                          # another shape: its own batch
        Gate.hold.set()
        first.result(WAIT)
        errors = []
        for fut in calls:
            with pytest.raises(ValueError, match=r"^Gate: refused a batch of 4 rows$") as info:
                fut.result(WAIT)
            errors.append(info.value)
        assert len({id(e) for e in errors}) == 4          # each caller its own exception
        assert all(type(e.__cause__) is ValueError for e in errors)
        with pytest.raises(ValueError, match=r"x: expected 6 features"):
            alone.result(WAIT)
        assert [n for _, n, _ in Gate.passes] == [1, 4]      # the held pass, the poisoned one
        Gate.poison = None
        np.testing.assert_allclose(pi.output(x[5]).numpy(), ref[5], rtol=1e-5, atol=1e-7)


def test_a_failing_pass_raises_in_blocking_callers_too(x, threaded):
    net = make_net(gate=True)
    poison_row(net, x, 0)
    phase = threading.Barrier(4)
    with ParallelInference(net, workers=2) as pi:
        def call(i):
            with pytest.raises(ValueError, match="Gate: refused"):
                pi.output(x[0])
            phase.wait(WAIT)        # no poisoned request left to share a batch with
            return pi.output(x[1]).shape
        assert threaded(call, 4) == [(3,)] * 4


# -- INPLACE ---------------------------------------------------------------------------------------

def test_inplace_runs_in_the_calling_thread_without_workers(x, threaded):
    net = make_net(gate=True)
    ref = net.output(x).numpy()
    Gate.passes = []
    with ParallelInference(net, inference_mode="INPLACE", workers=2) as pi:
        assert workers_alive() == []
        outs = threaded(lambda i: pi.output(x[i]).numpy(), 3)
    assert sorted(name for name, _, _ in Gate.passes) == ["ndws-test-0", "ndws-test-1",
                                                         "ndws-test-2"]
    for i, out in enumerate(outs):
        np.testing.assert_allclose(out, ref[i], rtol=1e-5, atol=1e-7)


def test_round_robin_takes_the_replicas_in_turn(x, monkeypatch):
    net = make_net()
    with ParallelInference(net, inference_mode="INPLACE", workers=3,
                           load_balance_mode="ROUND_ROBIN") as pi:
        used = []
        for i, replica in enumerate(pi._replicas):
            original = replica.output
            monkeypatch.setattr(replica, "output",
                                lambda a, _i=i, _o=original: used.append(_i) or _o(a))
        for _ in range(7):
            pi.output(x[0])
    assert used == [0, 1, 2, 0, 1, 2, 0]


def test_fifo_waits_while_every_replica_is_busy(x):
    net = make_net(gate=True)
    with ParallelInference(net, inference_mode="INPLACE", workers=1,
                           load_balance_mode="FIFO") as pi:
        Gate.hold = threading.Event()
        results = {}
        a = threading.Thread(target=lambda: results.setdefault("a", pi.output(x[0])))
        a.start()
        assert Gate.entered.wait(WAIT)                # a holds the only replica
        Gate.entered.clear()
        pi._free = WatchedQueue(pi._free)
        b = threading.Thread(target=lambda: results.setdefault("b", pi.output(x[1])))
        b.start()
        assert pi._free.waiting.wait(WAIT)            # b waits for the replica, not in it
        assert len(Gate.passes) == 1 and "b" not in results
        Gate.hold.set()
        a.join(WAIT)
        b.join(WAIT)
    assert sorted(results) == ["a", "b"] and len(Gate.passes) == 2


# -- the served model ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_replicas_share_one_read_only_parameter_snapshot(mode, x):
    net = make_net()
    ref = net.output(x).numpy()
    with ParallelInference(net, inference_mode=mode, workers=3) as pi:
        flat = pi._replicas[0].params()
        assert all(r.params() is flat for r in pi._replicas)
        for r in pi._replicas:
            for layer, mine in zip(r.layers, pi._replicas[0].layers):
                for name, view in layer.params.items():
                    assert np.shares_memory(np.asarray(view), np.asarray(mine.params[name]))
        assert not np.shares_memory(np.asarray(flat), np.asarray(net.params()))
        net.fit(x, np.eye(3, dtype=np.float32)[np.arange(64) % 3], batch_size=16)
        np.testing.assert_allclose(pi.output(x).numpy(), ref, rtol=1e-5, atol=1e-7)


def test_update_model_swaps_without_losing_queued_requests(x):
    old, new = make_net(gate=True, seed=1), make_net(gate=True, seed=2)
    ref_old, ref_new = old.output(x).numpy(), new.output(x).numpy()
    with ParallelInference(old, workers=1, batch_limit=4) as pi:
        first = hold_the_worker(pi, x)
        queued = [pi.submit(x[i]) for i in range(8)]          # two batches of 4, queued
        pi.update_model(new)
        Gate.hold.set()
        np.testing.assert_allclose(first.result(WAIT).numpy(), ref_old[63], rtol=1e-5)
        for i, fut in enumerate(queued):
            np.testing.assert_allclose(fut.result(WAIT).numpy(), ref_new[i], rtol=1e-5,
                                       atol=1e-7)
        np.testing.assert_allclose(pi.output(x[9]).numpy(), ref_new[9], rtol=1e-5, atol=1e-7)


def test_batch_normalization_serves_its_running_statistics(x):
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=6, n_out=8, activation="relu"), BatchNormalization(),
         OutputLayer(n_out=3, activation="softmax")], seed=0, updater=Sgd(0.1)))
    net.init()
    net.fit(x, np.eye(3, dtype=np.float32)[np.arange(64) % 3], batch_size=16, epochs=3)
    ref = net.output(x).numpy()
    with ParallelInference(net, workers=2) as pi:
        np.testing.assert_allclose(pi.output(x).numpy(), ref, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(pi.output(x).numpy(), ref, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("mode", MODES)
def test_steady_state_requests_allocate_only_their_result(mode, x):
    net = make_net()
    with ParallelInference(net, inference_mode=mode, workers=1) as pi:
        for _ in range(20):
            pi.output(x[:5])
            pi.output(x[7])
        before = allocation_counters()["allocations"]
        for _ in range(50):
            pi.output(x[:5])
            pi.output(x[7])
        assert allocation_counters()["allocations"] - before == 100


# -- futures, asyncio ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_submit_returns_a_future_asyncio_can_await(mode, x):
    net = make_net()
    ref = net.output(x).numpy()
    with ParallelInference(net, inference_mode=mode, workers=2) as pi:
        async def main():
            futures = [asyncio.wrap_future(pi.submit(x[i])) for i in range(16)]
            return await asyncio.gather(*futures)
        outs = asyncio.run(main())
        assert isinstance(pi.submit(x[0]), Future)
    for i, out in enumerate(outs):
        np.testing.assert_allclose(out.numpy(), ref[i], rtol=1e-5, atol=1e-7)


def test_a_cancelled_future_is_dropped_from_its_batch(x):
    net = make_net(gate=True)
    Gate.passes = []
    with ParallelInference(net, workers=1) as pi:
        first = hold_the_worker(pi, x)
        keep = [pi.submit(x[i]) for i in range(3)]
        drop = pi.submit(x[10:15])
        assert drop.cancel()
        Gate.hold.set()
        for fut in keep:
            fut.result(WAIT)
        first.result(WAIT)
        with pytest.raises(CancelledError):
            drop.result(WAIT)
    assert [n for _, n, _ in Gate.passes] == [1, 3]


def test_a_submitted_workspace_array_is_copied_so_the_caller_may_move_on(x):
    net = make_net(gate=True)
    ref = net.output(x).numpy()
    with ParallelInference(net, workers=1) as pi:
        first = hold_the_worker(pi, x)
        with ndws.workspace("PI_SUBMIT"):
            fut = pi.submit(ndws.asarray(x[:4]))
        with ndws.workspace("PI_SUBMIT"):
            ndws.asarray(np.zeros((4, 6), np.float32))      # the same bytes, reused
        Gate.hold.set()
        np.testing.assert_allclose(fut.result(WAIT).numpy(), ref[:4], rtol=1e-5, atol=1e-7)
        first.result(WAIT)


# -- ending ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_requests_after_shutdown_raise_and_no_thread_is_left(mode, x):
    pi = ParallelInference(make_net(), inference_mode=mode, workers=2)
    assert len(workers_alive()) == (0 if mode == "INPLACE" else 2)
    pi.output(x[0])
    pi.shutdown()
    pi.shutdown()                                   # idempotent
    assert workers_alive() == []
    for call in (lambda: pi.output(x[0]), lambda: pi.submit(x[0])):
        with pytest.raises(RuntimeError, match="ParallelInference: shut down; no further "
                                               "requests"):
            call()
    assert repr(pi) == f"<ParallelInference 2 workers, {mode}, shut down>"


def test_shutdown_serves_what_is_queued(x):
    net = make_net(gate=True)
    ref = net.output(x).numpy()
    pi = ParallelInference(net, workers=1, batch_limit=2)
    first = hold_the_worker(pi, x)
    queued = [pi.submit(x[i]) for i in range(5)]
    closer = threading.Thread(target=pi.shutdown)
    closer.start()
    Gate.hold.set()
    closer.join(WAIT)
    assert not closer.is_alive() and workers_alive() == []
    first.result(0)
    for i, fut in enumerate(queued):
        np.testing.assert_allclose(fut.result(0).numpy(), ref[i], rtol=1e-5, atol=1e-7)


def test_a_full_queue_makes_callers_wait_not_fail(x):
    net = make_net(gate=True)
    with ParallelInference(net, inference_mode="SEQUENTIAL", workers=1, queue_limit=2) as pi:
        first = hold_the_worker(pi, x)
        queued = [pi.submit(x[i]) for i in range(2)]         # the queue is full
        late = []
        pi._room = WatchedQueue(pi._room)
        t = threading.Thread(target=lambda: late.append(pi.submit(x[5])))
        t.start()
        assert pi._room.waiting.wait(WAIT)                   # waiting for a place
        assert t.is_alive() and not late
        Gate.hold.set()
        t.join(WAIT)
        assert late[0].result(WAIT).shape == (3,)
        for fut in [first] + queued:
            fut.result(WAIT)


def test_workers_are_named_and_run_on_their_share_of_kernel_threads(x):
    seen = []

    class Spy(Gate):
        def activate(self, x_, training, mgr):
            seen.append((threading.current_thread().name, ndws.get_num_threads()))
            return super().activate(x_, training, mgr)
    spy_net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=6, n_out=4), Spy(), OutputLayer(n_out=3, activation="softmax")]))
    spy_net.init()
    with ndws.num_threads(2):
        pi = ParallelInference(spy_net, workers=2)
    with pi:
        Gate.hold = threading.Event()
        a = pi.submit(x[0])
        assert Gate.entered.wait(WAIT)
        Gate.entered.clear()
        b = pi.submit(x[:2, :])                              # another shape: another batch
        assert Gate.entered.wait(WAIT)
        Gate.hold.set()
        a.result(WAIT), b.result(WAIT)
    assert sorted(seen) == [("InferenceThread-0", 1), ("InferenceThread-1", 1)]


def test_output_from_inside_a_worker_is_refused_not_a_deadlock(x):
    holder = {}

    class Reentrant(Gate):
        def activate(self, x_, training, mgr):
            if x_.shape[0] == 2:
                holder["pi"].output(np.zeros(6, np.float32))
            return super().activate(x_, training, mgr)
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=6, n_out=4), Reentrant(), OutputLayer(n_out=3, activation="softmax")]))
    net.init()
    with ParallelInference(net, workers=1) as pi:
        holder["pi"] = pi
        with pytest.raises(RuntimeError, match="called from one of its own worker threads"):
            pi.output(x[:2])
        assert pi.output(x[0]).shape == (3,)


# -- hostile input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, exc, message", [
    ({"workers": 0}, ValueError, "workers: Workers should be positive value (at least 1), "
                                 "got 0"),
    ({"batch_limit": 0}, ValueError, "batch_limit: Batch limit should be positive value "
                                     "(at least 1), got 0"),
    ({"queue_limit": -1}, ValueError, "queue_limit: Queue limit should be positive value "
                                      "(at least 1), got -1"),
    ({"workers": True}, TypeError, "workers: expected an int, got bool"),
    ({"batch_limit": 2.0}, TypeError, "batch_limit: expected an int, got float"),
    ({"queue_limit": 1 << 40}, ValueError, "queue_limit: must be at most 1048576, got "
                                           "1099511627776"),
    ({"inference_mode": "PARALLEL"}, ValueError,
     "inference_mode: unknown InferenceMode 'PARALLEL'; expected one of SEQUENTIAL, BATCHED, "
     "INPLACE (or an ndws.parallel.InferenceMode)"),
    ({"load_balance_mode": 3}, ValueError, None),
])
def test_options_are_validated_at_construction(kwargs, exc, message):
    with pytest.raises(exc) as info:
        ParallelInference(make_net(), **kwargs)
    if message is not None:
        assert str(info.value) == message
    assert workers_alive() == []


def test_model_must_be_an_initialised_network():
    with pytest.raises(TypeError, match="ParallelInference: model must be an "
                                        "ndws.nn.MultiLayerNetwork or ComputationGraph, got NoneType"):
        ParallelInference(None)
    net = MultiLayerNetwork(MultiLayerConfiguration([OutputLayer(n_in=2, n_out=2,
                                                                 activation="softmax")]))
    with pytest.raises(ValueError, match="model is not initialised; call model.init"):
        ParallelInference(net)
    with ParallelInference(make_net()) as pi:
        with pytest.raises(TypeError, match="ParallelInference.update_model: model must be"):
            pi.update_model("net")
        with pytest.raises(ValueError, match="dtype float64 differs from the served model's "
                                             "float32"):
            pi.update_model(make_net(dtype="float64"))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bad, exc, message", [
    (None, TypeError, "x: expected an array of numbers, got dtype object"),
    ("abc", TypeError, "x: expected an array of numbers, got dtype <U3"),
    (np.zeros((2, 6), complex), TypeError, "x: expected an array of numbers, got dtype "
                                           "complex128"),
    (np.zeros((0, 6), np.float32), ValueError, r"x: no examples \(shape has 0 rows\)"),
    (np.zeros((2, 3, 6), np.float32), ValueError, r"x: expected one example \(n_features,\) "
                                                  r"or a batch \(n_samples, n_features\), got "
                                                  r"shape \(2, 3, 6\)"),
    (np.float32(1.0), ValueError, r"got shape \(\)"),
    (np.zeros((2, 7), np.float32), ValueError, r"x: expected 6 features \(layers\[0\].n_in\), "
                                               r"got 7"),
    (np.zeros(5, np.float32), ValueError, r"x: expected 6 features"),
])
def test_hostile_inputs_raise_in_the_caller_and_later_requests_work(mode, bad, exc, message, x):
    with ParallelInference(make_net(), inference_mode=mode, workers=2) as pi:
        with pytest.raises(exc, match=message if exc is ValueError else None) as info:
            pi.output(bad)
        if exc is TypeError:
            assert str(info.value) == message
        with pytest.raises(exc):
            pi.submit(bad).result(WAIT)
        assert pi.output(x[0]).shape == (3,)


@pytest.mark.parametrize("mode", MODES)
def test_arrays_from_a_closed_workspace_raise_the_stale_array_error(mode, x):
    with ndws.workspace("PI_STALE"):
        stale = ndws.asarray(x[:3])
    with ParallelInference(make_net(), inference_mode=mode, workers=1) as pi:
        with pytest.raises(ndws.WorkspaceError) as info:
            pi.output(stale)
        assert info.value.kind == "leaked"
        with pytest.raises(ndws.WorkspaceError):
            pi.submit(stale)
        assert pi.output(x[0]).shape == (3,)


def test_another_thread_s_workspace_array_is_read_while_valid(x):
    net = make_net()
    ref = net.output(x).numpy()
    made, done = threading.Event(), threading.Event()
    box = {}

    def owner():
        with ndws.workspace("PI_OTHER"):
            box["a"] = ndws.asarray(x[:4])
            made.set()
            done.wait(WAIT)
    t = threading.Thread(target=owner)
    t.start()
    assert made.wait(WAIT)
    with ParallelInference(net, workers=1) as pi:
        np.testing.assert_allclose(pi.output(box["a"]).numpy(), ref[:4], rtol=1e-5, atol=1e-7)
    done.set()
    t.join(WAIT)


def test_builder_mirrors_dl4j():
    net = make_net()
    with ndws.num_threads(2):
        pi = ParallelInference(net)                   # DL4J's defaults on a CPU
    assert (pi.inference_mode, pi.workers, pi.batch_limit, pi.queue_limit,
            pi.load_balance_mode, pi._kernel_threads) == (InferenceMode.BATCHED, 1, 32, 64,
                                                         LoadBalanceMode.FIFO, 2)
    assert workers_alive() == ["InferenceThread-0"]
    pi.shutdown()
    pi = (ParallelInference.builder(net).inference_mode("SEQUENTIAL").workers(3).batch_limit(8)
          .queue_limit(16).build())
    assert (pi.inference_mode, pi.workers, pi.batch_limit, pi.queue_limit,
            pi.load_balance_mode) == (InferenceMode.SEQUENTIAL, 3, 8, 16, LoadBalanceMode.FIFO)
    assert repr(pi) == "<ParallelInference 3 workers, SEQUENTIAL, open>"
    pi.shutdown()
    with pytest.raises(AttributeError, match="ParallelInference.builder has no option "
                                             "'devices'"):
        ParallelInference.builder(net).devices(2)


def test_the_relay_wakes_one_caller_at_a_time_and_skips_abandoned_ones():
    from ndws.parallel.inference import _Relay, _Request
    relay = _Relay()
    reqs = [_Request() for _ in range(4)]
    reqs[1].abandoned = True               # its caller was interrupted: it wakes nobody
    relay.post(reqs)
    assert [r.done.locked() for r in reqs] == [False, True, True, True]
    relay.wake_one()                       # what the woken caller does: passes it on
    assert [r.done.locked() for r in reqs] == [False, False, False, True]
    relay.wake_one()
    relay.wake_one()                       # nothing left: a no-op
    assert not any(r.done.locked() for r in reqs)


# -- BaseExceptions in a served pass ------------------------------------------------------------

@pytest.mark.parametrize("failure", [SystemExit, KeyboardInterrupt, GeneratorExit, Halt])
@pytest.mark.parametrize("mode", ["SEQUENTIAL", "BATCHED"])
def test_a_base_exception_in_a_served_pass_reaches_its_callers_and_the_worker_goes_on(
        mode, failure, x):
    net = make_net(gate=True)
    ref = net.output(x).numpy()
    poison_row(net, x, 5)
    Gate.failure = failure
    with ParallelInference(net, inference_mode=mode, workers=1) as pi:
        first = hold_the_worker(pi, x)
        rows = (1, 5, 2)                 # BATCHED: one batch with x[5]; SEQUENTIAL: three
        calls = [pi.submit(x[i]) for i in rows]
        Gate.hold.set()
        first.result(WAIT)
        for i, fut in zip(rows, calls):
            if mode == "BATCHED" or i == 5:
                with pytest.raises(failure, match=r"^Gate: refused a batch of \d rows$"):
                    fut.result(WAIT)
            else:
                np.testing.assert_allclose(fut.result(WAIT).numpy(), ref[i], rtol=1e-5)
        with pytest.raises(failure, match="Gate: refused a batch of 1 rows"):
            pi.output(x[5])                              # a blocking caller gets it too
        assert workers_alive() == ["InferenceThread-0"]
        Gate.poison = None                               # later requests are served
        np.testing.assert_allclose(pi.output(x[5]).numpy(), ref[5], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(pi.output(x[:8]).numpy(), ref[:8], rtol=1e-5, atol=1e-7)
    assert workers_alive() == []


@pytest.mark.parametrize("failure", [SystemExit, KeyboardInterrupt, GeneratorExit, Halt])
def test_a_base_exception_inplace_reaches_the_caller_and_the_replica_goes_back(failure, x):
    net = make_net(gate=True)
    ref = net.output(x).numpy()
    poison_row(net, x, 5)
    Gate.failure = failure
    with ParallelInference(net, inference_mode="INPLACE", workers=1) as pi:
        with pytest.raises(failure, match="Gate: refused a batch of 1 rows"):
            pi.output(x[5])
        with pytest.raises(failure, match="Gate: refused a batch of 1 rows"):
            pi.submit(x[5])                   # the caller's thread ran the pass: it raises
        Gate.poison = None
        np.testing.assert_allclose(pi.submit(x[5]).result(WAIT).numpy(), ref[5], rtol=1e-5)
        assert pi._free.qsize() == 1                            # the replica went back


def test_a_done_callback_raising_a_base_exception_does_not_end_the_worker(x, caplog):
    net = make_net(gate=True)
    ref = net.output(x).numpy()
    with ParallelInference(net, workers=1) as pi:
        first = hold_the_worker(pi, x)
        a, b = pi.submit(x[1]), pi.submit(x[2])            # one batch, after the held one

        def leave(future):
            raise SystemExit("a callback leaving")
        a.add_done_callback(leave)
        with caplog.at_level("ERROR", logger="ndws"):
            Gate.hold.set()
            first.result(WAIT)
            np.testing.assert_allclose(b.result(WAIT).numpy(), ref[2], rtol=1e-5)
            np.testing.assert_allclose(a.result(WAIT).numpy(), ref[1], rtol=1e-5)
            np.testing.assert_allclose(pi.output(x[3]).numpy(), ref[3], rtol=1e-5)
        assert workers_alive() == ["InferenceThread-0"]
    assert [r.getMessage() for r in caplog.records] == [
        "ParallelInference: a done-callback of a submitted request raised (the request's "
        "future holds its result)"]
    assert caplog.records[0].exc_info[0] is SystemExit


def test_a_worker_that_cannot_be_started_leaves_none_running(x, monkeypatch):
    net = make_net()
    real = threading.Thread.start

    def start_thread(self):
        if self.name == "InferenceThread-1":
            raise RuntimeError("can't start new thread")
        real(self)
    monkeypatch.setattr(threading.Thread, "start", start_thread)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        ParallelInference(net, workers=3)
    monkeypatch.undo()
    assert workers_alive() == []


# -- snapshots of a model that trains -----------------------------------------------------------

def batches_of(x, n=3):
    y = np.eye(3, dtype=np.float32)[np.arange(len(x)) % 3]
    return [DataSet(ndws.from_numpy(x[i:i + 8]), ndws.from_numpy(y[i:i + 8]))
            for i in range(0, 8 * n, 8)]


def served_by(params, x):
    ref = make_net()
    ref.set_params(params)
    return ref.output(x).numpy()


@pytest.mark.parametrize("how", ["constructor", "update_model"])
def test_a_snapshot_of_a_model_training_in_another_thread_is_an_iteration_boundary(how, x):
    net = make_net()
    hold = Hold("on_gradient_calculation", 1)
    net.set_listeners(hold)
    pi = ParallelInference(make_net(seed=5)) if how == "update_model" else None
    fit, errors = start_fit(net, batches_of(x))
    assert hold.inside.wait(WAIT)
    waited, box = copy_while_held(net, hold, lambda: pi.update_model(net) if pi is not None
                                  else ParallelInference(net))
    assert waited, "the snapshot did not wait for the iteration's end"
    fit.join(WAIT)
    assert not errors and "error" not in box
    pi = pi or box["result"]
    with pi:
        # the parameters at the end of iteration 1, never the half-written 7.0s
        np.testing.assert_allclose(pi.output(x).numpy(), served_by(hold.boundaries[2], x),
                                   rtol=1e-6, atol=1e-7)


def test_a_snapshot_from_the_training_thread_is_taken_at_a_boundary_or_refused(x):
    net = make_net()
    seen = {}

    class Serve(TrainingListener):
        def on_gradient_calculation(self, model):
            if model.iteration == 1:
                for op, call in [("ParallelInference", lambda: ParallelInference(model)),
                                 ("ParallelInference.update_model",
                                  lambda: pi.update_model(model))]:
                    with pytest.raises(RuntimeError) as info:
                        call()
                    seen[op] = str(info.value)

        def iteration_done(self, model, iteration, epoch):
            if iteration == 1:
                pi.update_model(model)
                seen["params"] = model.params().numpy().copy()

    with ParallelInference(make_net(seed=5)) as pi:
        net.set_listeners(Serve())
        net.fit(batches_of(x), progress=False)
        np.testing.assert_allclose(pi.output(x).numpy(), served_by(seen["params"], x),
                                   rtol=1e-6, atol=1e-7)
    for op in ("ParallelInference", "ParallelInference.update_model"):
        assert seen[op] == (
            f"{op}: called inside a training iteration of MultiLayerNetwork.fit (from "
            f"on_backward_pass or on_gradient_calculation): the iteration has computed its "
            f"gradients from the current parameters and not yet applied them, so a copy now "
            f"would be a state training never rests in; call it at an iteration boundary "
            f"(from iteration_done, on_epoch_start or on_epoch_end)")


def test_an_update_waiting_when_fit_raises_fails_and_the_old_model_is_served(x):
    net = make_net()
    hold = Hold("on_gradient_calculation", 1, raise_=ValueError("listener trouble"))
    net.set_listeners(hold)
    old = make_net(seed=5)
    with ParallelInference(old) as pi:
        fit, errors = start_fit(net, batches_of(x))
        assert hold.inside.wait(WAIT)
        waited, box = copy_while_held(net, hold, lambda: pi.update_model(net))
        fit.join(WAIT)
        assert waited
        assert [type(e) for e in errors] == [ValueError]
        assert str(box["error"]).startswith(
            "ParallelInference.update_model: MultiLayerNetwork.fit raised ValueError inside a "
            "training iteration while this waited for the iteration's end")
        np.testing.assert_allclose(pi.output(x).numpy(), old.output(x).numpy(), rtol=1e-6)
        pi.update_model(net)                    # free again: the state fit left
        np.testing.assert_allclose(pi.output(x).numpy(), net.output(x).numpy(), rtol=1e-6)


def test_the_probe_every_snapshot_taken_during_a_fit_is_some_iteration_s_end(x):
    # the probe: 150 update_model calls while the model trains in another thread
    # (which trains until they are done); each served parameter set must be the state at the
    # end of some iteration (before: 66 of 150 matched none). It holds for any interleaving.
    # parameters big enough for the copy and the update to run without the GIL (as the
    # probe's network did), so a torn copy could happen
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=6, n_out=512, activation="tanh"),
         DenseLayer(n_out=512, activation="tanh"),
         OutputLayer(n_out=3, activation="softmax", loss_function="MCXENT")],
        seed=1, updater=Sgd(0.1)))
    net.init()
    states = {net.params().numpy().tobytes()}
    started, done = threading.Event(), threading.Event()

    class Record(TrainingListener):
        def iteration_done(self, model, iteration, epoch):
            states.add(model.params().numpy().tobytes())
            started.set()

    def batches():
        data = batches_of(x)
        while not done.is_set():
            yield from data

    net.set_listeners(Record())
    fit, errors = start_fit(net, batches())
    served = []
    assert started.wait(WAIT)
    with ParallelInference(net) as pi:
        while len(served) < 150:
            pi.update_model(net)
            served.append(pi._replicas[0].params().numpy().tobytes())
    done.set()
    fit.join(WAIT)
    assert not errors and fit.is_alive() is False
    assert sum(s not in states for s in served) == 0
