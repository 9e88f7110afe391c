"""AsyncDataSetIterator / AsyncMultiDataSetIterator: order, exceptions, reset, the ring's
rules (overwritten batches raise, detach keeps them, variable sizes grow the ring), zero
steady-state allocation, and no leaked threads."""
from __future__ import annotations

import gc
import random
import threading
import time

import numpy as np
import pytest

import ndws
from ndws.data.async_iterators import AsyncDataSetIterator, AsyncMultiDataSetIterator
from ndws.data.dataset import DataSet, MultiDataSet
from ndws.data.iterators import DataSetIterator, MultiDataSetIterator

ADSI = "ADSI prefetch thread"
AMDSI = "AMDSI prefetch thread"


def prefetch_threads(name=ADSI):
    return [t for t in threading.enumerate() if t.name == name and t.is_alive()]


def producer_waits_for_room(it):
    """Until the producer of `it` waits in put() on its full channel, or has parked at the end
    of the epoch: not inside the source, so a collector that finalizes `it` joins it. (A
    thread waiting on the channel's condition is the producer: the channel is not empty.)"""
    state = it._state
    channel = state.channel
    while True:
        with channel.lock:
            if state.parked.is_set() or (len(channel.items) >= channel.capacity
                                         and channel.cond._waiters):
                return
        threading.Event().wait(0.001)


@pytest.fixture(autouse=True)
def _no_thread_left():
    yield
    gc.collect()
    # a producer abandoned inside its source's next() is not waited for by the collector: it
    # ends by itself once next() returns (see the stuck-source test)
    for t in prefetch_threads(ADSI) + prefetch_threads(AMDSI):
        t.join(60)
    assert prefetch_threads(ADSI) == [] and prefetch_threads(AMDSI) == []


class Source(DataSetIterator):
    """Batch i: features full of i (rows x cols, or rows x cols x lengths[i] for time series),
    labels i * 10 + arange. Built from NumPy, so the arrays land in the caller's current
    workspace (the producer's ring)."""

    def __init__(self, n=12, rows=4, cols=3, lengths=None, dtype=np.float32, fail_at=None,
                 exc=None, gate=None, delay=0.0):
        self.n, self.rows, self.cols, self.lengths, self.dtype = n, rows, cols, lengths, dtype
        self.fail_at, self.exc, self.gate, self.delay = fail_at, exc, gate, delay
        self.pos = 0
        self.raised = threading.Event()
        self.threads = set()

    def expected(self, i):
        shape = (self.rows, self.cols) if self.lengths is None else (
            self.rows, self.cols, self.lengths[i])
        return (np.full(shape, i, dtype=self.dtype),
                (i * 10 + np.arange(self.rows * 2, dtype=self.dtype)).reshape(self.rows, 2))

    def has_next(self):
        return self.pos < self.n

    def _next(self):
        i = self.pos
        self.threads.add(threading.current_thread().name)
        if self.gate is not None and i in self.gate:
            self.gate[i].wait()
        if self.delay:
            time.sleep(self.delay)
        if i == self.fail_at:
            self.raised.set()
            raise self.exc
        self.pos += 1
        return DataSet(*self.expected(i))

    def _reset(self):
        self.pos = 0

    def batch(self):
        return self.rows

    def input_columns(self):
        return self.cols

    def total_outcomes(self):
        return 2


class MultiSource(MultiDataSetIterator):
    def __init__(self, n=8):
        self.n, self.pos = n, 0

    def expected(self, i):
        return ([np.full((3, 2), i, np.float64), np.full((3, 5), -i, np.float64)],
                [np.full((3, 1), i * 2, np.float64)])

    def has_next(self):
        return self.pos < self.n

    def _next(self):
        self.pos += 1
        return MultiDataSet(*self.expected(self.pos - 1))

    def _reset(self):
        self.pos = 0

    def batch(self):
        return 3

    def input_columns(self):
        return 2

    def total_outcomes(self):
        return 1


def check(ds, src, i):
    f, lab = src.expected(i)
    np.testing.assert_array_equal(ds.features.numpy(), f)
    np.testing.assert_array_equal(ds.labels.numpy(), lab)
    assert ds.features.dtype == f.dtype and ds.features.shape == f.shape


def wait_until_blocked(it):
    """Until the consumer (another thread) waits on the empty queue."""
    cond = it._state.channel.cond
    while not cond._waiters:
        time.sleep(0.001)


# -- order and values --------------------------------------------------------------------------

@pytest.mark.parametrize("queue_size", [1, 2, 8])
@pytest.mark.parametrize("use_workspace", [True, False])
def test_same_batches_in_the_same_order_as_the_base(queue_size, use_workspace):
    src = Source(n=23)
    reference = [ds.detach() for ds in src]          # the base's own batches, detached
    assert len(reference) == 23
    src.reset()
    src.threads.clear()
    with AsyncDataSetIterator(src, queue_size, use_workspace=use_workspace) as it:
        got = []
        while it.has_next():
            ds = it.next()
            assert ds.features.is_attached() is use_workspace
            got.append(ds.detach())
        assert not it.has_next()
        with pytest.raises(StopIteration):
            it.next()
    assert got == reference
    assert src.threads == {ADSI}


def test_python_iteration_resets_between_epochs():
    src = Source(n=5)
    with AsyncDataSetIterator(src) as it:
        first = [ds.detach() for ds in it]
        second = [ds.detach() for ds in it]
        partial = next(iter(it)).detach()
        third = [ds.detach() for ds in it]
    assert first == second == third and len(first) == 5
    assert partial == first[0]


def test_exhausted_base_is_reset_by_the_producer():
    src = Source(n=4)
    list(src)
    assert not src.has_next()
    with AsyncDataSetIterator(src) as it:
        assert [ds.features.numpy()[0, 0] for ds in it] == [0, 1, 2, 3]


def test_multi_dataset_iterator_order_values_and_thread():
    src = MultiSource(n=9)
    with AsyncMultiDataSetIterator(src, queue_size=3) as it:
        assert prefetch_threads(AMDSI) and not it.async_supported()
        for epoch in range(2):
            n = 0
            for i, mds in enumerate(it):
                f, lab = src.expected(i)
                assert [a.numpy().tolist() for a in mds.features] == [a.tolist() for a in f]
                assert [a.numpy().tolist() for a in mds.labels] == [a.tolist() for a in lab]
                assert all(a.workspace_id.startswith("AMDSI_ITER-") for a in mds.features)
                n += 1
            assert n == 9
        ws = it.workspace
        assert ws.config.overallocation_limit == 4.0      # queue_size + 1: 5 blocks
    assert prefetch_threads(AMDSI) == []


# -- configuration -----------------------------------------------------------------------------

def test_ring_configuration_thread_and_delegation():
    src = Source(n=6)
    with AsyncDataSetIterator(src, queue_size=5) as it:
        assert it.queue_size == 5 and it.use_workspace and it.base is src
        assert it.batch() == 4 and it.input_columns() == 3 and it.total_outcomes() == 2
        assert it.reset_supported() and not it.async_supported()
        (thread,) = prefetch_threads()
        assert thread.daemon
        first = it.next()
        ws = it.workspace
        assert ws.id.startswith("ADSI_ITER-") and first.features.workspace_id == ws.id
        assert ws.workspace_type is ndws.WorkspaceType.CIRCULAR
        assert ws.config == ndws.WorkspaceConfiguration(
            policy_allocation="OVERALLOCATE", policy_learning="FIRST_LOOP",
            policy_reset="ENDOFBUFFER_REACHED", policy_spill="REALLOCATE",
            min_size=10 * 1024 * 1024, overallocation_limit=7.0)
        assert ws.current_size == 10 * 1024 * 1024          # small batches: the minimum
        assert first.features.memory_kind == "spill"         # the learning cycle
        assert it.next().features.memory_kind == "main"      # then the ring
        assert ndws.current_workspace() is None
    with AsyncDataSetIterator(Source(), queue_size=1) as it:
        assert it.queue_size == 2


def test_two_iterators_have_their_own_rings():
    with AsyncDataSetIterator(Source()) as a, AsyncDataSetIterator(Source()) as b:
        assert a.next().features.workspace_id != b.next().features.workspace_id
        assert len(prefetch_threads()) == 2


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(base=5), TypeError, "base: expected a DataSetIterator, an object with has_next() and "
                              "next(), or an iterable of DataSets, got int"),
    (dict(base="batches.csv"), TypeError, "base: expected a DataSetIterator, an object with "
                                          "has_next() and next(), or an iterable of DataSets, "
                                          "got str"),
    (dict(queue_size=2.5), TypeError, "queue_size: expected an integer, got 2.5"),
    (dict(queue_size=True), TypeError, "queue_size: expected an integer, got True"),
    (dict(use_workspace=1), TypeError, "use_workspace: expected a bool, got 1"),
    (dict(queue_size=2**62), ValueError, "queue_size: at most 2147483643 with use_workspace (the "
                                         "ring has queue_size + 3 blocks), got "
                                         "4611686018427387904"),
    (dict(queue_size=2**31 - 4), ValueError, "queue_size: at most 2147483643 with use_workspace "
                                             "(the ring has queue_size + 3 blocks), got "
                                             "2147483644"),
])
def test_bad_arguments(kwargs, error, message):
    kwargs.setdefault("base", Source())
    with pytest.raises(error) as info:
        AsyncDataSetIterator(**kwargs)
    assert str(info.value) == message
    assert prefetch_threads() == []


def test_a_big_queue_without_a_ring_and_numpy_integers_are_accepted():
    with AsyncDataSetIterator(Source(n=3), queue_size=np.int64(2**40),
                              use_workspace=False) as it:
        assert it.queue_size == 2**40 and len(list(it)) == 3
    with pytest.raises(ValueError, match=r"^queue_size: at most 2147483644 with use_workspace"):
        AsyncMultiDataSetIterator(MultiSource(), queue_size=2**31)


def test_multi_rejects_a_dataset_iterator():
    with pytest.raises(TypeError) as info:
        AsyncMultiDataSetIterator(Source())
    assert str(info.value) == ("base: expected a MultiDataSetIterator, an object with has_next() "
                               "and next(), or an iterable of MultiDataSets, got Source")


def test_pre_processor_runs_in_the_producer_inside_the_ring():
    seen = []

    class Scale:
        def pre_process(self, ds):
            seen.append((threading.current_thread().name, ndws.current_workspace().id))
            ds.features *= 2

    src = Source(n=3)
    it = AsyncDataSetIterator(src)
    it.reset()                       # the first epoch may already be prefetched
    it.pre_processor = Scale()
    assert isinstance(src.pre_processor, Scale) and it.pre_processor is src.pre_processor
    it.reset()
    with it:
        values = [ds.features.numpy()[0, 0] for ds in it]
        ring = it.workspace.id
    assert values == [0, 2, 4]
    # the producer started by the first reset may already have pre-processed a batch in its
    # own ring before the second reset replaced it: every call ran in a producer, inside a
    # ring, and the epoch that was consumed saw exactly three, in its ring
    assert all(name == ADSI and wid.startswith("ADSI_ITER-") for name, wid in seen)
    assert [entry for entry in seen if entry[1] == ring] == [(ADSI, ring)] * 3


def test_last_etl_time_is_recorded():
    with AsyncDataSetIterator(Source(n=2)) as it:
        assert it.last_etl_time_ms == 0.0
        it.next()
        assert isinstance(it.last_etl_time_ms, float) and it.last_etl_time_ms >= 0.0


# -- producer exceptions -----------------------------------------------------------------------

@pytest.mark.parametrize("fail_at", [0, 3])
def test_exception_raised_before_the_consumer_asks(fail_at):
    exc = ValueError("bad record")
    src = Source(n=10, fail_at=fail_at, exc=exc)
    with AsyncDataSetIterator(src) as it:
        src.raised.wait()
        for i in range(fail_at):
            check(it.next(), src, i)
        with pytest.raises(ValueError) as info:
            it.has_next()
        assert info.value is exc
        with pytest.raises(ValueError) as again:      # stays failed until reset
            it.next()
        assert again.value is exc


def test_exception_raised_while_the_consumer_is_blocked():
    exc = IndexError("index 7 is out of bounds")
    go = threading.Event()
    src = Source(n=10, fail_at=2, exc=exc, gate={2: go})
    it = AsyncDataSetIterator(src)
    check(it.next(), src, 0)
    check(it.next(), src, 1)
    releaser = threading.Thread(target=lambda: (wait_until_blocked(it), go.set()))
    releaser.start()
    with pytest.raises(IndexError) as info:
        it.next()                                   # blocks; woken by the error marker
    releaser.join()
    assert info.value is exc
    it.close()


def test_exception_raised_after_the_consumer_was_woken():
    exc = KeyError("label")
    go0, go1 = threading.Event(), threading.Event()
    src = Source(n=10, fail_at=1, exc=exc, gate={0: go0, 1: go1})
    it = AsyncDataSetIterator(src)
    releaser = threading.Thread(target=lambda: (wait_until_blocked(it), go0.set()))
    releaser.start()
    check(it.next(), src, 0)                        # blocked, then woken by batch 0
    releaser.join()
    go1.set()
    src.raised.wait()                               # fails while the consumer is busy
    with pytest.raises(KeyError) as info:
        it.next()
    assert info.value is exc
    src.fail_at = None
    it.reset()                                      # a reset clears the failure
    assert [int(ds.features.numpy()[0, 0]) for ds in it] == list(range(10))
    it.close()


def test_base_exception_that_is_not_an_exception_still_reaches_the_consumer():
    exc = KeyboardInterrupt()
    src = Source(n=3, fail_at=1, exc=exc)
    with AsyncDataSetIterator(src) as it:
        it.next()
        with pytest.raises(KeyboardInterrupt) as info:
            it.next()
        assert info.value is exc


# -- reset -------------------------------------------------------------------------------------

@pytest.mark.parametrize("queue_size", [2, 4])
def test_reset_at_every_position(queue_size):
    n = 9
    src = Source(n=n)
    with AsyncDataSetIterator(src, queue_size) as it:
        for pos in range(n + 2):
            for i in range(min(pos, n)):
                check(it.next(), src, i)
            if pos > n:
                assert not it.has_next()
            it.reset()
            # the producer starts again when a batch is asked for: it never reads an epoch
            # nobody reads
            assert prefetch_threads() == [] and src.pos == 0
        it.reset()                                  # twice in a row
        got = []
        while it.has_next():
            ds = it.next()
            got.append(int(ds.features.numpy()[0, 0]))
        assert got == list(range(n))


def test_reset_mid_epoch_yields_exactly_the_base_sequence():
    # ND4J's test: 100 items, reset at 50, 150 consumed in total
    src = Source(n=100, rows=1, cols=1)
    it = AsyncDataSetIterator(src, queue_size=8)
    seen = [int(it.next().features.numpy()[0, 0]) for _ in range(50)]
    it.reset()
    seen += [int(ds.features.numpy()[0, 0]) for ds in it]
    it.shutdown()
    assert seen == list(range(50)) + list(range(100))


def test_batches_not_detached_before_a_reset_are_destroyed():
    with AsyncDataSetIterator(Source(n=4)) as it:
        ds = it.next()
        it.next()
        kept = it.next().detach()
        it.reset()
        with pytest.raises(ndws.WorkspaceError) as info:
            ds.features + 1
        assert info.value.kind == "destroyed"
        assert kept.features.numpy()[0, 0] == 2


def test_use_after_shutdown():
    it = AsyncDataSetIterator(Source())
    it.shutdown()
    it.close()                                      # idempotent
    it.close()
    for call in (it.has_next, it.next, it.reset):
        with pytest.raises(RuntimeError) as info:
            call()
        assert str(info.value) == "AsyncDataSetIterator has been shut down"


# -- the ring ----------------------------------------------------------------------------------

def big_source(n=20):
    # 256 x 1024 float32 = 1 MiB of features per batch: blocks of ~1.3 MiB, so the 10 MiB ring
    # holds 7 of them and wraps after a few batches
    return Source(n=n, rows=256, cols=1024)


@pytest.mark.parametrize("rows, blocks", [(256, 7), (512, 5)])
def test_a_batch_kept_past_its_ring_slot_raises_overwritten(rows, blocks):
    # 256 rows: the 10 MiB minimum makes 7 blocks; 512 rows (2 MiB): exactly queue_size + 3
    src = Source(n=20, rows=rows, cols=1024)
    with AsyncDataSetIterator(src, queue_size=2) as it:
        it.next()                                   # batch 0: the learning cycle (a spill)
        kept = it.next()                            # batch 1: the first ring slot
        ring = it.workspace.id
        assert it.workspace.current_size // it.workspace.initial_block_size == blocks
        previous = kept
        for i in range(2, 20):                      # queue_size + 3 and more
            ds = it.next()
            check(ds, src, i)
            check(previous, src, i - 1)             # the previous batch is always intact
            previous = ds
        assert kept.features.stale == "overwritten"
        with pytest.raises(ndws.WorkspaceError) as info:
            kept.features * 2
    assert info.value.kind == "overwritten" and info.value.workspace_id == ring
    assert str(info.value) == (
        f"Op [multiply] x1 argument uses overwritten workspace pointer from workspace [{ring}]: "
        "Circular workspace has wrapped around and reused the memory of this array since its "
        "creation; detach() arrays that must outlive their ring slot.\n"
        "All open workspaces: []\n"
        "For more details, see the ND4J User Guide: "
        "https://deeplearning4j.konduit.ai/nd4j/overview#workspaces-scope-panic")


def test_detach_keeps_a_batch():
    src = big_source()
    with AsyncDataSetIterator(src, queue_size=2) as it:
        it.next()
        kept = it.next().detach()
        for _ in it:
            pass
        assert not kept.features.is_attached() and kept.features.stale is None
        check(kept, src, 1)
    check(kept, src, 1)                             # outlives the ring itself


def test_variable_length_batches_grow_the_ring():
    lengths = [5] * 12 + [40] * 30 + [7] * 5
    src = Source(n=len(lengths), rows=2000, cols=8, lengths=lengths)   # 320 KB then 2.5 MB
    with AsyncDataSetIterator(src, queue_size=2) as it:
        it.next()
        block = it.workspace.initial_block_size
        previous = None
        for i in range(1, len(lengths)):
            ds = it.next()
            check(ds, src, i)
            if previous is not None:
                check(previous, src, i - 1)
            previous = ds
        grown = it.workspace.initial_block_size
        assert ds.features.memory_kind == "main"
    assert grown > block and grown >= 2000 * 8 * 40 * 4


def test_zero_heap_allocation_for_batch_data_in_a_steady_epoch():
    mm = ndws.get_memory_manager()

    def epoch_allocations(n):
        before = mm.allocation_statistics()
        with AsyncDataSetIterator(Source(n=n, rows=64, cols=32), queue_size=4) as it:
            kinds = [ds.features.memory_kind for ds in it]
            after = mm.allocation_statistics()
        return after["allocations"] - before["allocations"], kinds

    short, kinds_short = epoch_allocations(10)
    long, kinds_long = epoch_allocations(200)
    # the learning cycle's two spills and the ring itself, whatever the epoch's length
    assert short == long == 3
    assert kinds_long == ["spill"] + ["main"] * 199


# -- threads -----------------------------------------------------------------------------------

def test_close_and_context_manager_join_the_thread():
    it = AsyncDataSetIterator(Source(n=50), queue_size=2)
    it.next()
    assert len(prefetch_threads()) == 1             # the producer is blocked on a full queue
    it.close()
    assert prefetch_threads() == []
    with AsyncDataSetIterator(Source(n=3)) as it:
        assert len(prefetch_threads()) == 1
    assert prefetch_threads() == []


@pytest.mark.parametrize("consumed", [0, 1, 50])
def test_an_abandoned_iterator_leaks_no_thread(consumed):
    it = AsyncDataSetIterator(Source(n=50), queue_size=2)
    for _ in range(consumed):
        it.next()
    assert len(prefetch_threads()) == 1
    producer_waits_for_room(it)
    del it
    gc.collect()                        # joins the producer: it is not inside the source
    assert prefetch_threads() == []


def test_an_abandoned_iterator_in_a_reference_cycle_leaks_no_thread():
    it = AsyncDataSetIterator(Source(n=50), queue_size=2)
    it.myself = it
    it.next()
    producer_waits_for_room(it)
    del it
    gc.collect()
    assert prefetch_threads() == []


def test_an_abandoned_iterator_whose_source_is_stuck_does_not_hang_the_collector():
    class Entering(Source):
        entered = threading.Event()

        def _next(self):
            if self.pos == 1:
                self.entered.set()
            return super()._next()

    go = threading.Event()
    src = Entering(n=5, gate={1: go})
    it = AsyncDataSetIterator(src, queue_size=2)
    it.next()
    src.entered.wait()                  # the producer waits inside batch 1's read
    thread = prefetch_threads()[0]
    del it
    gc.collect()                        # returns: the producer is not waited for ...
    assert thread.is_alive()
    go.set()                            # ... it ends by itself once the source returns
    thread.join()
    assert src.pos == 2


@pytest.mark.parametrize("producer_delay, consumer_delay", [(0.0005, 0.0), (0.0, 0.0005)])
def test_stress_slow_and_fast_producer(producer_delay, consumer_delay):
    rnd = random.Random(7)
    n = 60
    src = Source(n=n, rows=32, cols=16, delay=producer_delay)
    with AsyncDataSetIterator(src, queue_size=2) as it:
        for epoch in range(4):
            stop = rnd.randrange(n + 1) if epoch % 2 else n
            previous = None
            for i in range(stop):
                ds = it.next()
                check(ds, src, i)
                if previous is not None:
                    check(previous, src, i - 1)
                previous = ds
                if consumer_delay:
                    time.sleep(consumer_delay)
            it.reset()


def channel_closed(it):
    """Until the producer's channel has been closed (by reset or shutdown)."""
    channel = it._state.channel
    with channel.cond:
        channel.cond.wait_for(lambda: channel.closed)


def test_close_from_another_thread_wakes_a_blocked_consumer():
    go = threading.Event()
    src = Source(n=5, gate={0: go})
    it = AsyncDataSetIterator(src)
    result = []
    consumer = threading.Thread(target=lambda: result.append(it.has_next()))
    consumer.start()
    wait_until_blocked(it)
    closer = threading.Thread(target=it.close)
    closer.start()                  # joins the producer, which is still loading batch 0
    channel_closed(it)
    go.set()                        # batch 0 arrives after the stop: it is never queued ...
    closer.join()
    consumer.join()
    assert result == [False]
    check(src.next(), src, 0)       # ... but given back to the source
    check(src.next(), src, 1)


def test_reset_from_another_thread_ends_a_blocked_consumer_s_epoch_only():
    go = threading.Event()
    src = Source(n=4, gate={1: go})
    it = AsyncDataSetIterator(src)
    it.next()
    result = []
    consumer = threading.Thread(target=lambda: result.append(it.has_next()))
    consumer.start()
    wait_until_blocked(it)          # waits for batch 1, which the producer is still reading
    opener = threading.Thread(target=lambda: (channel_closed(it), go.set()))
    opener.start()
    it.reset()                      # from this thread: waits for that read, drops it
    consumer.join()
    opener.join()
    assert result == [False]        # the blocked consumer's epoch ended ...
    assert [int(ds.features.numpy()[0, 0]) for ds in it] == [0, 1, 2, 3]   # ... not the next
    it.close()


def test_array_iterator_with_per_epoch_shuffle_matches_the_base():
    from ndws.data.iterators import ArrayDataSetIterator
    X = np.arange(90, dtype=np.float64).reshape(30, 3)
    y = np.arange(30, dtype=np.float64).reshape(30, 1)
    plain = ArrayDataSetIterator(X, y, batch_size=7, shuffle=True, seed=3)
    expected = [[ds.detach() for ds in plain] for _ in range(3)]
    with AsyncDataSetIterator(ArrayDataSetIterator(X, y, batch_size=7, shuffle=True,
                                                   seed=3)) as it:
        got = [[ds.detach() for ds in it] for _ in range(3)]
    assert got == expected and expected[0] != expected[1]


def test_bypass_debug_mode_gives_detached_batches():
    mgr = ndws.get_workspace_manager()
    mgr.debug_mode = ndws.DebugMode.BYPASS_EVERYTHING
    try:
        src = Source(n=4)
        with AsyncDataSetIterator(src) as it:
            batches = list(it)
        assert [b.features.is_attached() for b in batches] == [False] * 4
        for i, b in enumerate(batches):
            check(b, src, i)
    finally:
        mgr.debug_mode = None


# -- several consumers, any source ----------------------------------------------------------

class GatedEnd(Source):
    """A Source whose end of the epoch is held back until `end_gate` is set."""

    def __init__(self, end_gate, **kw):
        super().__init__(**kw)
        self.end_gate = end_gate

    def has_next(self):
        if self.pos >= self.n:
            self.end_gate.wait()
            return False
        return True


def _in_threads(fn, n):
    results, threads = [None] * n, []
    for i in range(n):
        def body(i=i):
            try:
                results[i] = fn()
            except BaseException as exc:  # collected for the assertion
                results[i] = exc
        threads.append(threading.Thread(target=body, name=f"consumer-{i}"))
    return results, threads


def test_every_waiting_consumer_gets_the_end_of_the_epoch():
    end = threading.Event()
    with AsyncDataSetIterator(GatedEnd(end, n=2)) as it:
        it.next(), it.next()
        results, threads = _in_threads(it.has_next, 2)
        threads[0].start()
        wait_until_blocked(it)           # consumer 0 waits on the queue, consumer 1 behind it
        threads[1].start()
        end.set()                        # the source ends: one END reaches the queue
        for t in threads:
            t.join(30)
            assert not t.is_alive(), "a consumer was left waiting"
        assert results == [False, False]
        assert not it.has_next()


def test_every_waiting_consumer_gets_the_producer_s_error():
    go = threading.Event()
    boom = KeyError("broken batch")
    with AsyncDataSetIterator(Source(n=5, fail_at=0, exc=boom, gate={0: go})) as it:
        results, threads = _in_threads(it.has_next, 2)
        threads[0].start()
        wait_until_blocked(it)
        threads[1].start()
        go.set()
        for t in threads:
            t.join(30)
            assert not t.is_alive(), "a consumer was left waiting"
        assert results == [boom, boom]


class Duck:
    """The iterator protocol's methods, without ndws' base class."""

    def __init__(self, n):
        self.n, self.pos = n, 0

    def has_next(self):
        return self.pos < self.n

    def next(self):
        self.pos += 1
        return DataSet(np.full((2, 3), self.pos - 1, np.float32), np.zeros((2, 1), np.float32))

    def reset(self):
        self.pos = 0


def _firsts(it):
    return [float(ds.features.numpy()[0, 0]) for ds in it]


def test_any_object_with_the_protocol_s_methods_is_a_source():
    with AsyncDataSetIterator(Duck(3)) as it:
        assert _firsts(it) == [0.0, 1.0, 2.0]
        assert it.reset_supported()
        it.reset()
        assert _firsts(it) == [0.0, 1.0, 2.0]


def test_a_generator_of_datasets_is_a_source():
    gen = (DataSet(np.full((2, 3), i, np.float32), np.zeros((2, 1), np.float32))
           for i in range(4))
    with AsyncDataSetIterator(gen) as it:
        assert _firsts(it) == [0.0, 1.0, 2.0, 3.0]
        assert not it.reset_supported()
        with pytest.raises(NotImplementedError, match="does not support reset"):
            it.reset()


def test_a_source_that_yields_none_gets_a_clear_error():
    class YieldsNone(Duck):
        def next(self):
            if self.pos == 2:
                self.pos += 1
                return None
            return super().next()

    with AsyncDataSetIterator(YieldsNone(5)) as it:
        it.next(), it.next()
        with pytest.raises(TypeError) as info:
            it.has_next()
        assert str(info.value) == ("YieldsNone.next(): item 2 of the epoch (counting from 0) is "
                                   "None, where a DataSet was expected")
        with pytest.raises(TypeError):    # and says so again, instead of a bare StopIteration
            it.next()
    with AsyncDataSetIterator([DataSet(np.ones((1, 1)), np.ones((1, 1))), 7]) as it:
        it.next()
        with pytest.raises(TypeError, match=r"^ExistingDataSetIterator over a list: item 1 of "
                                            r"the epoch \(counting from 0\) is an int \(7\), "
                                            r"where a DataSet was expected$"):
            it.next()


class OverridesNext(DataSetIterator):
    """A subclass that overrides next() itself (not the protocol's _next): only the
    producer's own check sees what it returns."""

    def __init__(self, items):
        self.items, self.pos = items, 0

    def has_next(self):
        return self.pos < len(self.items)

    def next(self):
        self.pos += 1
        return self.items[self.pos - 1]


@pytest.mark.parametrize("bad, what", [
    (None, "None"), ("abc", "a str ('abc')"), (np.zeros(2), "a ndarray (array([0., 0.]))"),
    (MultiDataSet([np.ones((1, 1))], [np.ones((1, 1))]),
     "a MultiDataSet (MultiDataSet(features=[float64(1, 1)]...)")])
def test_a_source_overriding_next_that_yields_a_non_dataset(bad, what):
    good = DataSet(np.ones((1, 1)), np.ones((1, 1)))
    with AsyncDataSetIterator(OverridesNext([good, bad])) as it:
        it.next()
        with pytest.raises(TypeError) as info:
            it.next()
    assert str(info.value) == (f"OverridesNext: item 1 of the epoch (counting from 0) is {what}, "
                               f"where a DataSet was expected")


def test_an_item_whose_repr_raises_still_gets_the_clear_error():
    class Unprintable:
        def __repr__(self):
            raise RuntimeError("no repr")

    with AsyncDataSetIterator(OverridesNext([Unprintable()])) as it:
        with pytest.raises(TypeError, match=r"^OverridesNext: item 0 of the epoch \(counting "
                                            r"from 0\) is an Unprintable \(\?\), where"):
            it.next()


def test_repr_of_a_half_constructed_iterator():
    with pytest.raises(TypeError):
        AsyncDataSetIterator(Source(), queue_size="8")
    it = AsyncDataSetIterator.__new__(AsyncDataSetIterator)
    assert repr(it) == ("<AsyncDataSetIterator queue_size=None use_workspace=None closed "
                        "base=None>")
    it.shutdown()                       # nothing to stop, no error


# -- the source's answers (batch, input_columns, total_outcomes) ------------------------------

class GatedReader:
    """A record or sequence reader (has_next, next, reset) of `n` items, item i `make(i)`.
    The producer's first next() sets `reading` and waits for `go`: the producer is then
    provably inside the reader. `calls` has (thread name, item) for every next()."""

    def __init__(self, n, make):
        self.n, self.make, self.i = n, make, 0
        self.reading, self.go = threading.Event(), threading.Event()
        self.calls = []

    def has_next(self):
        return self.i < self.n

    def next(self):
        i = self.i
        self.i += 1
        name = threading.current_thread().name
        self.calls.append((name, i))
        if name == ADSI and not self.go.is_set():
            self.reading.set()
            self.go.wait()
        return self.make(i)

    def reset(self):
        self.i = 0


@pytest.mark.parametrize("kind", ["sequences", "records"])
def test_the_source_s_columns_are_not_asked_while_the_producer_reads(kind):
    # Both iterators answer input_columns() at the start of an epoch by reading the first
    # example and resetting their readers: under a running producer, records were repeated.
    from ndws.data.records import RecordReaderDataSetIterator
    from ndws.data.sequences import SequenceRecordReaderDataSetIterator
    if kind == "sequences":                  # one step per sequence: x, then its class
        reader = GatedReader(6, lambda i: [[float(i), float(i % 2)]])
        base = SequenceRecordReaderDataSetIterator(reader, 2, 2, 1)
    else:
        reader = GatedReader(6, lambda i: [float(i), float(i % 2)])
        base = RecordReaderDataSetIterator(reader, 2, label_index=1, num_classes=2)
    with AsyncDataSetIterator(base, queue_size=2) as it:
        try:
            assert reader.reading.wait(60)   # the producer is inside reader.next()
            before = list(reader.calls)
            assert (it.input_columns(), it.total_outcomes(), it.batch()) == (1, 2, 2)
            assert reader.calls == before    # nothing read on this thread meanwhile
        finally:
            reader.go.set()
        batches = [(ds.features.numpy().reshape(2), ds.labels.numpy().reshape(2, 2))
                   for ds in it]
    x = np.arange(6, dtype=np.float32)
    assert len(batches) == 3
    for k, (features, labels) in enumerate(batches):
        np.testing.assert_array_equal(features, x[2 * k:2 * k + 2])
        np.testing.assert_array_equal(labels, np.eye(2, dtype=np.float32)[[0, 1]])
    # the constructing thread read (and reset) before the producer's first read, never after
    first = reader.calls.index((ADSI, 0))
    assert {name for name, _ in reader.calls[first:]} == {ADSI}
    assert reader.calls[:first] == [(threading.current_thread().name, 0)]


class Answering(Source):
    """A Source that records the thread of each input_columns() and answers `self.cols`, or
    raises `self.error` when one is set."""

    def __init__(self, error=None, **kw):
        super().__init__(**kw)
        self.error, self.asked = error, []

    def input_columns(self):
        self.asked.append(threading.current_thread().name)
        if self.error is not None:
            raise self.error
        return self.cols


def test_a_source_that_cannot_answer_is_prefetched_and_its_error_raised_again():
    src = Answering(error=LookupError("no columns here"), n=3)
    with AsyncDataSetIterator(src) as it:
        for _ in range(2):
            with pytest.raises(LookupError, match=r"^no columns here$") as info:
                it.input_columns()
            assert info.value is src.error
        assert it.total_outcomes() == 2
        for i, ds in enumerate(it):
            check(ds, src, i)
    assert src.asked == [threading.current_thread().name]       # once, when it was made


def test_the_answers_are_asked_again_after_reset_before_the_producer_starts():
    here = threading.current_thread().name
    src = Answering(n=3)
    with AsyncDataSetIterator(src, queue_size=2) as it:
        assert it.input_columns() == 3
        src.cols = 5
        assert len(list(it)) == 3 and it.input_columns() == 3   # not asked during the epoch
        it.reset()
        assert src.asked == [here]
        assert it.input_columns() == 5 and src.asked == [here, here]   # asked when asked
        it.reset()
        src.cols = 7
        assert it.next().features.shape == (4, 7)     # asked before the producer started
        assert src.asked == [here] * 3
        assert it.input_columns() == 7 and src.asked == [here] * 3


def test_the_multi_dataset_iterator_asks_batch_once_and_has_no_columns():
    class Counting(MultiSource):
        def batch(self):
            self.asked = getattr(self, "asked", 0) + 1
            return 3

    src = Counting(n=4)
    with AsyncMultiDataSetIterator(src) as it:
        assert it.batch() == 3 and len(list(it)) == 4 and it.batch() == 3
    assert src.asked == 1
    # DL4J's MultiDataSetIterator has no inputColumns / totalOutcomes
    assert not hasattr(it, "input_columns") and not hasattr(it, "total_outcomes")


class GatedReset(Source):
    """A Source whose reset, once `gate_resets` is set, sets `resetting` and waits for
    `finish`; a batch read meanwhile is counted in `read_while_resetting` and sets `moved`."""

    gate_resets = False

    def __init__(self, **kw):
        super().__init__(**kw)
        self.resetting, self.finish = threading.Event(), threading.Event()
        self.moved = threading.Event()
        self.read_while_resetting = 0

    def _next(self):
        if self.resetting.is_set() and not self.finish.is_set():
            self.read_while_resetting += 1
            self.moved.set()
        return super()._next()

    def _reset(self):
        if self.gate_resets:
            self.resetting.set()
            self.finish.wait()
        super()._reset()


class Signalling:
    """Stands in for a lock: sets `event` when thread `name` asks for it, then takes it."""

    def __init__(self, lock, name, event):
        self.lock, self.name, self.event = lock, name, event

    def __enter__(self):
        if threading.current_thread().name == self.name:
            self.event.set()
        return self.lock.__enter__()

    def __exit__(self, *exc_info):
        return self.lock.__exit__(*exc_info)


def test_a_batch_asked_for_during_a_reset_on_another_thread_waits_for_it():
    src = GatedReset(n=20)
    with AsyncDataSetIterator(src, queue_size=2) as it:
        it.next(), it.next()
        # `moved`: a producer read the source mid-reset (what happened before) ...
        it._resetting = Signalling(getattr(it, "_resetting", threading.Lock()), "consumer",
                                   src.moved)
        src.gate_resets = True
        resetter = threading.Thread(target=it.reset)
        got = []
        consumer = threading.Thread(target=lambda: got.append(it.next().detach()),
                                    name="consumer")
        try:
            resetter.start()
            assert src.resetting.wait(60)     # reset() is inside the source's reset
            consumer.start()
            assert src.moved.wait(60)         # ... or the consumer waits for the reset to end
        finally:
            src.finish.set()
            for t in (resetter, consumer):
                if t.ident is not None:
                    t.join(60)
        assert not resetter.is_alive() and not consumer.is_alive()
        assert src.read_while_resetting == 0 and len(got) == 1
        check(got[0], src, 0)                 # the first batch of the new epoch
        check(it.next(), src, 1)
