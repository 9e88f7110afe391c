"""shard(rank, size) of the array and record-reader iterators (docs/distributed.md, "Sharding
the data"): the shards are disjoint, cover every example once per epoch, have the same number
of batches, and their batch k concatenated in rank order is the unsharded global batch k."""
from __future__ import annotations

import numpy as np
import pytest

from ndws.data import (ArrayDataSetIterator, ArrayMultiDataSetIterator, CSVRecordReader,
                       OneHot, RecordReaderDataSetIterator, RecordReaderMultiDataSetIterator)


def _ids(it):
    """Each batch's example ids (column 0 of the features)."""
    return [ds.features.numpy()[:, 0].astype(int).tolist() for ds in it]


def _check_shards(shards, whole_batches, dropped=()):
    per_rank = [_ids(s) for s in shards]
    counts = {len(batches) for batches in per_rank}
    assert counts == {len(whole_batches)}, "every rank has the same number of batches"
    if hasattr(shards[0], "num_batches"):       # the array iterators know it in advance
        assert {s.num_batches() for s in shards} == {len(whole_batches)}
    for k, global_batch in enumerate(whole_batches):
        assert sum((batches[k] for batches in per_rank), []) == global_batch
        sizes = [len(batches[k]) for batches in per_rank]
        assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    seen = [i for batches in per_rank for b in batches for i in b]
    assert len(seen) == len(set(seen)), "the shards are disjoint"
    return sorted(seen)


@pytest.mark.parametrize("n", [1, 7, 24, 25, 31])
@pytest.mark.parametrize("size", [1, 2, 3, 5])
@pytest.mark.parametrize("drop_last", [False, True])
def test_array_shards_are_disjoint_cover_and_equal_in_count(n, size, drop_last):
    x = np.arange(n, dtype=np.float32).reshape(n, 1)
    y = np.zeros((n, 2), np.float32)
    it = ArrayDataSetIterator(x, y, batch_size=3, shuffle=True, seed=11, drop_last=drop_last)
    shards = [it.shard(r, size) for r in range(size)]
    whole = ArrayDataSetIterator(x, y, batch_size=3 * size, shuffle=True, seed=11,
                                 drop_last=drop_last)
    for epoch in range(2):          # reset() moves every shard to the same next permutation
        whole_batches = _ids(whole)
        seen = _check_shards(shards, whole_batches)
        kept = sum(whole_batches, [])
        assert seen == sorted(kept)
        if not drop_last:
            assert seen == list(range(n)), "every example once per epoch"
        for s in shards:
            s.reset()
        whole.reset()
    assert sum(s.total_examples() for s in shards) == n


def test_a_short_last_global_batch_gives_later_ranks_zero_rows():
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    it = ArrayDataSetIterator(x, x, batch_size=2)
    batches = [list(it.shard(r, 4)) for r in range(4)]
    assert [[ds.num_examples() for ds in b] for b in batches] == [[2, 1], [2, 1], [2, 0],
                                                                  [2, 0]]
    empty = batches[3][1]
    assert empty.features.shape == (0, 1) and empty.labels.shape == (0, 1)


def test_shard_leaves_the_original_alone_and_keeps_the_pre_processor():
    class Double:
        def pre_process(self, ds):
            ds.features.assign(ds.features * 2)

    x = np.arange(6, dtype=np.float32).reshape(6, 1)
    it = ArrayDataSetIterator(x, x, batch_size=2)
    it.pre_processor = Double()
    it.next()
    shard = it.shard(1, 2)
    assert shard.pre_processor is it.pre_processor
    assert _ids(shard) == [[4, 6], [10]]          # rows 2, 3 and 5, doubled
    assert _ids(it) == [[0, 2], [4, 6], [8, 10]]  # the original restarts as before


def test_array_multi_data_set_shards():
    a = np.arange(9, dtype=np.float32).reshape(9, 1)
    it = ArrayMultiDataSetIterator([a, -a], [a], batch_size=2, shuffle=True, seed=[1, 2])
    got = [[md.features[0].numpy().ravel().astype(int).tolist() for md in it.shard(r, 2)]
           for r in range(2)]
    whole = [md.features[0].numpy().ravel().astype(int).tolist()
             for md in ArrayMultiDataSetIterator([a, -a], [a], batch_size=4, shuffle=True,
                                                 seed=[1, 2])]
    assert [got[0][k] + got[1][k] for k in range(len(whole))] == whole
    shard = it.shard(0, 2)
    md = shard.next()
    np.testing.assert_array_equal(md.features[1].numpy(), -md.features[0].numpy())


@pytest.fixture
def csv_path(tmp_path):
    path = tmp_path / "records.csv"
    path.write_text("id,x,label\n" + "".join(f"{i},{i / 10},{i % 3}\n" for i in range(23)))
    return path


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
def test_record_reader_shards_are_disjoint_cover_and_equal_in_count(csv_path, size):
    it = RecordReaderDataSetIterator(CSVRecordReader(csv_path, skip_num_lines=1), 2,
                                     label_index=2, num_classes=3)
    shards = [it.shard(r, size) for r in range(size)]
    whole = _ids(RecordReaderDataSetIterator(CSVRecordReader(csv_path, skip_num_lines=1),
                                             2 * size, label_index=2, num_classes=3))
    for _ in range(2):
        assert _check_shards(shards, whole) == list(range(23))
        for s in shards:
            s.reset()
    ds = shards[-1].next()
    np.testing.assert_array_equal(ds.labels.numpy().argmax(1), ds.features.numpy()[:, 0] % 3)
    assert _ids(it)[0] == [0, 1]                 # the original reads its own reader copy


def test_record_reader_multi_data_set_shards(csv_path):
    def make(batch):
        return RecordReaderMultiDataSetIterator(
            {"csv": CSVRecordReader(csv_path, skip_num_lines=1)}, batch,
            inputs=[("csv", 0, 1)], outputs=[OneHot("csv", 2, 3)])

    shards = [make(2).shard(r, 3) for r in range(3)]
    got = [[md.features[0].numpy()[:, 0].astype(int).tolist() for md in s] for s in shards]
    whole = [md.features[0].numpy()[:, 0].astype(int).tolist() for md in make(6)]
    assert len({len(g) for g in got}) == 1
    assert [got[0][k] + got[1][k] + got[2][k] for k in range(len(whole))] == whole
    last = [md for md in shards[2]][-1]          # 23 = 3 * 6 + 5: ranks 0-1 get 2, rank 2 one
    assert last.features[0].shape == (1, 2) and last.labels[0].shape == (1, 3)


@pytest.mark.parametrize("args, exc, message", [
    ((True, 2), TypeError, r"shard: rank must be an int, got bool True"),
    ((0, False), TypeError, r"shard: size must be an int, got bool False"),
    ((0, 2.0), TypeError, r"shard: size must be an int, got float 2.0"),
    (("0", 2), TypeError, r"shard: rank must be an int, got str '0'"),
    ((None, 2), TypeError, r"shard: rank must be an int, got NoneType None"),
    ((2, 2), ValueError, r"shard: rank must be in \[0, size\) = \[0, 2\), got 2"),
    ((-1, 2), ValueError, r"shard: rank must be in \[0, size\) = \[0, 2\), got -1"),
    ((0, 0), ValueError, r"shard: size must be >= 1 \(the number of ranks\), got 0"),
    ((0, -3), ValueError, r"shard: size must be >= 1"),
])
def test_hostile_shard_arguments(csv_path, args, exc, message):
    x = np.zeros((4, 1), np.float32)
    iterators = [ArrayDataSetIterator(x, x, 2),
                 ArrayMultiDataSetIterator([x], [x], 2),
                 RecordReaderDataSetIterator(CSVRecordReader(csv_path, skip_num_lines=1), 2)]
    for it in iterators:
        with pytest.raises(exc, match=message):
            it.shard(*args)
    # NumPy integers are ints
    assert _ids(ArrayDataSetIterator(x + np.arange(4)[:, None], x, 2).shard(
        np.int64(1), np.int32(2))) == [[2, 3]]


def test_shard_refuses_a_seedless_shuffle_and_a_shard_of_a_shard(csv_path):
    x = np.zeros((4, 1), np.float32)
    with pytest.raises(ValueError, match=r"shard: a shuffled iterator needs an explicit seed"):
        ArrayDataSetIterator(x, x, 2, shuffle=True).shard(0, 2)
    ArrayDataSetIterator(x, x, 2, shuffle=True).shard(0, 1)      # one process: any order
    with pytest.raises(ValueError, match=r"already shard 1 of 2; shard the original"):
        ArrayDataSetIterator(x, x, 2).shard(1, 2).shard(0, 2)
    it = RecordReaderDataSetIterator(CSVRecordReader(csv_path, skip_num_lines=1), 2)
    with pytest.raises(ValueError, match=r"already shard 0 of 3; shard the original"):
        it.shard(0, 3).shard(0, 2)
