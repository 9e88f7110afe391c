"""The iterator protocol and the synchronous iterators: exact batch sequences against NumPy
slicing, reproducible shuffles, last batch kept or dropped, pre_processor, reset, Python
iteration, shields, errors."""
from __future__ import annotations

import numpy as np
import pytest

import ndws
from conftest import assert_matches
from ndws.data.dataset import DataSet, MultiDataSet
from ndws.data.iterators import (
    ArrayDataSetIterator, ArrayMultiDataSetIterator, AsyncShieldDataSetIterator,
    AsyncShieldMultiDataSetIterator, DataSetIterator, ExistingDataSetIterator,
    ExistingMultiDataSetIterator, ListDataSetIterator, ListMultiDataSetIterator,
    MultiDataSetIterator, WorkspacesShieldDataSetIterator)


@pytest.fixture
def xy(rng):
    x = rng.standard_normal((23, 4))
    y = np.eye(3)[rng.integers(0, 3, 23)]
    return x, y


class AddOne:
    def __init__(self):
        self.calls = 0

    def pre_process(self, ds):
        self.calls += 1
        ds.features += 1.0


def _epoch(it):
    return [b.features.numpy() for b in it]


# -- ArrayDataSetIterator ------------------------------------------------------------------------

@pytest.mark.parametrize("drop_last", [False, True])
def test_array_iterator_matches_numpy_slicing(xy, drop_last):
    x, y = xy
    it = ArrayDataSetIterator(x, y, 5, drop_last=drop_last)
    starts = range(0, 20 if drop_last else 23, 5)
    batches = list(it)
    assert len(batches) == len(starts) == it.num_batches() == len(it)
    for b, s in zip(batches, starts):
        assert isinstance(b, DataSet)
        assert_matches(b.features, x[s:s + 5])
        assert_matches(b.labels, y[s:s + 5])
    assert batches[-1].num_examples() == (5 if drop_last else 3)
    assert not it.has_next()
    with pytest.raises(StopIteration):
        it.next()
    assert (it.batch(), it.input_columns(), it.total_outcomes(), it.total_examples()) == \
        (5, 4, 3, 23)
    # in memory: nothing for a prefetcher to hide (docs/data.md, "Prefetch in fit")
    assert it.reset_supported() and not it.async_supported()


def test_array_iterator_ndarray_sources_and_masks(rng):
    x = rng.standard_normal((7, 2, 5)).astype(np.float32)
    y = rng.standard_normal((7, 3, 5)).astype(np.float32)
    m = (rng.random((7, 5)) > 0.5).astype(np.float32)
    it = ArrayDataSetIterator(ndws.asarray(x), ndws.asarray(y), 3, features_mask=m,
                              labels_mask=ndws.asarray(m))
    batches = list(it)
    for b, s in zip(batches, (0, 3, 6)):
        assert_matches(b.features, x[s:s + 3])
        assert_matches(b.features_mask, m[s:s + 3])
        assert_matches(b.labels_mask, m[s:s + 3])
    assert (it.input_columns(), it.total_outcomes()) == (2, 3)


def test_array_iterator_images_input_columns(rng):
    x = rng.random((4, 3, 2, 2))
    it = ArrayDataSetIterator(x, np.eye(4), 2)
    assert it.input_columns() == 12 and it.total_outcomes() == 4


def test_batches_do_not_alias_the_source(xy):
    x, y = xy
    orig = x.copy()
    it = ArrayDataSetIterator(x, y, 4)
    it.pre_processor = AddOne()
    list(it)
    np.testing.assert_array_equal(x, orig)


def test_batches_are_created_in_current_workspace(xy):
    x, y = xy
    it = ArrayDataSetIterator(x, y, 4)
    with ndws.workspace("PRODUCER"):
        b = it.next()
        assert b.features.workspace_id == "PRODUCER"
        assert b.labels.workspace_id == "PRODUCER"
        kept = b.copy().detach()
    assert b.features.stale == "leaked"
    assert_matches(kept.features, x[:4])
    free = it.next()
    assert free.features.memory_kind == "detached"


def test_shuffle_is_a_permutation_per_epoch_and_reproducible(xy):
    x, y = xy
    a = ArrayDataSetIterator(x, y, 5, shuffle=True, seed=11)
    b = ArrayDataSetIterator(x, y, 5, shuffle=True, seed=11)
    c = ArrayDataSetIterator(x, y, 5, shuffle=True, seed=12)
    epochs_a = [np.concatenate(_epoch(a)) for _ in range(3)]
    epochs_b = [np.concatenate(_epoch(b)) for _ in range(3)]
    for ea, eb in zip(epochs_a, epochs_b):
        np.testing.assert_array_equal(ea, eb)
    assert a.epoch == 2
    # every epoch is a permutation of the rows, and epochs differ
    for e in epochs_a:
        np.testing.assert_array_equal(np.sort(e, axis=0), np.sort(x, axis=0))
    assert not np.array_equal(epochs_a[0], epochs_a[1])
    assert not np.array_equal(epochs_a[0], np.concatenate(_epoch(c)))


def test_shuffle_order_is_the_numpy_oracle(xy):
    x, y = xy
    it = ArrayDataSetIterator(x, y, 6, shuffle=True, seed=3)
    for epoch in range(2):
        if epoch:
            it.reset()                  # so that `order` is read after the reset
        order = it.order
        batches = list(it)
        for k, b in enumerate(batches):
            idx = order[6 * k:6 * k + 6]
            assert_matches(b.features, x[idx])
            assert_matches(b.labels, y[idx])
    seq = np.random.SeedSequence([3, 0])
    it2 = ArrayDataSetIterator(x, y, 6, shuffle=True, seed=3)
    np.testing.assert_array_equal(it2.order, np.random.default_rng(seq).permutation(23))


def test_unseeded_shuffle_still_records_a_seed(xy):
    x, y = xy
    a = ArrayDataSetIterator(x, y, 5, shuffle=True)
    b = ArrayDataSetIterator(x, y, 5, shuffle=True, seed=a.seed)
    np.testing.assert_array_equal(np.concatenate(_epoch(a)), np.concatenate(_epoch(b)))


def test_pre_processor_applied_to_each_batch(xy):
    x, y = xy
    it = ArrayDataSetIterator(x, y, 10)
    pp = AddOne()
    it.pre_processor = pp
    assert it.pre_processor is pp
    got = _epoch(it)
    assert pp.calls == 3
    assert_matches(got[0], x[:10] + 1.0)
    it.pre_processor = None
    assert_matches(_epoch(it)[0], x[:10])
    with pytest.raises(TypeError, match=r"^pre_processor must have a pre_process\(dataset\) "
                                        r"method or be None, got int$"):
        it.pre_processor = 3


def test_python_iteration_twice_is_two_epochs_and_reset_mid_epoch(xy):
    x, y = xy
    it = ArrayDataSetIterator(x, y, 5)
    first, second = _epoch(it), _epoch(it)
    assert len(first) == len(second) == 5
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    it.reset()
    it.next()
    it.next()
    third = _epoch(it)               # partly consumed: __iter__ resets first
    assert len(third) == 5
    np.testing.assert_array_equal(third[0], x[:5])
    it.reset()
    assert it.has_next()
    np.testing.assert_array_equal(it.next().features.numpy(), x[:5])


def test_builtin_next(xy):
    x, y = xy
    it = ArrayDataSetIterator(x, y, 20)
    assert next(it).num_examples() == 20
    assert next(it).num_examples() == 3
    with pytest.raises(StopIteration):
        next(it)


@pytest.mark.parametrize("kwargs, exc, msg", [
    (dict(batch_size=0), ValueError, r"^batch_size must be a positive int, got 0$"),
    (dict(batch_size=2.5), TypeError, r"^batch_size must be a positive int, got 2\.5$"),
    (dict(batch_size=True), TypeError, r"^batch_size must be a positive int, got True$"),
    (dict(batch_size=2, seed="x"), TypeError, r"^seed must be a non-negative int"),
    (dict(batch_size=2, seed=-1), TypeError, r"^seed must be a non-negative int"),
])
def test_array_iterator_argument_errors(xy, kwargs, exc, msg):
    x, y = xy
    with pytest.raises(exc, match=msg):
        ArrayDataSetIterator(x, y, **kwargs)


def test_array_iterator_shape_errors(xy):
    x, y = xy
    with pytest.raises(ValueError, match=r"^labels has shape \(22, 3\), expected 23 examples"):
        ArrayDataSetIterator(x, y[:22], 4)
    with pytest.raises(ValueError, match=r"^features_mask has shape \(23, 2\), expected "
                                         r"\(23, 1\) or \(23, 4\)|^features_mask has shape "
                                         r"\(0, 2\)"):
        ArrayDataSetIterator(x, y, 4, features_mask=np.ones((23, 2)))
    with pytest.raises(TypeError, match=r"^features must be an NDArray or array_like, got "
                                        r"None$"):
        ArrayDataSetIterator(None, y, 4)
    with pytest.raises(ValueError, match=r"^labels_mask has shape \(5, 1\), expected 23 "
                                         r"examples"):
        ArrayDataSetIterator(x, y, 4, labels_mask=np.ones((5, 1)))


# -- ArrayMultiDataSetIterator -------------------------------------------------------------------

def test_array_multi_iterator(rng):
    x1 = rng.standard_normal((11, 2))
    x2 = rng.standard_normal((11, 3, 4))
    m2 = np.ones((11, 4))
    y1 = rng.standard_normal((11, 1))
    it = ArrayMultiDataSetIterator([x1, x2], [y1], 4, features_masks=[None, m2])
    batches = list(it)
    assert [b.num_examples() for b in batches] == [4, 4, 3]
    for b, s in zip(batches, (0, 4, 8)):
        assert isinstance(b, MultiDataSet)
        assert_matches(b.features[0], x1[s:s + 4])
        assert_matches(b.features[1], x2[s:s + 4])
        assert_matches(b.features_masks[1], m2[s:s + 4])
        assert b.features_masks[0] is None and b.labels_masks is None
        assert_matches(b.labels[0], y1[s:s + 4])
    sh = ArrayMultiDataSetIterator([x1, x2], [y1], 4, shuffle=True, seed=9, drop_last=True)
    order = sh.order
    got = list(sh)
    assert len(got) == 2 == sh.num_batches()
    assert_matches(got[1].features[1], x2[order[4:8]])
    assert_matches(got[1].labels[0], y1[order[4:8]])
    with pytest.raises(TypeError, match=r"^features must be a list of NDArrays or "
                                        r"array_likes, got ndarray$"):
        ArrayMultiDataSetIterator(x1, [y1], 2)
    with pytest.raises(ValueError, match=r"^labels\[0\] has shape \(0, 1\), expected|"
                                         r"^labels\[0\] has shape"):
        ArrayMultiDataSetIterator([x1], [y1[:3]], 2)


# -- ListDataSetIterator -------------------------------------------------------------------------

def test_list_iterator_merges_batch_size_datasets(xy):
    x, y = xy
    singles = DataSet(x, y).as_list()
    it = ListDataSetIterator(singles, batch_size=10)
    batches = list(it)
    assert [b.num_examples() for b in batches] == [10, 10, 3]
    assert_matches(batches[2].features, x[20:])
    assert (it.batch(), it.input_columns(), it.total_outcomes()) == (10, 4, 3)
    pp = AddOne()
    it.pre_processor = pp
    assert_matches(list(it)[0].features, x[:10] + 1)
    # stored data sets were not modified by the pre-processor
    assert_matches(list(it)[0].features, x[:10] + 1)


def test_list_iterator_default_one_dataset_per_batch(xy):
    x, y = xy
    parts = DataSet(x, y).batch_by(8)
    it = ListDataSetIterator(parts)
    got = list(it)
    assert [g.num_examples() for g in got] == [8, 8, 7]
    assert got[0] == parts[0] and got[0] is not parts[0]
    assert it.batch() == 8
    with ndws.workspace("LIST"):
        it.reset()
        assert it.next().features.workspace_id == "LIST"


def test_list_iterator_errors(xy):
    x, y = xy
    with pytest.raises(TypeError, match=r"^datasets\[1\] must be a DataSet, got str$"):
        ListDataSetIterator([DataSet(x, y), "no"])
    with pytest.raises(TypeError, match=r"^datasets must be a list of DataSet, got a single "
                                        r"DataSet$"):
        ListDataSetIterator(DataSet(x, y))
    with pytest.raises(ValueError, match=r"^batch_size must be a positive int, got -1$"):
        ListDataSetIterator([DataSet(x, y)], -1)


def test_list_multi_iterator(rng):
    mds = MultiDataSet([rng.standard_normal((6, 2))], [rng.standard_normal((6, 1))])
    it = ListMultiDataSetIterator(mds.batch_by(1), batch_size=4)
    got = list(it)
    assert [g.num_examples() for g in got] == [4, 2]
    assert MultiDataSet.merge(got) == mds
    with pytest.raises(TypeError, match=r"^datasets\[0\] must be a MultiDataSet, got "
                                        r"DataSet$"):
        ListMultiDataSetIterator([DataSet(np.ones((1, 1)), np.ones((1, 1)))])


# -- ExistingDataSetIterator ---------------------------------------------------------------------

def test_existing_iterator_over_a_list_resets(xy):
    x, y = xy
    parts = DataSet(x, y).batch_by(10)
    it = ExistingDataSetIterator(parts)
    assert it.reset_supported()
    assert (it.batch(), it.input_columns(), it.total_outcomes()) == (10, 4, 3)
    first = list(it)
    assert [a is b for a, b in zip(first, parts)] == [True] * 3      # returned as they are
    assert len(list(it)) == 3                                       # second epoch


def test_existing_iterator_over_a_one_shot_iterator(xy):
    x, y = xy
    parts = DataSet(x, y).batch_by(10)
    it = ExistingDataSetIterator(iter(parts))
    assert not it.reset_supported()
    assert len(list(it)) == 3
    assert list(it) == []
    with pytest.raises(NotImplementedError, match=r"^ExistingDataSetIterator does not "
                                                  r"support reset\(\)$"):
        it.reset()


def test_existing_iterator_generator_and_bad_items(xy):
    x, y = xy

    def gen():
        yield DataSet(x, y)
        yield 5

    it = ExistingDataSetIterator(gen())
    assert it.next().num_examples() == 23
    with pytest.raises(TypeError, match=r"^ExistingDataSetIterator over a generator: item 1 of "
                                        r"the epoch \(counting from 0\) is an int \(5\), where a "
                                        r"DataSet was expected$"):
        it.has_next()
    with pytest.raises(TypeError, match=r"^iterable must be an iterable of DataSet, got int$"):
        ExistingDataSetIterator(3)


def test_existing_multi_iterator(rng):
    mds = MultiDataSet([rng.standard_normal((4, 2))], [rng.standard_normal((4, 1))])
    it = ExistingMultiDataSetIterator([mds, mds])
    assert it.batch() == 4
    assert [m is mds for m in it] == [True, True]
    assert len(list(it)) == 2


# -- protocol for subclasses ---------------------------------------------------------------------

class CountingIterator(DataSetIterator):
    """A minimal subclass written against the documented protocol."""

    def __init__(self, n):
        self.n, self.i, self.resets = n, 0, 0

    def has_next(self):
        return self.i < self.n

    def _next(self):
        self.i += 1
        return DataSet(np.full((1, 1), float(self.i)), np.zeros((1, 1)))

    def _reset(self):
        self.i = 0
        self.resets += 1

    def batch(self):
        return 1

    def input_columns(self):
        return 1

    def total_outcomes(self):
        return 1


def test_subclass_protocol_resets_only_when_started():
    it = CountingIterator(3)
    assert [d.features.item() for d in it] == [1.0, 2.0, 3.0]
    assert it.resets == 0
    assert [d.features.item() for d in it] == [1.0, 2.0, 3.0]
    assert it.resets == 1
    it.reset()
    assert [d.features.item() for d in it] == [1.0, 2.0, 3.0]
    assert it.resets == 2                          # no extra reset right after reset()


def test_abstract_base_methods_raise():
    base = DataSetIterator()
    for call in (base.has_next, base.batch, base.input_columns, base.total_outcomes):
        with pytest.raises(NotImplementedError):
            call()
    assert isinstance(ArrayMultiDataSetIterator([np.ones((2, 1))], [np.ones((2, 1))], 1),
                      MultiDataSetIterator)


# -- shields -------------------------------------------------------------------------------------

def test_async_shield_is_a_pass_through(xy):
    x, y = xy
    base = ArrayDataSetIterator(x, y, 10)
    shield = AsyncShieldDataSetIterator(base)
    assert not shield.async_supported()
    assert AsyncShieldDataSetIterator(ExistingDataSetIterator(iter([]))).base.async_supported()
    assert (shield.batch(), shield.input_columns(), shield.total_outcomes()) == (10, 4, 3)
    pp = AddOne()
    shield.pre_processor = pp
    assert base.pre_processor is pp
    got = _epoch(shield)
    assert pp.calls == 3                                  # applied once, by the base
    assert_matches(got[0], x[:10] + 1)
    assert len(_epoch(shield)) == 3                       # second epoch through the shield
    base.reset()
    base.next()                                           # partly consumed directly ...
    assert len(_epoch(shield)) == 3                       # ... the shield still resets it
    with pytest.raises(TypeError, match=r"^base: expected a DataSetIterator, an object with "
                                        r"has_next\(\) and next\(\), or an iterable of "
                                        r"DataSets, got int$"):
        AsyncShieldDataSetIterator(3)
    assert list(AsyncShieldDataSetIterator([])) == []     # any iterable of DataSets


def test_async_shield_multi(rng):
    base = ArrayMultiDataSetIterator([rng.standard_normal((5, 2))],
                                     [rng.standard_normal((5, 1))], 2)
    shield = AsyncShieldMultiDataSetIterator(base)
    assert not shield.async_supported()
    assert [m.num_examples() for m in shield] == [2, 2, 1]
    assert [m.num_examples() for m in shield] == [2, 2, 1]
    with pytest.raises(TypeError, match=r"^base: expected a MultiDataSetIterator, an object "
                                        r"with has_next\(\) and next\(\), or an iterable of "
                                        r"MultiDataSets, got ArrayDataSetIterator$"):
        AsyncShieldMultiDataSetIterator(ArrayDataSetIterator(np.ones((2, 1)),
                                                             np.ones((2, 1)), 1))


RING_CONF = ndws.WorkspaceConfiguration(policy_reset="ENDOFBUFFER_REACHED",
                                        overallocation_limit=1.0)


class RingProducer(DataSetIterator):
    """Builds each batch inside a circular workspace (one cycle per batch), as an async
    producer's ring does."""

    def __init__(self, ws, x, y):
        self.ws, self.x, self.y, self.done = ws, x, y, False

    def has_next(self):
        return not self.done

    def _next(self):
        self.done = True
        self.ws.__enter__()
        ds = DataSet(self.x, self.y)
        self.ws.__exit__(None, None, None)
        return ds

    def _reset(self):
        self.done = False

    def batch(self):
        return len(self.x)

    def input_columns(self):
        return self.x.shape[1]

    def total_outcomes(self):
        return self.y.shape[1]


def test_workspaces_shield_detaches_without_current_workspace(xy):
    x, y = xy
    ring = ndws.workspace("RING_LIKE", RING_CONF)
    shield = WorkspacesShieldDataSetIterator(RingProducer(ring, x, y))
    ds = shield.next()
    assert not ds.features.is_attached() and not ds.labels.is_attached()
    # the ring comes round and overwrites the slot: the shielded batch is unaffected
    with ring:
        unshielded = DataSet(x, y)
    for _ in range(3):
        with ring:
            ndws.full((23, 4), 7.0)
    assert unshielded.features.stale == "overwritten"
    with pytest.raises(ndws.WorkspaceError, match="overwritten"):
        unshielded.detach()
    assert_matches(ds.features, x)
    assert_matches(ds.labels, y)


def test_workspaces_shield_migrates_into_current_workspace(xy):
    x, y = xy
    ring = ndws.workspace("RING_LIKE2", RING_CONF)
    shield = WorkspacesShieldDataSetIterator(RingProducer(ring, x, y))
    with ndws.workspace("CONSUMER"):
        ds = shield.next()
        assert ds.features.workspace_id == "CONSUMER"
        assert ds.labels.workspace_id == "CONSUMER"
        assert_matches(ds.features, x)
    assert shield.async_supported()


def test_workspaces_shield_leaves_detached_batches(xy):
    x, y = xy
    base = ArrayDataSetIterator(x, y, 10)
    shield = WorkspacesShieldDataSetIterator(base)
    got = list(shield)
    assert [g.num_examples() for g in got] == [10, 10, 3]
    assert all(g.features.memory_kind == "detached" for g in got)
    assert (shield.batch(), shield.input_columns(), shield.total_outcomes()) == (10, 4, 3)


# -- after an error, and any iterable as an iterator -------------------------------------------

class FailsOnce:
    """A pre-processor that raises on its k-th call only (a transient failure)."""

    def __init__(self, k):
        self.k, self.calls = k, 0

    def pre_process(self, ds):
        self.calls += 1
        if self.calls == self.k:
            raise OSError("network hiccup")


def test_after_a_failed_batch_the_iterator_refuses_until_reset(xy):
    x, y = xy
    it = ArrayDataSetIterator(x, y, 10)
    it.pre_processor = FailsOnce(2)
    first = it.next()
    with pytest.raises(OSError, match="network hiccup"):
        it.next()                          # batch 1 was read, then its pre-processor failed
    for _ in range(2):                     # no silent skip to batch 2
        with pytest.raises(RuntimeError) as info:
            it.next()
        assert str(info.value) == (
            "ArrayDataSetIterator stopped at an error in an earlier batch (OSError: network "
            "hiccup); that batch is lost, so it does not go on: call reset() to start the "
            "epoch again")
        assert isinstance(info.value.__cause__, OSError)
    it.reset()
    again = [ds.features.numpy() for ds in it]
    assert len(again) == 3
    np.testing.assert_array_equal(again[0], first.features.numpy())
    np.testing.assert_array_equal(again[1], x[10:20])   # batch 1 is delivered after all


def test_a_subclass_that_returns_the_wrong_type_gets_a_clear_error():
    class Broken(CountingIterator):
        def _next(self):
            super()._next()
            return None

    it = Broken(3)
    with pytest.raises(TypeError) as info:
        it.next()
    assert str(info.value) == ("Broken: item 0 of the epoch (counting from 0) is None, where a "
                               "DataSet was expected")
    with pytest.raises(RuntimeError, match="^Broken stopped at an error"):
        it.next()


def _dataset(i):
    return DataSet(np.full((2, 3), i, np.float32), np.zeros((2, 1), np.float32))


def test_as_data_set_iterator():
    from ndws.data import as_data_set_iterator
    base = ArrayDataSetIterator(np.ones((4, 1)), np.ones((4, 1)), 2)
    assert as_data_set_iterator(base) is base
    listed = as_data_set_iterator([_dataset(0), _dataset(1)])
    assert isinstance(listed, ExistingDataSetIterator) and listed.reset_supported()
    assert [d.features.numpy()[0, 0] for d in listed] == [0.0, 1.0]
    single = as_data_set_iterator(_dataset(5))
    assert [d.features.numpy()[0, 0] for d in single] == [5.0]
    gen = as_data_set_iterator(_dataset(i) for i in range(3))
    assert not gen.reset_supported()
    assert [d.features.numpy()[0, 0] for d in gen] == [0.0, 1.0, 2.0]

    class Duck:
        def __init__(self):
            self.pos = 0

        def has_next(self):
            return self.pos < 2

        def next(self):
            self.pos += 1
            return _dataset(self.pos)

    duck = as_data_set_iterator(Duck())
    assert isinstance(duck, DataSetIterator) and not duck.reset_supported()
    assert (duck.batch(), duck.input_columns(), duck.async_supported()) == (0, 0, True)
    duck.pre_processor = AddOne()
    assert [d.features.numpy()[0, 0] for d in duck] == [2.0, 3.0]
    assert repr(duck).startswith("<_AdaptedDataSetIterator of <")


@pytest.mark.parametrize("bad, kind", [(3, "int"), ("batches.csv", "str"), (None, "NoneType"),
                                       (np.ones(3), "ndarray"), (ndws.ones(3), "NDArray")])
def test_as_data_set_iterator_refuses_what_is_no_iterator(bad, kind):
    from ndws.data import as_data_set_iterator
    with pytest.raises(TypeError) as info:
        as_data_set_iterator(bad, "data")
    assert str(info.value) == (f"data: expected a DataSetIterator, an object with has_next() "
                               f"and next(), or an iterable of DataSets, got {kind}")


def test_as_multi_data_set_iterator():
    from ndws.data import as_multi_data_set_iterator
    mds = MultiDataSet([np.ones((2, 1))], [np.ones((2, 1))])
    assert [m.num_examples() for m in as_multi_data_set_iterator([mds, mds])] == [2, 2]
    with pytest.raises(TypeError, match=r"^iterator: expected a MultiDataSetIterator, .* got "
                                        r"ArrayDataSetIterator$"):
        as_multi_data_set_iterator(ArrayDataSetIterator(np.ones((2, 1)), np.ones((2, 1)), 1))
    it = as_multi_data_set_iterator([_dataset(0)])
    with pytest.raises(TypeError, match=r"^ExistingMultiDataSetIterator over a list: item 0 of "
                                        r"the epoch \(counting from 0\) is a DataSet \(DataSet\("
                                        r"features=float32\(2, 3\), label\.\.\.\), where a "
                                        r"MultiDataSet was expected$"):
        it.next()
