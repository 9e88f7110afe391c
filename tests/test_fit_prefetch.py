"""How the trainers' fit reads an iterator through AsyncDataSetIterator (docs/data.md,
"Prefetch in fit"): after fit returns, or raises, the user's iterator is exactly where a plain
loop (the same iterator behind AsyncShieldDataSetIterator, read on fit's thread) leaves it.

The producer's position is arranged with threading.Event, never with sleeps: `Loader` waits on
`gate[(epoch, i)]` before reading batch i and sets `read[(epoch, i)]` once it has; listeners
wait for those events before they let fit go on (or raise)."""
from __future__ import annotations

import collections
import gc
import threading

import numpy as np
import pytest

import ndws
import ndws.nn.network as network
from ndws import nn
from ndws.data import (ArrayDataSetIterator, AsyncShieldDataSetIterator, DataSet,
                       ExistingDataSetIterator, ListDataSetIterator)
from ndws.data.async_iterators import AsyncDataSetIterator
from ndws.data.iterators import DataSetIterator
from ndws.nn.listeners import TrainingListener

ADSI = "ADSI prefetch thread"
MAIN = threading.main_thread().name

RNG = np.random.default_rng(9)
X = RNG.normal(size=(60, 5)).astype(np.float32)
Y = np.eye(4, dtype=np.float32)[RNG.integers(0, 4, 60)]
BATCH = 10
N = len(X) // BATCH           # batches per epoch


@pytest.fixture(autouse=True)
def _no_thread_left():
    yield
    gc.collect()
    assert [t for t in threading.enumerate() if "prefetch" in t.name] == []


class Loader(DataSetIterator):
    """N batches of X, Y in a new order every epoch (from `seed` and the epoch), as if each
    were loaded from disk: ``async_supported()`` is the protocol's True. Records every read
    (epoch, batch, thread) and every reset (thread)."""

    def __init__(self, seed=3, gate=(), fail=None):
        self.seed, self.gate, self.fail = seed, dict(gate), fail or {}
        self.epoch = self.pos = 0
        self.reads, self.resets = [], []
        self.read = collections.defaultdict(threading.Event)      # set after a read
        self.reading = collections.defaultdict(threading.Event)   # set as a read starts
        self.failed = collections.defaultdict(threading.Event)

    def order(self):
        return np.random.default_rng([self.seed, self.epoch]).permutation(len(X))

    def has_next(self):
        return self.pos < N

    def _next(self):
        key = (self.epoch, self.pos)
        self.reading[key].set()
        if key in self.gate:
            self.gate[key].wait()
        if key in self.fail:
            self.failed[key].set()
            raise self.fail[key]
        idx = self.order()[self.pos * BATCH:(self.pos + 1) * BATCH]
        self.pos += 1
        self.reads.append((*key, threading.current_thread().name))
        self.read[key].set()
        return DataSet(X[idx], Y[idx])

    def _reset(self):
        self.epoch += 1
        self.pos = 0
        self.resets.append(threading.current_thread().name)

    def batch(self):
        return BATCH


def make_net(seed=4):
    net = nn.MultiLayerNetwork(nn.MultiLayerConfiguration(layers=[
        nn.DenseLayer(n_in=5, n_out=12, activation="tanh", dropout=0.8),
        nn.OutputLayer(n_out=4, activation="softmax", loss_function="MCXENT")],
        seed=seed, updater=nn.Adam(1e-2)))
    net.init()
    return net


class At(TrainingListener):
    """Calls `action(epoch)` in iteration_done of iteration `iteration` of each epoch (counted
    within the epoch)."""

    def __init__(self, iteration, action):
        self.iteration, self.action, self.count = iteration, action, 0

    def iteration_done(self, model, iteration, epoch):
        if self.count % N == self.iteration:
            self.action(epoch)
        self.count += 1


def rest(it):
    """What the iterator hands out from here on: each batch's first feature value, then the
    error that stops it (its type and message)."""
    out = []
    while True:
        try:
            if not it.has_next():
                return out
            out.append(float(it.next().features.numpy()[0, 0]))
        except (Exception, KeyboardInterrupt, SystemExit) as exc:   # the plain loop's too
            return out + [f"{type(exc).__name__}: {exc}"]


def fit_both(make_loader, epochs=1, listener=None, raises=None):
    """fit through prefetch, then through a plain loop; returns both (net, loader) pairs.
    ``listener(loader, plain)`` makes the run's listener (a plain run reads on fit's thread:
    it must not wait for reads)."""
    out = []
    for plain in (False, True):
        it = make_loader()
        net = make_net()
        made = None if listener is None else listener(it, plain)
        if made is not None:
            net.set_listeners(made)
        source = AsyncShieldDataSetIterator(it) if plain else it
        if raises is None:
            net.fit(source, epochs=epochs, progress=False)
        else:
            with pytest.raises(raises) as info:
                net.fit(source, epochs=epochs, progress=False)
            it.error = info.value
        out.append((net, it))
    return out


def assert_same(prefetched, plain):
    (net_a, it_a), (net_b, it_b) = prefetched, plain
    np.testing.assert_array_equal(net_a.params().numpy(), net_b.params().numpy())
    assert (net_a.iteration, net_a.epoch) == (net_b.iteration, net_b.epoch)
    assert (it_a.epoch, it_a._started, it_a._position) == (it_b.epoch, it_b._started,
                                                           it_b._position)
    assert rest(it_a) == rest(it_b)


# -- the reproducer --------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["in memory", "loader"])
def test_resuming_after_save_and_load_equals_two_epochs_straight(tmp_path, kind):
    def iterator():
        if kind == "in memory":
            return ArrayDataSetIterator(X, Y, BATCH, shuffle=True, seed=3)
        return Loader()

    straight = make_net()
    straight.fit(iterator(), epochs=2, progress=False)
    for run in range(3):
        it = iterator()
        net = make_net()
        net.fit(it, epochs=1, progress=False)
        net.save(tmp_path / f"net{run}.zip")
        resumed = nn.MultiLayerNetwork.load(tmp_path / f"net{run}.zip")
        resumed.fit(it, epochs=1, progress=False)
        np.testing.assert_array_equal(resumed.params().numpy(), straight.params().numpy())
    if kind == "loader":                                    # the prefetched path was taken
        assert {t for _, _, t in it.reads} == {ADSI} and it.resets == [MAIN] * 2


class GatedArrays(ArrayDataSetIterator):
    """The issue's iterator, a shuffled ArrayDataSetIterator, whose reads the test arranges:
    batch i of epoch e waits for `gate[(e, i)]` (when the test made one) and sets
    `read[(e, i)]`. With `loading` it says async_supported() True, as an iterator that loads
    from disk would, so fit prefetches it itself."""

    def __init__(self, loading):
        super().__init__(X, Y, BATCH, shuffle=True, seed=3)
        self.loading = loading
        self.gate = {}
        self.read = collections.defaultdict(threading.Event)

    def async_supported(self):
        return self.loading

    def _next(self):
        key = (self.epoch, self._batcher.pos // BATCH)
        if key in self.gate:
            assert self.gate[key].wait(60)
        ds = super()._next()
        self.read[key].set()
        return ds


@pytest.mark.parametrize("who", ["fit prefetches", "the user wraps"])
@pytest.mark.parametrize("producer", ["a whole epoch ahead", "in lock-step"])
def test_resumed_training_of_the_issue_equals_two_epochs_straight_every_time(tmp_path, who,
                                                                                producer):
    # shuffled ArrayDataSetIterator, dropout and Adam: fit 1 epoch, save, load, fit 1 epoch
    straight = make_net()
    straight.fit(ArrayDataSetIterator(X, Y, BATCH, shuffle=True, seed=3), epochs=2,
                 progress=False)

    class Arrange(TrainingListener):
        """Places the producer at every iteration of an epoch: as far ahead as its queue
        lets it (fit's first batch trains only once the producer has read batch `far`: the
        whole epoch through the user's queue of N, batch 3 through fit's queue of 2, which
        holds 1 and 2 while fit trains 0), or in lock-step (batch i + 1 is read only once fit
        has trained batch i, so the end of the epoch is found while fit trains its last)."""

        def __init__(self, it):
            self.it, self.count = it, 0
            self.far = 3 if who == "fit prefetches" else N - 1

        def iteration_done(self, model, iteration, epoch):
            e, i = divmod(self.count, N)
            self.count += 1
            if producer == "a whole epoch ahead":
                if i == 0:
                    assert self.it.read[(e, self.far)].wait(60)
            elif i + 1 < N:
                self.it.gate[(e, i + 1)].set()

    for run in range(3):
        it = GatedArrays(loading=who == "fit prefetches")
        if producer == "in lock-step":
            it.gate = {(e, i): threading.Event() for e in range(2) for i in range(1, N)}
        source = it if who == "fit prefetches" else AsyncDataSetIterator(it, queue_size=N)
        net = make_net()
        net.set_listeners(Arrange(it))
        net.fit(source, epochs=1, progress=False)
        assert (it.epoch, it._batcher.pos) == (1, 0)      # reset by fit, nothing read since
        net.save(tmp_path / f"net{run}.zip")
        resumed = nn.MultiLayerNetwork.load(tmp_path / f"net{run}.zip")
        arrange = Arrange(it)
        arrange.count = N
        resumed.set_listeners(arrange)
        resumed.fit(source, epochs=1, progress=False)
        np.testing.assert_array_equal(resumed.params().numpy(), straight.params().numpy())
        assert (it.epoch, it._batcher.pos) == (2, 0)
        if who == "the user wraps":
            source.shutdown()
        assert [t for t in threading.enumerate() if t.name == ADSI] == []


# -- the end of an epoch, several epochs -----------------------------------------------------

@pytest.mark.parametrize("ahead", [True, False])
def test_at_the_end_of_an_epoch_the_producer_reads_no_further(ahead):
    def loader():
        return Loader(gate={} if ahead else {(0, N - 1): threading.Event()})

    def listener(it, plain):
        if ahead:      # the producer has read the whole epoch while fit trains batch 2
            return At(2, lambda epoch: plain or it.read[(0, N - 1)].wait())
        # the last batch is read only once fit has trained batch N - 2
        return At(N - 2, lambda epoch: it.gate[(0, N - 1)].set())

    runs = fit_both(loader, listener=listener)
    (net, it), _ = runs
    assert it.reads == [(0, i, ADSI) for i in range(N)]     # this epoch only
    assert it.resets == [MAIN]                              # by fit, after the epoch
    assert net.iteration == N
    assert_same(*runs)


def test_several_epochs_each_read_to_its_end_and_reset_by_fit():
    def listener(it, plain):
        # each epoch: the producer reaches the end while fit trains batch N - 3
        return At(N - 3, lambda epoch: plain or it.read[(epoch, N - 1)].wait())

    runs = fit_both(Loader, epochs=3, listener=listener)
    (net, it), (_, plain) = runs
    assert it.reads == [(e, i, ADSI) for e in range(3) for i in range(N)]
    assert it.resets == plain.resets == [MAIN] * 3
    assert net.iteration == 3 * N and net.epoch == 3
    assert_same(*runs)


def test_an_used_or_exhausted_iterator_starts_a_new_epoch_as_a_loop_would():
    for used in (2, N):
        def loader():
            it = Loader()
            for _ in range(used):
                it.next()
            return it

        runs = fit_both(loader)
        assert runs[0][1].resets == [MAIN, MAIN]    # before the epoch (as `for`) and after
        assert_same(*runs)


# -- interrupted fits ------------------------------------------------------------------------

class Interrupt(TrainingListener):
    """Raises KeyboardInterrupt after iteration 1, once `wait` is set."""

    def __init__(self, wait=None):
        self.wait = wait

    def iteration_done(self, model, iteration, epoch):
        if iteration == 1:
            if self.wait is not None:
                self.wait.wait()
            raise KeyboardInterrupt("stopped at iteration 1")


def test_an_interrupted_fit_gives_back_what_the_producer_read_ahead():
    # fit has taken batches 0 and 1; batches 2 and 3 are queued, 4 waits for room
    runs = fit_both(Loader, listener=lambda it, plain: Interrupt(None if plain else
                                                                 it.read[(0, 4)]),
                    raises=KeyboardInterrupt)
    (net, it), (_, plain) = runs
    assert [i for _, i, _ in it.reads] == [0, 1, 2, 3, 4]
    assert [i for _, i, _ in plain.reads] == [0, 1]
    assert it.resets == plain.resets == []
    assert_same(*runs)                            # batches 2 to 5 come next, in both
    assert net.iteration == 2


def test_an_interrupted_fit_waits_for_the_batch_being_read_and_gives_it_back():
    def loader():
        return Loader(gate={(0, 3): threading.Event()})

    def listener(it, plain):
        if plain:
            it.gate[(0, 3)].set()
            return Interrupt()

        def open_when_fit_shuts_the_producer_down():
            it.reading[(0, 3)].wait()
            channel_closed(spy.wrapper)
            it.gate[(0, 3)].set()

        threading.Thread(target=open_when_fit_shuts_the_producer_down).start()
        return Interrupt(it.reading[(0, 3)])      # batch 3 is being read: it stays in its gate

    with Spy() as spy:
        runs = fit_both(loader, listener=listener, raises=KeyboardInterrupt)
    assert [i for _, i, _ in runs[0][1].reads] == [0, 1, 2, 3]
    assert_same(*runs)


def test_an_error_read_ahead_of_an_interrupted_fit_comes_after_the_batches_before_it():
    boom = OSError("disk error at batch 3")

    def loader():
        return Loader(fail={(0, 3): boom})

    runs = fit_both(loader, listener=lambda it, plain: Interrupt(None if plain else
                                                                it.failed[(0, 3)]),
                    raises=KeyboardInterrupt)
    (_, it), (_, plain) = runs
    assert it.next().features.numpy().shape == (BATCH, 5)         # batch 2 ...
    assert plain.next().features.numpy().shape == (BATCH, 5)
    for one in (it, plain):
        with pytest.raises(OSError) as info:                       # ... then the same error
            one.next()
        assert info.value is boom
    assert rest(it) == rest(plain) == [
        "RuntimeError: Loader stopped at an error in an earlier batch (OSError: disk error at "
        "batch 3); that batch is lost, so it does not go on: call reset() to start the epoch "
        "again"]


# -- errors from the iterator ----------------------------------------------------------------

class Spy:
    """Keeps the AsyncDataSetIterator fit makes (so a test can see its channel)."""

    def __enter__(self):
        self.wrapper = None
        self.original = network._prefetch_for_fit

        def spy(*args, **kwargs):
            self.wrapper = self.original(*args, **kwargs)
            return self.wrapper
        network._prefetch_for_fit = spy
        return self

    def __exit__(self, *exc_info):
        network._prefetch_for_fit = self.original


def consumer_waits(wrapper):
    """Until fit (the consumer) waits on the empty channel."""
    cond = wrapper._state.channel.cond
    while not cond._waiters:
        threading.Event().wait(0.001)


@pytest.mark.parametrize("exc", [OSError("bad record"), SystemExit(3), KeyboardInterrupt()],
                         ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("when", ["read ahead", "fit waits"])
def test_an_error_in_the_middle_reaches_fit_and_stops_the_iterator_as_a_loop_would(exc, when):
    def loader():
        return Loader(fail={(0, 3): exc}, gate={(0, 3): threading.Event()})

    def listener(it, plain):
        gate = it.gate[(0, 3)]
        if plain:
            gate.set()
            return None
        if when == "read ahead":       # the producer fails while fit trains batch 1
            gate.set()
            return At(1, lambda epoch: it.failed[(0, 3)].wait())

        def open_once_fit_waits():     # fit waits for batch 3 when the producer fails
            consumer_waits(spy.wrapper)
            gate.set()
        return At(2, lambda epoch: threading.Thread(target=open_once_fit_waits).start())

    with Spy() as spy:
        runs = fit_both(loader, listener=listener, raises=type(exc))
    (net, it), (_, plain) = runs
    assert it.error is exc and plain.error is exc            # the same object, re-raised
    assert net.iteration == 3
    assert_same(*runs)
    it.reset()                                               # reset clears the error
    assert it.has_next()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_producer_that_dies_without_a_word_is_reported(monkeypatch):
    import ndws.data.async_iterators as ai

    class Unmarkable:                  # the error marker cannot even be made: the thread dies
        def __init__(self, *args):
            raise MemoryError("no memory for the marker")

    monkeypatch.setattr(ai, "_Failure", Unmarkable)
    it = AsyncDataSetIterator(Loader(fail={(0, 0): OSError("first batch")}))
    with pytest.raises(RuntimeError, match=r"^the ADSI prefetch thread stopped without "
                                           r"handing over a batch, an end of the epoch or an "
                                           r"error$"):
        it.next()
    it.shutdown()


# -- what is prefetched ----------------------------------------------------------------------

class Where:
    """A pre-processor that records the thread it runs in."""

    def __init__(self):
        self.threads = set()

    def pre_process(self, ds):
        self.threads.add(threading.current_thread().name)


def _generator():
    return (DataSet(X[i:i + BATCH], Y[i:i + BATCH]) for i in range(0, len(X), BATCH))


@pytest.mark.parametrize("make, prefetched", [
    (lambda: ArrayDataSetIterator(X, Y, BATCH), False),
    (lambda: ListDataSetIterator(list(_generator())), False),
    (lambda: ExistingDataSetIterator(list(_generator())), False),
    (lambda: ExistingDataSetIterator(_generator()), True),
    (lambda: Loader(), True)])
def test_only_iterators_with_loading_to_hide_are_prefetched(make, prefetched):
    it = make()
    where = it.pre_processor = Where()
    net = make_net()
    net.fit(it, epochs=2, progress=False)
    assert where.threads == ({ADSI} if prefetched else {MAIN})
    assert it.async_supported() is prefetched
    # a one-pass iterator (over a generator) is not reset at the end of an epoch: its second
    # epoch is empty, as in a plain loop
    assert net.iteration == (2 * N if it.reset_supported() else N)


# -- the parallel trainers -------------------------------------------------------------------

def test_parallel_wrapper_leaves_the_iterator_as_a_plain_loop_does():
    from ndws.parallel import ParallelWrapper
    results = []
    for prefetch in (2, 0):
        it = Loader()
        net = make_net()
        with ParallelWrapper(net, workers=2, prefetch_buffer=prefetch) as pw:
            pw.fit(it, epochs=2, progress=False)
        results.append((net, it))
    (net, it), (_, plain) = results
    assert it.reads == [(e, i, ADSI) for e in range(2) for i in range(N)]
    assert it.resets == plain.resets == [MAIN] * 2
    np.testing.assert_array_equal(net.params().numpy(), results[1][0].params().numpy())
    assert rest(it) == rest(plain)


def test_the_mpi_trainer_leaves_the_iterator_as_a_plain_loop_does():
    pytest.importorskip("mpi4py")
    from mpi4py import MPI

    from ndws.parallel import MPITrainer
    results = []
    for plain in (False, True):
        it = Loader()
        net = make_net()
        with MPITrainer(net, MPI.COMM_SELF) as trainer:
            trainer.fit(AsyncShieldDataSetIterator(it) if plain else it, epochs=2)
        results.append((net, it))
    (net, it), (_, plain) = results
    assert it.reads == [(e, i, ADSI) for e in range(2) for i in range(N)]
    assert it.resets == plain.resets == [MAIN] * 2
    assert_same(*results)


# -- AsyncDataSetIterator on its own ---------------------------------------------------------

def test_reset_while_the_producer_reads_drops_that_batch_and_resets_on_the_caller():
    gate = threading.Event()
    it = Loader(gate={(0, 2): gate})
    with AsyncDataSetIterator(it, queue_size=2) as prefetch:
        first = prefetch.next().features.numpy()
        it.reading[(0, 2)].wait()                   # the producer is inside batch 2's read
        opener = threading.Thread(target=lambda: (channel_closed(prefetch), gate.set()))
        opener.start()
        prefetch.reset()                            # waits for that read, drops it
        opener.join()
        assert it.resets == [MAIN] and (it.epoch, it.pos) == (1, 0)
        assert [t for t in threading.enumerate() if t.name == ADSI] == []   # until asked
        again = [ds.features.numpy() for ds in prefetch]
    assert it.reads == [(0, 0, ADSI), (0, 1, ADSI), (0, 2, ADSI)] + [
        (1, i, ADSI) for i in range(N)]
    fresh = Loader()
    np.testing.assert_array_equal(first, fresh.next().features.numpy())
    fresh.reset()
    for got in again:                               # epoch 1, from its first batch
        np.testing.assert_array_equal(got, fresh.next().features.numpy())


def channel_closed(prefetch):
    """Until the producer's channel is closed (reset or shutdown has begun)."""
    channel = prefetch._state.channel
    with channel.cond:
        channel.cond.wait_for(lambda: channel.closed)


def test_shutdown_gives_back_what_nobody_took_and_the_iterator_is_as_never_read():
    it = Loader()
    prefetch = AsyncDataSetIterator(it, queue_size=2)
    it.read[(0, 2)].wait()                          # 0 and 1 queued, 2 waits for room
    prefetch.shutdown()
    assert it.pos == 3 and it._position == 0 and not it._started
    assert rest(it) == rest(Loader())               # all N batches, none lost
    it.reset()
    assert it.__dict__.keys().isdisjoint({"has_next", "next", "reset"})


def test_batches_given_back_are_out_of_the_ring_and_reset_drops_them():
    it = Loader()
    prefetch = AsyncDataSetIterator(it, queue_size=2)
    taken = prefetch.next()
    it.read[(0, 3)].wait()
    ring = prefetch.workspace.id
    prefetch.shutdown()
    assert taken.features.stale == "destroyed"     # what fit held lived in the ring
    given = it.next()
    assert not given.features.is_attached() and given.features.workspace_id != ring
    assert it._position == 2 and it._started
    it.reset()                                      # a new epoch: the rest of the old goes
    assert (it.epoch, it.pos) == (1, 0) and len(rest(it)) == N


def test_a_batch_has_next_fetched_and_nobody_took_is_given_back_out_of_the_ring():
    it = Loader()
    prefetch = AsyncDataSetIterator(it, queue_size=2)
    prefetch.next()
    assert prefetch.has_next()                      # batch 1 is fetched, not handed out
    ring = prefetch.workspace.id
    prefetch.shutdown()
    given = it.next()
    assert given.features.stale is None and given.features.workspace_id != ring
    fresh = Loader()
    fresh.next()
    np.testing.assert_array_equal(given.features.numpy(), fresh.next().features.numpy())
    assert rest(it) == rest(fresh)


def test_a_shard_of_an_iterator_holding_given_back_batches_starts_afresh():
    base = ArrayDataSetIterator(X, Y, BATCH)
    base._give_back([DataSet(np.zeros((1, 5), np.float32), np.zeros((1, 4), np.float32))])
    assert base.next().num_examples() == 1         # the given-back batch first
    base._give_back([DataSet(np.zeros((1, 5), np.float32), np.zeros((1, 4), np.float32))])
    shard = base.shard(0, 2)
    assert [ds.num_examples() for ds in shard] == [BATCH] * (N // 2)
    assert base.next().num_examples() == 1


def test_a_second_prefetcher_that_stops_early_gives_back_before_what_is_left():
    it = Loader()
    first = AsyncDataSetIterator(it, queue_size=4)
    first.next()                                    # batch 0 taken
    it.read[(0, 5)].wait()                          # 1 to 4 queued, 5 waits for room
    first.shutdown()                                # gives back 1 to 5
    second = AsyncDataSetIterator(it, queue_size=2)
    channel = second._state.channel
    while not (len(channel.items) == 2 and channel.cond._waiters):
        threading.Event().wait(0.001)               # 1, 2 queued, 3 waits for room
    second.shutdown()                               # gives back 1, 2, 3; 4, 5 are left
    fresh = Loader()
    fresh.next()
    assert rest(it) == rest(fresh)                  # 1 to 5, then the base's own
    assert [i for _, i, _ in it.reads] == list(range(N))


def test_a_multi_data_set_prefetcher_gives_back_too():
    from ndws.data import ArrayMultiDataSetIterator
    from ndws.data.async_iterators import AsyncMultiDataSetIterator

    class Loading(ArrayMultiDataSetIterator):
        reads = 0

        def _next(self):
            Loading.reads += 1
            return super()._next()

    it = Loading([X], [Y], BATCH)
    prefetch = AsyncMultiDataSetIterator(it, queue_size=2)
    taken = prefetch.next().features[0].numpy()
    while Loading.reads < 4:                        # 1, 2 queued, 3 waits for room
        threading.Event().wait(0.001)
    prefetch.shutdown()
    got = [taken] + [it.next().features[0].numpy() for _ in range(N - 1)]
    assert not it.has_next()
    np.testing.assert_array_equal(np.concatenate(got), X)
