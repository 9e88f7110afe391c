"""CSVSequenceRecordReader and SequenceRecordReaderDataSetIterator: batches against a loop
written from DL4J's RecordReaderMultiDataSetIterator (per-step placement and masks), the
alignment modes, shards, and hostile files and arguments."""
from __future__ import annotations

import doctest
import os

import numpy as np
import pytest

import ndws
import ndws.data.sequences
from list_reader import ListReader
from ndws.data import (AlignmentMode, AsyncDataSetIterator, CSVSequenceRecordReader, DataSet,
                       SequenceRecordReaderDataSetIterator)

S = SequenceRecordReaderDataSetIterator


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


def csv_of(table):
    return "".join(",".join(repr(float(v)) for v in row) + "\n" for row in table)


def sequence_files(tmp_path, tables, prefix="s", header=None):
    paths = []
    for i, t in enumerate(tables):
        text = ("" if header is None else header + "\n") + csv_of(t)
        paths.append(write(tmp_path, f"{prefix}_{i}.csv", text))
    return paths


def reference(features, labels, mode, npl=None):
    """DL4J's batch of lists of (T_i, n) tables, step by step: ALIGN_START/EQUAL_LENGTH put
    step t of a sequence at t; ALIGN_END at t + (longest of the example) - (its length); the
    mask of an array is None when every sequence fills the batch's length."""
    n = len(features)
    t_max = max(max(f.shape[0], lab.shape[0]) for f, lab in zip(features, labels))
    n_l = npl if npl is not None else labels[0].shape[1]
    x = np.zeros((n, features[0].shape[1], t_max), np.float32)
    y = np.zeros((n, n_l, t_max), np.float32)
    fm = np.zeros((n, t_max), np.float32)
    lm = np.zeros((n, t_max), np.float32)
    for i in range(n):
        longest = max(features[i].shape[0], labels[i].shape[0])
        for arr, out, mask in ((features[i], x, fm), (labels[i], y, lm)):
            start = longest - arr.shape[0] if mode == "ALIGN_END" else 0
            for t in range(arr.shape[0]):
                mask[i, start + t] = 1
                if out is y and npl is not None:
                    out[i, int(arr[t, 0]), start + t] = 1
                else:
                    out[i, :, start + t] = arr[t]
    full_f = all(f.shape[0] == t_max for f in features)
    full_l = all(lab.shape[0] == t_max for lab in labels)
    return x, y, None if full_f else fm, None if full_l else lm


def check(ds, expected):
    x, y, fm, lm = expected
    np.testing.assert_array_equal(ds.features.numpy(), x)
    np.testing.assert_array_equal(ds.labels.numpy(), y)
    for got, want in ((ds.features_mask, fm), (ds.labels_mask, lm)):
        if want is None:
            assert got is None
        else:
            np.testing.assert_array_equal(got.numpy(), want)
    assert ds.features.dtype == np.float32 and ds.labels.dtype == np.float32


def random_sequences(rng, lengths, n_fields, n_classes=None, label_col=None):
    out = []
    for t in lengths:
        table = np.round(rng.standard_normal((t, n_fields)), 3)
        if n_classes is not None:
            table[:, label_col] = rng.integers(0, n_classes, t)
        out.append(table)
    return out


# -- CSVSequenceRecordReader ----------------------------------------------------------------

def test_reader_one_sequence_per_file_with_lines(tmp_path):
    a = write(tmp_path, "a.csv", "t,x\n1,2\n\n3,4\n")
    b = write(tmp_path, "b.csv", "t,x\n5,6")
    r = CSVSequenceRecordReader([a, tmp_path / "b.csv"], skip_num_lines=1)
    assert r.has_next()
    assert r.next() == [[1.0, 2.0], [3.0, 4.0]]
    assert r.location == (a, None) and r.step_lines == [2, 4]
    assert r.sequence_record() == [[5.0, 6.0]]
    assert r.location == (b, None) and r.step_lines == [2]
    assert not r.has_next()
    with pytest.raises(StopIteration):
        r.next()
    assert list(r) == [[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0]]]   # iteration restarts
    r.reset()
    assert r.step_lines is None and r.location is None
    assert repr(r).startswith("CSVSequenceRecordReader([")


def test_reader_delimiter_quotes_and_an_empty_file(tmp_path):
    a = write(tmp_path, "a.csv", '1;"2"\n3;4\n')
    empty = write(tmp_path, "e.csv", "")
    header_only = write(tmp_path, "h.csv", "x;y\n")
    r = CSVSequenceRecordReader([a, empty, header_only], delimiter=";")
    assert r.next() == [[1.0, 2.0], [3.0, 4.0]]
    assert r.next() == []                          # the iterator reports it, naming the file
    with pytest.raises(ValueError, match=r"h.csv:1: column index 0: cannot parse 'x' as a "
                                         r"number; if line 1 is a header, pass "
                                         r"skip_num_lines=1"):
        r.next()


def test_reader_ragged_and_non_numeric_lines_name_the_file_and_line(tmp_path):
    a = write(tmp_path, "a.csv", "1,2\n3,4\n")
    b = write(tmp_path, "b.csv", "5,6\n7,8,9\n")
    r = CSVSequenceRecordReader([a, b])
    r.next()
    with pytest.raises(ValueError, match=r"b.csv:2: expected 2 fields, got 3"):
        r.next()
    # it does not skip to the next file: it stops until reset
    with pytest.raises(RuntimeError, match="call reset"):
        r.next()
    c = write(tmp_path, "c.csv", "1,2\n3,oops\n")
    r = CSVSequenceRecordReader(c)
    with pytest.raises(ValueError, match=r"c.csv:2: column index 1: cannot parse 'oops'"):
        r.next()


def test_reader_refuses_a_directory_and_a_missing_file(tmp_path):
    with pytest.raises(IsADirectoryError, match=r"is a directory; a sequence reader reads "
                                                r"one sequence per file: pass its files"):
        CSVSequenceRecordReader(tmp_path)
    with pytest.raises(IsADirectoryError, match="is a directory"):
        CSVSequenceRecordReader([str(tmp_path)])
    with pytest.raises(FileNotFoundError, match="no such file"):
        CSVSequenceRecordReader(str(tmp_path / "nope.csv"))
    with pytest.raises(ValueError, match="at least one file"):
        CSVSequenceRecordReader([])
    with pytest.raises(TypeError, match="path_or_paths must be a path"):
        CSVSequenceRecordReader(42)
    with pytest.raises(ValueError, match="delimiter must be a one-character string"):
        CSVSequenceRecordReader(write(tmp_path, "a.csv", "1\n"), delimiter=";;")


def test_reader_undecodable_bytes_name_the_line(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_bytes(b"1,2\n3,\xff\n")
    with pytest.raises(ValueError, match=r"bad.csv:2: can't decode byte 0xff"):
        CSVSequenceRecordReader(str(p)).next()


# -- one reader: sequence labelling ------------------------------------------------------------

@pytest.mark.parametrize("label_index", [0, 2, 3, -1])
def test_one_reader_classification_matches_the_reference(tmp_path, rng, label_index):
    col = 3 if label_index == -1 else label_index
    seqs = random_sequences(rng, [5, 3, 5, 1, 4, 2, 6], 4, n_classes=3, label_col=col)
    paths = sequence_files(tmp_path, seqs)
    it = S(CSVSequenceRecordReader(paths), 3, 3, label_index)
    feats = [np.delete(s, col, axis=1) for s in seqs]
    labels = [s[:, [col]] for s in seqs]
    got = list(it)
    assert [b.num_examples() for b in got] == [3, 3, 1]
    for k, ds in enumerate(got):
        sl = slice(3 * k, 3 * k + 3)
        check(ds, reference(feats[sl], labels[sl], "ALIGN_START", npl=3))
    # every sequence has its own length, so each array of the first batches has a mask; the
    # last batch holds one sequence, which fills its batch: DL4J gives no mask then
    assert got[0].features_mask is not None and got[2].features_mask is None
    np.testing.assert_array_equal(got[0].features_mask.numpy(), got[0].labels_mask.numpy())
    assert it.input_columns() == 3 and it.total_outcomes() == 3 and it.batch() == 3


def test_equal_lengths_have_no_mask_and_positional_keyword_forms_agree(tmp_path, rng):
    seqs = random_sequences(rng, [4, 4, 4], 3, n_classes=2, label_col=2)
    paths = sequence_files(tmp_path, seqs)
    a = S(CSVSequenceRecordReader(paths), 8, 2, 2).next()
    b = S(CSVSequenceRecordReader(paths), mini_batch_size=8, num_possible_labels=2,
          label_index=2).next()
    assert a.features_mask is None and a.labels_mask is None
    assert a == b
    assert a.features.shape == (3, 2, 4) and a.labels.shape == (3, 2, 4)


def test_one_reader_regression_one_and_several_targets(tmp_path, rng):
    seqs = random_sequences(rng, [3, 5, 2], 5)
    paths = sequence_files(tmp_path, seqs)
    ds = S(CSVSequenceRecordReader(paths), 3, -1, 1, True).next()
    check(ds, reference([np.delete(s, 1, axis=1) for s in seqs], [s[:, [1]] for s in seqs],
                        "ALIGN_START"))
    # num_possible_labels > 1: columns label_index.. are the targets (DL4J's rule)
    ds = S(CSVSequenceRecordReader(paths), 3, 2, 3, regression=True).next()
    check(ds, reference([s[:, :3] for s in seqs], [s[:, 3:] for s in seqs], "ALIGN_START"))
    with pytest.raises(ValueError, match=r"regression with num_possible_labels=3: columns "
                                         r"3..4 \(from label_index to the last\) are 2 "
                                         r"targets, not 3"):
        S(CSVSequenceRecordReader(paths), 3, 3, 3, regression=True).next()


def test_one_reader_align_end_is_align_start(tmp_path, rng):
    # a step's features and label are on one line: both modes pad at the end
    seqs = random_sequences(rng, [2, 4, 3], 3, n_classes=4, label_col=0)
    paths = sequence_files(tmp_path, seqs)
    start = S(CSVSequenceRecordReader(paths), 3, 4, 0).next()
    end = S(CSVSequenceRecordReader(paths), 3, 4, 0, alignment_mode="ALIGN_END").next()
    assert start == end


# -- two readers ------------------------------------------------------------------------------

def test_two_readers_equal_length(tmp_path, rng):
    f = random_sequences(rng, [4, 4, 4, 4], 2)
    lab = random_sequences(rng, [4, 4, 4, 4], 1, n_classes=5, label_col=0)
    it = S(CSVSequenceRecordReader(sequence_files(tmp_path, f, "f")),
           CSVSequenceRecordReader(sequence_files(tmp_path, lab, "l")), 4, 5)
    assert it.alignment_mode is AlignmentMode.EQUAL_LENGTH
    ds = it.next()
    check(ds, reference(f, lab, "EQUAL_LENGTH", npl=5))
    assert ds.features_mask is None and ds.labels_mask is None
    assert not it.has_next()


def test_equal_length_refuses_what_dl4j_refuses_naming_the_files(tmp_path, rng):
    f = sequence_files(tmp_path, random_sequences(rng, [5, 5], 2), "f")
    lab = sequence_files(tmp_path, [np.zeros((5, 1)), np.zeros((3, 1))], "l")
    it = S(CSVSequenceRecordReader(f), CSVSequenceRecordReader(lab), 2, 2)
    with pytest.raises(ValueError) as info:
        it.next()
    msg = str(info.value)
    assert msg.startswith(f"{lab[1]}: EQUAL_LENGTH: this labels file has 3 steps but its "
                          f"features file {f[1]} has 5 steps. ")
    assert msg.endswith("Alignment mode is set to EQUAL_LENGTH but variable length data was "
                        "encountered. Use AlignmentMode.ALIGN_START or AlignmentMode.ALIGN_END "
                        "with variable length data")
    # sequences of different lengths in one batch: DL4J's error under EQUAL_LENGTH, the
    # normal case under the other modes
    f = sequence_files(tmp_path, random_sequences(rng, [5, 1], 2), "g")
    lab = sequence_files(tmp_path, [np.zeros((5, 1)), np.zeros((1, 1))], "m")
    with pytest.raises(ValueError, match=rf"{f[1]}: EQUAL_LENGTH: this sequence has 1 step "
                                         rf"but {f[0]} has 5 steps, in one batch"):
        S(CSVSequenceRecordReader(f), CSVSequenceRecordReader(lab), 2, 2).next()
    ds = S(CSVSequenceRecordReader(f), CSVSequenceRecordReader(lab), 2, 2,
           alignment_mode=AlignmentMode.ALIGN_START).next()
    assert ds.features_mask.numpy().tolist() == [[1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]


@pytest.mark.parametrize("mode", ["ALIGN_START", "ALIGN_END"])
def test_two_readers_align_modes_match_the_reference(tmp_path, rng, mode):
    f = random_sequences(rng, [6, 2, 4, 3, 5], 3)
    # labels: longer, shorter and as long as their features
    lab = random_sequences(rng, [1, 4, 4, 1, 7], 1, n_classes=3, label_col=0)
    it = S(CSVSequenceRecordReader(sequence_files(tmp_path, f, "f")),
           CSVSequenceRecordReader(sequence_files(tmp_path, lab, "l")), 5, 3,
           alignment_mode=getattr(AlignmentMode, mode))
    check(it.next(), reference(f, lab, mode, npl=3))


def test_sequence_classification_with_align_end(tmp_path, rng):
    # DL4J's sequence classification: a labels file of one step, aligned with the last step
    f = random_sequences(rng, [3, 5, 1], 2)
    classes = [2, 0, 1]
    lab = [np.array([[c]]) for c in classes]
    ds = S(CSVSequenceRecordReader(sequence_files(tmp_path, f, "f")),
           CSVSequenceRecordReader(sequence_files(tmp_path, lab, "l")), 3, 3, False,
           AlignmentMode.ALIGN_END).next()
    assert ds.features_mask.numpy().tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1],
                                                 [1, 0, 0, 0, 0]]
    assert ds.labels_mask.numpy().tolist() == [[0, 0, 1, 0, 0], [0, 0, 0, 0, 1],
                                               [1, 0, 0, 0, 0]]
    last = [2, 4, 0]       # each example's last step holds its class, one-hot
    y = ds.labels.numpy()
    for i, (t, c) in enumerate(zip(last, classes)):
        assert y[i, :, t].tolist() == np.eye(3)[c].tolist()
        assert y[i].sum() == 1
    check(ds, reference(f, lab, "ALIGN_END", npl=3))


def test_two_readers_regression(tmp_path, rng):
    f = random_sequences(rng, [3, 2], 2)
    lab = random_sequences(rng, [3, 2], 4)
    ds = S(CSVSequenceRecordReader(sequence_files(tmp_path, f, "f")),
           CSVSequenceRecordReader(sequence_files(tmp_path, lab, "l")), 2, -1, True,
           "ALIGN_START").next()
    check(ds, reference(f, lab, "ALIGN_START"))


# -- batching, reset, shards, placement -----------------------------------------------------

def test_reset_mid_epoch_and_iteration(tmp_path, rng):
    seqs = random_sequences(rng, [2, 3, 4, 5, 6], 2, n_classes=2, label_col=1)
    it = S(CSVSequenceRecordReader(sequence_files(tmp_path, seqs)), 2, 2, 1)
    first = it.next()
    it.reset()
    assert it.next() == first
    assert [b.features.shape[2] for b in it] == [3, 5, 6]


def test_shards_are_the_global_batch(tmp_path, rng):
    seqs = random_sequences(rng, [2, 7, 3, 4, 1, 5, 6], 2, n_classes=3, label_col=0)
    it = S(CSVSequenceRecordReader(sequence_files(tmp_path, seqs)), 2, 3, 0)
    whole = list(S(CSVSequenceRecordReader(sequence_files(tmp_path, seqs)), 6, 3, 0))
    shards = [list(it.shard(r, 3)) for r in range(3)]
    assert [len(s) for s in shards] == [2, 2, 2]
    for k, global_batch in enumerate(whole):
        parts = [s[k] for s in shards]
        # padded to the global batch's longest sequence, so they concatenate to it
        assert len({p.features.shape[2] for p in parts}) == 1
        assert DataSet.merge([p for p in parts if p.num_examples()]) == global_batch
    # the last global batch has 1 sequence: ranks 1 and 2 get 0 rows
    assert [s[1].num_examples() for s in shards] == [1, 0, 0]
    assert shards[1][1].features.shape == (0, 1, 6)
    with pytest.raises(ValueError, match="already shard"):
        it.shard(0, 2).shard(0, 1)
    assert it.next().num_examples() == 2           # the original is still usable


def test_batches_are_built_in_the_current_workspace(tmp_path, rng):
    seqs = random_sequences(rng, [2, 3], 2, n_classes=2, label_col=1)
    it = S(CSVSequenceRecordReader(sequence_files(tmp_path, seqs)), 2, 2, 1)
    with ndws.workspace("SEQ_WS") as ws:
        ds = it.next()
        assert ds.features.workspace_id == ws.id
        assert ds.labels_mask.workspace_id == ws.id


def test_custom_readers_lists_and_arrays(rng):

    f = [np.arange(6.0).reshape(3, 2), [[1.0, 2.0]]]
    lab = [[[1.0]], np.array([[0.0]])]
    ds = S(ListReader(f), ListReader(lab), 2, 2, alignment_mode="ALIGN_END").next()
    check(ds, reference([np.asarray(a, float) for a in f], [np.asarray(a, float) for a in lab],
                        "ALIGN_END", npl=2))
    with pytest.raises(ValueError, match="time steps have different numbers of fields"):
        S(ListReader([[[1.0, 2.0], [3.0]]]), 1, 2, 0).next()
    with pytest.raises(ValueError, match="cannot parse .a. as a number"):
        S(ListReader([[["a", "b"]]]), 1, 2, 0).next()
    with pytest.raises(TypeError, match="time steps are not all lists of fields"):
        S(ListReader([[1.0, 2.0]]), 1, 2, 0).next()
    with pytest.raises(TypeError, match="a complex field"):
        S(ListReader([[[1.0, 1 + 2j]]]), 1, 2, 0).next()
    for dtype in (np.complex128, "datetime64[s]", "U3"):
        with pytest.raises(TypeError, match=r"sequence array of dtype .*; expected numbers"):
            S(ListReader([np.zeros((2, 2), dtype=dtype)]), 1, 2, 0).next()
    with pytest.raises(ValueError, match=r"sequence array of shape \(2, 2, 1\)"):
        S(ListReader([np.zeros((2, 2, 1))]), 1, 2, 0).next()
    with pytest.raises(TypeError, match="gave int for a sequence"):
        S(ListReader([7]), 1, 2, 0).next()
    # strided and negative-stride views are read as their values
    view = np.arange(12.0).reshape(6, 2)[::-2]
    view[:, 1] = [1, 0, 1]
    ds = S(ListReader([view]), 1, 2, 1).next()
    assert ds.features.numpy().tolist() == [[[10.0, 6.0, 2.0]]]
    assert ds.labels.numpy()[0].argmax(axis=0).tolist() == [1, 0, 1]
    with pytest.raises(ValueError, match=r"labels_reader ran out of sequences after 1 while "
                                         r"features_reader has more"):
        list(S(ListReader(f), ListReader(lab[:1]), 1, 2, alignment_mode="ALIGN_END"))
    with pytest.raises(ValueError, match=r"features_reader ran out of sequences after 1 while "
                                         r"labels_reader has more"):
        list(S(ListReader(f[:1]), ListReader(lab), 1, 2, alignment_mode="ALIGN_END"))


# -- hostile input ----------------------------------------------------------------------------

def test_a_zero_length_sequence_names_its_file(tmp_path):
    a = write(tmp_path, "a.csv", "h1,h2\n1,0\n")
    empty = write(tmp_path, "empty.csv", "h1,h2\n")
    it = S(CSVSequenceRecordReader([a, empty]), 2, 2, 1)
    with pytest.raises(ValueError, match=r"a.csv:1: column index 0: cannot parse 'h1' as a "
                                         r"number; if line 1 is a header"):
        it.next()
    it = S(CSVSequenceRecordReader([a, empty], skip_num_lines=1), 2, 2, 1)
    with pytest.raises(ValueError, match=r"empty.csv: zero-length sequence \(combined features "
                                         r"and labels\): the file has no time step \(DL4J's "
                                         r"ZeroLengthSequenceException\)"):
        it.next()
    f = write(tmp_path, "f.csv", "1\n")
    lab = write(tmp_path, "l.csv", "")
    with pytest.raises(ValueError, match=r"l.csv: zero-length sequence \(labels\)"):
        S(CSVSequenceRecordReader(f), CSVSequenceRecordReader(lab), 1, 2).next()


@pytest.mark.parametrize("value", ["3", "-1", "0.5", "nan", "inf"])
def test_a_bad_class_label_names_the_file_and_line(tmp_path, value):
    p = write(tmp_path, "a.csv", f"1,0\n2,1\n3,{value}\n")
    with pytest.raises(ValueError, match=rf"a.csv:3: label .* in column index 1 is not a "
                                         rf"class index in \[0, 3\)"):
        S(CSVSequenceRecordReader(p), 1, 3, 1).next()
    f = write(tmp_path, "f.csv", "1\n2\n")
    lab = write(tmp_path, "l.csv", f"0\n{value}\n")
    with pytest.raises(ValueError, match=r"l.csv:2: label .* is not a class index in "
                                         r"\[0, 3\)"):
        S(CSVSequenceRecordReader(f), CSVSequenceRecordReader(lab), 1, 3).next()


def test_files_that_disagree(tmp_path):
    f = [write(tmp_path, f"f{i}.csv", "1,2\n") for i in range(3)]
    lab = [write(tmp_path, f"l{i}.csv", "0\n") for i in range(2)]
    with pytest.raises(ValueError, match="features_reader has 3 files but labels_reader has "
                                         "2"):
        S(CSVSequenceRecordReader(f), CSVSequenceRecordReader(lab), 2, 2)
    two = write(tmp_path, "two.csv", "0,1\n")
    with pytest.raises(ValueError, match=r"two.csv: classification labels must be one column "
                                         r"\(the class index of each step\), got 2 columns"):
        S(CSVSequenceRecordReader(f[0]), CSVSequenceRecordReader(two), 1, 2).next()
    with pytest.raises(ValueError, match=r"label_index 5 is out of range for sequences of 2 "
                                         r"fields"):
        S(CSVSequenceRecordReader(f[0]), 1, 2, 5).next()
    with pytest.raises(ValueError, match=r"leave no feature column"):
        S(CSVSequenceRecordReader(write(tmp_path, "one.csv", "1\n")), 1, 2, 0).next()


def test_a_huge_number_of_classes_is_refused_by_name(tmp_path):
    p = write(tmp_path, "a.csv", "1,0\n")
    with pytest.raises(ValueError, match=r"a batch of 1 sequences of 1 steps with "
                                         r"1152921504606846976 labels per step would be .* "
                                         r"bytes \(more than 2\*\*48\): check "
                                         r"num_possible_labels=1152921504606846976"):
        S(CSVSequenceRecordReader(p), 2**62, 2**60, 1).next()
    with pytest.raises(MemoryError, match=r"labels of shape \(1, 17592186044416, 1\) do not "
                                          r"fit in memory: check num_possible_labels="):
        S(CSVSequenceRecordReader(p), 1, 2**44, 1).next()          # 64 TiB


@pytest.mark.parametrize("args, kwargs, exc, msg", [
    ((), {"mini_batch_size": 0, "num_possible_labels": 2}, ValueError,
     "mini_batch_size must be >= 1, got 0"),
    ((), {"mini_batch_size": True, "num_possible_labels": 2}, TypeError,
     "mini_batch_size must be an int"),
    ((), {"mini_batch_size": "2", "num_possible_labels": 2}, TypeError,
     "mini_batch_size must be an int"),
    ((), {"num_possible_labels": 2}, TypeError, "needs mini_batch_size"),
    ((2,), {}, ValueError, "num_possible_labels is required for classification"),
    ((2, 0), {}, ValueError, "num_possible_labels must be >= 1"),
    ((2, 2.0), {}, TypeError, "num_possible_labels must be an int"),
    ((2, 2, -2), {}, ValueError, "label_index must be >= -1"),
    ((2, 2, 0, "yes"), {}, TypeError, "regression must be a bool"),
    ((2, 2, 0, False, 1), {}, TypeError, "at most 5 positional arguments"),
    ((2, 2), {"mini_batch_size": 3}, TypeError, "multiple values for argument "
                                                 "'mini_batch_size'"),
    ((2, 2), {"alignment_mode": "ALIGN_MIDDLE"}, ValueError,
     "alignment_mode must be an AlignmentMode"),
])
def test_argument_errors(tmp_path, args, kwargs, exc, msg):
    p = write(tmp_path, "a.csv", "1,0\n")
    with pytest.raises(exc, match=msg):
        S(CSVSequenceRecordReader(p), *args, **kwargs)


def test_reader_argument_errors(tmp_path):
    p = write(tmp_path, "a.csv", "1,0\n")
    r = CSVSequenceRecordReader(p)
    with pytest.raises(TypeError, match="reader must be a sequence record reader"):
        S("a.csv", 2, 2, 0)
    with pytest.raises(TypeError, match="labels_reader must be a sequence record reader"):
        S(r, labels_reader=42, mini_batch_size=1, num_possible_labels=2)
    with pytest.raises(ValueError, match="labels_reader is the features reader itself"):
        S(r, r, 1, 2)
    with pytest.raises(TypeError, match="label_index is for the one-reader form"):
        S(r, CSVSequenceRecordReader(p), 1, 2, label_index=0)
    # the labels reader as a keyword: the positional arguments are DL4J's after it
    it = S(r, 1, 2, labels_reader=CSVSequenceRecordReader(write(tmp_path, "l.csv", "1\n")),
           alignment_mode="ALIGN_START")
    assert it.batch() == 1 and it.num_possible_labels == 2 and it.total_outcomes() == 2


def test_columns_are_known_before_the_first_batch_only_at_the_start(tmp_path):
    paths = [write(tmp_path, f"{i}.csv", "1,2,0\n") for i in range(3)]
    it = S(CSVSequenceRecordReader(paths), 1, 2, 2)
    assert it.input_columns() == 2                 # reads the first sequence, then resets
    assert it.next().features.numpy().tolist() == [[[1.0], [2.0]]]   # the first file, again
    regression = S(CSVSequenceRecordReader(paths), 1, -1, 1, True)
    regression.next()
    assert regression.total_outcomes() == 1        # from the batch: nothing is read again
    assert regression.next().features.numpy().tolist() == [[[1.0], [0.0]]]
    bad = [write(tmp_path, "bad.csv", "1,2,7\n")] + paths
    failed = S(CSVSequenceRecordReader(bad), 1, 2, 2)
    with pytest.raises(ValueError, match="not a class index"):
        failed.next()
    with pytest.raises(ValueError, match="call reset"):
        failed.input_columns()


def test_through_async_prefetch_values_are_kept(tmp_path, rng):
    seqs = random_sequences(rng, [3, 9, 1, 4, 7, 2, 8, 5], 3, n_classes=2, label_col=2)
    paths = sequence_files(tmp_path, seqs)
    plain = [b.detach() for b in S(CSVSequenceRecordReader(paths), 2, 2, 2)]
    with AsyncDataSetIterator(S(CSVSequenceRecordReader(paths), 2, 2, 2), 2) as it:
        fetched = [b.detach() for b in it]
    assert fetched == plain


def test_docstring_examples():
    assert doctest.testmod(ndws.data.sequences).failed == 0


# -- what a reset forgets: widths learned from the files ---------------------------------------

def test_a_file_fixed_after_an_error_reads_after_reset_as_in_a_new_iterator(tmp_path):
    path = write(tmp_path, "s0.csv", "1,0,9\n2,1\n")          # a stray third field on line 1
    it = S(CSVSequenceRecordReader(path), 1, 2, 1)
    with pytest.raises(ValueError, match=r"s0.csv:2: expected 3 fields, got 2$"):
        it.next()
    write(tmp_path, "s0.csv", "1,0\n2,1\n")
    it.reset()
    ds = it.next()
    assert ds == S(CSVSequenceRecordReader(path), 1, 2, 1).next()
    np.testing.assert_array_equal(ds.features.numpy(), np.float32([[[1, 2]]]))
    np.testing.assert_array_equal(ds.labels.numpy(), np.float32([[[1, 0], [0, 1]]]))


def test_the_widths_are_learned_again_after_reset(tmp_path):

    features, labels = ListReader([[[1.0], [2.0]]]), ListReader([[[0.5], [1.5]]])
    it = S(features, labels, 1, -1, True)
    assert (it.input_columns(), it.total_outcomes()) == (1, 1)
    assert it.next().features.shape == (1, 1, 2)
    features.items = [[[1.0, 2.0], [3.0, 4.0]]]
    labels.items = [[[0.5, 5.0, 6.0], [1.5, 7.0, 8.0]]]
    it.reset()
    assert (it.input_columns(), it.total_outcomes()) == (2, 3)      # read again, then reset
    ds = it.next()
    np.testing.assert_array_equal(ds.features.numpy(), np.float32([[[1, 3], [2, 4]]]))
    np.testing.assert_array_equal(ds.labels.numpy(), np.float32([[[0.5, 1.5], [5, 7], [6, 8]]]))
    # and through a CSV reader, whose own number of fields is learned again too
    paths = [write(tmp_path, f"{i}.csv", "1,0\n") for i in range(2)]
    csv = S(CSVSequenceRecordReader(paths), 2, 2, 1)
    assert csv.input_columns() == 1 and csv.next().features.shape == (2, 1, 1)
    for p in paths:
        write(tmp_path, os.path.basename(p), "1,0,2,3\n")
    csv.reset()
    assert csv.input_columns() == 3
    np.testing.assert_array_equal(csv.next().features.numpy(), np.float32([[[1], [2], [3]]] * 2))


# -- numbers float32 cannot hold ---------------------------------------------------------------

@pytest.mark.parametrize("value, refused", [("1e39", True), ("-1e300", True),
                                            ("3.4028235677973366e38", True),
                                            ("3.4028235677973362e38", False),
                                            ("inf", False), ("-Infinity", False),
                                            ("nan", False)])
def test_a_value_float32_cannot_hold_names_its_file_line_and_column(tmp_path, value, refused):
    good = write(tmp_path, "good.csv", "1,0,2\n")
    path = write(tmp_path, "big.csv", f"1,0,2\n3,1,{value}\n")
    it = S(CSVSequenceRecordReader([good, path]), 2, 2, 1)
    if refused:
        sign = "-" if value.startswith("-") else ""
        with pytest.raises(ValueError, match=rf"big.csv:2: column index 2: {sign}[0-9.e+]+ is "
                                             rf"out of range for float32, the batches' dtype: "
                                             rf"past its largest finite value "
                                             rf"\(3.4028235e\+38\) it would become {sign}inf$"):
            it.next()
        for rank in (0, 1):        # big.csv is rank 1's: every rank refuses the batch
            with pytest.raises(ValueError, match=r"big.csv:2: column index 2"):
                S(CSVSequenceRecordReader([good, path]), 2, 2, 1).shard(rank, 2).next()
            # a class label that is no class index too
            bad = write(tmp_path, "bad.csv", "1,0,2\n3,7,1\n")
            with pytest.raises(ValueError, match=r"bad.csv:2: label 7.0 in column index 1 is "
                                                 r"not a class index in \[0, 2\)$"):
                S(CSVSequenceRecordReader([good, bad]), 2, 2, 1).shard(rank, 2).next()
    else:
        got = it.next().features.numpy()[1, 1, 1]
        with np.errstate(over="ignore"):
            expected = np.float32(float(value))       # NumPy's float32 of the cell
        assert np.array_equal(got, expected, equal_nan=True)


def test_float32_range_in_targets_labels_and_custom_arrays(tmp_path):
    f = write(tmp_path, "f.csv", "1\n2\n")
    lab = write(tmp_path, "l.csv", "0.5\n-1e39\n")
    with pytest.raises(ValueError, match=r"l.csv:2: column index 0: -1e\+39 is out of range "
                                         r"for float32"):
        S(CSVSequenceRecordReader(f), CSVSequenceRecordReader(lab), 1, -1, True).next()
    # one reader, regression targets from label_index on
    one = write(tmp_path, "one.csv", "1,2,1\n4,5,1e39\n")
    with pytest.raises(ValueError, match=r"one.csv:2: column index 2: 1e\+39 is out of range"):
        S(CSVSequenceRecordReader(one), 1, 2, 1, True).next()
    # a class label is a class index, checked as one
    with pytest.raises(ValueError, match=r"one.csv:2: label 1e\+39 in column index 2 is not a "
                                         r"class index in \[0, 2\)$"):
        S(CSVSequenceRecordReader(one), 1, 2, 2).next()

    with pytest.raises(ValueError, match=r"^step 1: column index 0: 1e\+39 is out of range"):
        S(ListReader([np.array([[1.0, 0.0], [2e38 * 5, 1.0]])]), 1, 2, 1).next()


def test_custom_sequence_readers_text_is_read_as_the_csv_reader_reads_a_field():
    ds = S(ListReader([[["1.5", "0"], [" 2 ", 1]]]), 1, 2, 1).next()
    np.testing.assert_array_equal(ds.features.numpy(), [[[1.5, 2.0]]])
    for steps, message in [([[1.0, 0], ["1_0", 1]], r"^step 1: column index 0: cannot parse "
                                                     r"'1_0' as a number \('_' is not a digit"),
                           ([["٣", 0]], r"^step 0: column index 0: cannot parse '٣' as a "
                                        r"number \(only ASCII digits"),
                           ([[1.0, "x"]], r"^step 0: column index 1: cannot parse 'x' as a "
                                          r"number$"),
                           ([[1.0, 0], [None, 1]], r"^step 1: column index 0: the reader gave "
                                                   r"None, not a number$")]:
        with pytest.raises(ValueError, match=message):
            S(ListReader([steps]), 1, 2, 1).next()


@pytest.mark.parametrize("text", ["1_000", "2_0.5"])
def test_digit_separators_are_refused(tmp_path, text):
    path = write(tmp_path, "u.csv", f"1,0\n{text},1\n")
    with pytest.raises(ValueError, match=rf"u.csv:2: column index 0: cannot parse '{text}' as "
                                         r"a number \('_' is not a digit separator here"):
        S(CSVSequenceRecordReader(path), 1, 2, 1).next()
