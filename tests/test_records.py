"""CSVRecordReader, RecordReaderDataSetIterator and RecordReaderMultiDataSetIterator against
NumPy slicing of the same table."""
from __future__ import annotations

import doctest
import re

import numpy as np
import pytest

import ndws
import ndws.data.records
from ndws.data.dataset import DataSet, MultiDataSet
from ndws.data.iterators import DataSetIterator, MultiDataSetIterator
from list_reader import ListReader
from ndws.data.records import (CSVRecordReader, OneHot, RecordReaderDataSetIterator,
                               RecordReaderMultiDataSetIterator)


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


def table_csv(tmp_path, table, name="t.csv", header=None):
    lines = [] if header is None else [header]
    lines += [",".join(repr(float(v)) for v in row) for row in table]
    return write(tmp_path, name, "\n".join(lines) + "\n")


@pytest.fixture
def cls_table(rng):
    """23 rows: 4 float features, then a class index 0..2 in column 4."""
    t = rng.standard_normal((23, 5))
    t[:, 4] = rng.integers(0, 3, 23)
    return t


# -- CSVRecordReader -------------------------------------------------------------------------

def test_reader_values_header_empty_lines_quotes(tmp_path):
    path = write(tmp_path, "a.csv",
                 'x,"y, quoted",z\n'
                 "1,2,3\n"
                 "\n"
                 '"4","5.5", 6 \n'
                 "   \n"
                 "-1e3,nan,inf\n")
    r = CSVRecordReader(path, skip_num_lines=1)
    recs = list(r)
    assert recs[:2] == [[1.0, 2.0, 3.0], [4.0, 5.5, 6.0]]
    assert recs[2][0] == -1000.0 and np.isnan(recs[2][1]) and recs[2][2] == np.inf
    assert r.num_fields == 3
    # iteration restarts from the beginning
    assert len(list(r)) == 3


def test_reader_protocol_and_location(tmp_path):
    path = write(tmp_path, "a.csv", "h\n\n1;2\n\n3;4\n")
    r = CSVRecordReader(path, skip_num_lines=1, delimiter=";")
    assert r.has_next() and r.has_next()  # has_next does not consume
    assert r.next() == [1.0, 2.0]
    assert r.location == (path, 3)
    assert r.next() == [3.0, 4.0]
    assert r.location == (path, 5)
    assert not r.has_next()
    with pytest.raises(StopIteration):
        r.next()
    r.reset()
    assert r.location is None and r.next() == [1.0, 2.0]
    r.close()


def test_reader_several_files_skip_each(tmp_path):
    a = write(tmp_path, "a.csv", "h1\n1,2\n")
    b = write(tmp_path, "b.csv", "h2\n3,4\n5,6")  # no final newline
    r = CSVRecordReader([a, tmp_path / "b.csv"], skip_num_lines=1)
    assert list(r) == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    assert r.paths == [a, b]


def test_reader_custom_quote_with_embedded_delimiter_and_newline(tmp_path):
    path = write(tmp_path, "q.csv", "'1',2\n'3\n',4\n5,6\n")
    r = CSVRecordReader(path, quote="'")
    assert r.next() == [1.0, 2.0]
    assert r.next() == [3.0, 4.0]  # "3\n" spans two lines and parses as 3
    assert r.next() == [5.0, 6.0]
    assert r.location == (path, 4)


def test_reader_ragged_row_names_file_and_line(tmp_path):
    path = write(tmp_path, "bad.csv", "a,b,c\n1,2,3\n\n4,5,6\n7,8\n")
    r = CSVRecordReader(path, skip_num_lines=1)
    with pytest.raises(ValueError, match=re.escape(f"{path}:5: expected 3 fields, got 2")):
        list(r)


def test_reader_ragged_row_in_second_file(tmp_path):
    a = write(tmp_path, "a.csv", "1,2\n")
    b = write(tmp_path, "b.csv", "3,4\n5,6,7\n")
    with pytest.raises(ValueError, match=re.escape(f"{b}:2: expected 2 fields, got 3")):
        list(CSVRecordReader([a, b]))


def test_reader_non_numeric_field(tmp_path):
    path = write(tmp_path, "bad.csv", "1,2,3\n4,five,6\n")
    with pytest.raises(ValueError) as info:
        list(CSVRecordReader(path))
    assert str(info.value) == f"{path}:2: column index 1: cannot parse 'five' as a number"
    path = write(tmp_path, "empty_field.csv", "1,,3\n")
    with pytest.raises(ValueError) as info:
        list(CSVRecordReader(path))
    assert str(info.value) == f"{path}:1: column index 1: cannot parse '' as a number"


def test_reader_line_numbers_after_multiline_quoted_field(tmp_path):
    path = write(tmp_path, "m.csv", '"1\n",2\n3,x\n')
    with pytest.raises(ValueError) as info:
        list(CSVRecordReader(path))
    assert str(info.value) == f"{path}:3: column index 1: cannot parse 'x' as a number"


def test_reader_argument_errors(tmp_path):
    path = write(tmp_path, "a.csv", "1\n")
    with pytest.raises(TypeError, match="path_or_paths must be a path or a sequence"):
        CSVRecordReader(3)
    with pytest.raises(ValueError, match="path_or_paths must name at least one file"):
        CSVRecordReader([])
    with pytest.raises(TypeError, match="path_or_paths must contain only paths"):
        CSVRecordReader([path, 1])
    with pytest.raises(FileNotFoundError, match="path_or_paths: no such file"):
        CSVRecordReader(str(tmp_path / "missing.csv"))
    with pytest.raises(ValueError, match="skip_num_lines must be >= 0, got -1"):
        CSVRecordReader(path, skip_num_lines=-1)
    with pytest.raises(TypeError, match="skip_num_lines must be an int"):
        CSVRecordReader(path, skip_num_lines=1.0)
    with pytest.raises(ValueError, match="delimiter must be a one-character string"):
        CSVRecordReader(path, delimiter=";;")
    with pytest.raises(ValueError, match="quote must be a one-character string"):
        CSVRecordReader(path, quote="")
    with pytest.raises(ValueError, match="delimiter and quote must differ"):
        CSVRecordReader(path, delimiter='"')


def test_reader_header_only_file_is_empty(tmp_path):
    path = write(tmp_path, "h.csv", "a,b\n")
    r = CSVRecordReader(path, skip_num_lines=3)
    assert not r.has_next() and list(r) == []


# -- RecordReaderDataSetIterator ---------------------------------------------------------------

def test_classification_batches_match_numpy(tmp_path, cls_table):
    path = table_csv(tmp_path, cls_table, header="f0,f1,f2,f3,label")
    it = RecordReaderDataSetIterator(CSVRecordReader(path, 1), 5, label_index=4,
                                     num_classes=3)
    assert isinstance(it, DataSetIterator)
    assert (it.batch(), it.input_columns(), it.total_outcomes()) == (5, 4, 3)
    eye = np.eye(3, dtype=np.float32)
    for epoch in range(2):  # Python iteration resets after a full epoch
        batches = list(it)
        assert [b.num_examples() for b in batches] == [5, 5, 5, 5, 3]
        for i, b in enumerate(batches):
            rows = cls_table[5 * i:5 * i + 5]
            assert isinstance(b, DataSet)
            assert b.features.dtype == np.float32 and b.labels.dtype == np.float32
            np.testing.assert_array_equal(b.features.numpy(), rows[:, :4].astype(np.float32))
            np.testing.assert_array_equal(b.labels.numpy(), eye[rows[:, 4].astype(int)])
            assert b.features_mask is None and b.labels_mask is None


def test_label_in_the_middle_and_reset_mid_epoch(tmp_path, cls_table):
    t = cls_table[:, [0, 4, 1, 2, 3]]  # label in column 1
    path = table_csv(tmp_path, t)
    it = RecordReaderDataSetIterator(CSVRecordReader(path), 10, label_index=1, num_classes=3)
    first = it.next()
    it.reset()
    again = it.next()
    assert first == again
    np.testing.assert_array_equal(again.features.numpy(),
                                  t[:10][:, [0, 2, 3, 4]].astype(np.float32))


def test_regression_columns(tmp_path, rng):
    t = rng.standard_normal((7, 6))
    path = table_csv(tmp_path, t)
    it = RecordReaderDataSetIterator(CSVRecordReader(path), 4, label_index=2, regression=True,
                                     label_index_to=3)
    assert (it.input_columns(), it.total_outcomes()) == (4, 2)
    b = list(it)
    np.testing.assert_array_equal(b[1].features.numpy(),
                                  t[4:][:, [0, 1, 4, 5]].astype(np.float32))
    np.testing.assert_array_equal(b[1].labels.numpy(), t[4:, 2:4].astype(np.float32))
    one = RecordReaderDataSetIterator(CSVRecordReader(path), 7, label_index=5,
                                      regression=True)
    ds = one.next()
    np.testing.assert_array_equal(ds.labels.numpy(), t[:, 5:6].astype(np.float32))
    assert one.total_outcomes() == 1


def test_no_labels(tmp_path, rng):
    t = rng.standard_normal((3, 2))
    it = RecordReaderDataSetIterator(CSVRecordReader(table_csv(tmp_path, t)), 8)
    ds = it.next()
    assert ds.labels is None and it.total_outcomes() == 0 and it.input_columns() == 2
    np.testing.assert_array_equal(ds.features.numpy(), t.astype(np.float32))
    assert not it.has_next()
    with pytest.raises(StopIteration):
        it.next()


def test_bad_class_label_names_file_and_line(tmp_path):
    path = write(tmp_path, "l.csv", "1,0\n2,1\n3,3\n")
    it = RecordReaderDataSetIterator(CSVRecordReader(path), 2, label_index=1, num_classes=3)
    it.next()
    with pytest.raises(ValueError) as info:
        it.next()
    assert str(info.value) == (f"{path}:3: label 3.0 in column index 1 is not a class index "
                               f"in [0, 3)")
    path = write(tmp_path, "f.csv", "1,0.5\n")
    it = RecordReaderDataSetIterator(CSVRecordReader(path), 2, label_index=1, num_classes=3)
    with pytest.raises(ValueError, match=re.escape(f"{path}:1: label 0.5 in column index 1")):
        it.next()


def test_label_index_out_of_range(tmp_path):
    path = write(tmp_path, "a.csv", "1,2\n")
    it = RecordReaderDataSetIterator(CSVRecordReader(path), 2, label_index=2, num_classes=3)
    with pytest.raises(ValueError, match="label_index 2 is out of range for records of 2 "
                                         "fields"):
        it.input_columns()
    it = RecordReaderDataSetIterator(CSVRecordReader(path), 2, label_index=0, regression=True,
                                     label_index_to=1)
    with pytest.raises(ValueError, match="records of 2 fields leave no feature column"):
        it.next()


def test_iterator_argument_errors(tmp_path):
    r = CSVRecordReader(write(tmp_path, "a.csv", "1,2\n"))
    with pytest.raises(TypeError, match="reader must be a record reader"):
        RecordReaderDataSetIterator([[1, 2]], 2)
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        RecordReaderDataSetIterator(r, 0)
    with pytest.raises(ValueError, match="label_index must be >= -1, got -2"):
        RecordReaderDataSetIterator(r, 1, label_index=-2)
    with pytest.raises(ValueError, match="num_classes is required for classification"):
        RecordReaderDataSetIterator(r, 1, label_index=1)
    with pytest.raises(ValueError, match="num_classes must be None for regression, got 3"):
        RecordReaderDataSetIterator(r, 1, label_index=1, num_classes=3, regression=True)
    with pytest.raises(ValueError, match=r"label_index must be >= 0 when num_classes"):
        RecordReaderDataSetIterator(r, 1, num_classes=3)
    with pytest.raises(ValueError, match=r"label_index_to must be >= label_index \(1\), got 0"):
        RecordReaderDataSetIterator(r, 1, label_index=1, regression=True, label_index_to=0)
    with pytest.raises(ValueError, match="label_index_to applies to regression only"):
        RecordReaderDataSetIterator(r, 1, label_index=0, num_classes=2, label_index_to=1)
    with pytest.raises(TypeError, match="regression must be a bool"):
        RecordReaderDataSetIterator(r, 1, label_index=0, regression=1)


def test_pre_processor_applied(tmp_path, cls_table):
    class Double:
        def pre_process(self, ds):
            ds.features *= 2

    it = RecordReaderDataSetIterator(CSVRecordReader(table_csv(tmp_path, cls_table)), 30,
                                     label_index=4, num_classes=3)
    it.pre_processor = Double()
    np.testing.assert_array_equal(it.next().features.numpy(),
                                  2 * cls_table[:, :4].astype(np.float32))


def test_batches_are_built_in_the_current_workspace(tmp_path, cls_table):
    it = RecordReaderDataSetIterator(CSVRecordReader(table_csv(tmp_path, cls_table)), 4,
                                     label_index=4, num_classes=3)
    with ndws.workspace("RR_WS"):
        ds = it.next()
        assert ds.features.workspace_id == "RR_WS" and ds.labels.workspace_id == "RR_WS"
    with pytest.raises(ndws.WorkspaceError):
        ds.features + 1
    kept = it.next().detach()
    assert not kept.features.is_attached()


# -- RecordReaderMultiDataSetIterator -----------------------------------------------------------

def test_multi_single_reader_column_ranges(tmp_path, cls_table):
    path = table_csv(tmp_path, cls_table)
    it = RecordReaderMultiDataSetIterator(
        {"csv": CSVRecordReader(path)}, 10,
        inputs=[("csv", 0, 1), ("csv", 2, 3)], outputs=[OneHot("csv", 4, 3), ("csv", 0, 0)])
    assert isinstance(it, MultiDataSetIterator) and it.batch() == 10
    batches = list(it)
    assert [b.num_examples() for b in batches] == [10, 10, 3]
    eye = np.eye(3, dtype=np.float32)
    for i, b in enumerate(batches):
        rows = cls_table[10 * i:10 * i + 10]
        assert isinstance(b, MultiDataSet)
        assert len(b.features) == 2 and len(b.labels) == 2
        np.testing.assert_array_equal(b.features[0].numpy(), rows[:, 0:2].astype(np.float32))
        np.testing.assert_array_equal(b.features[1].numpy(), rows[:, 2:4].astype(np.float32))
        np.testing.assert_array_equal(b.labels[0].numpy(), eye[rows[:, 4].astype(int)])
        np.testing.assert_array_equal(b.labels[1].numpy(), rows[:, 0:1].astype(np.float32))
    # same as the DataSet iterator on the same file
    single = RecordReaderDataSetIterator(CSVRecordReader(path), 10, label_index=4,
                                         num_classes=3)
    for m, d in zip(it, single):
        np.testing.assert_array_equal(
            np.concatenate([m.features[0].numpy(), m.features[1].numpy()], axis=1),
            d.features.numpy())
        np.testing.assert_array_equal(m.labels[0].numpy(), d.labels.numpy())


def test_multi_two_readers_lockstep(tmp_path, rng):
    x = rng.standard_normal((9, 3))
    y = rng.standard_normal((9, 2))
    it = RecordReaderMultiDataSetIterator(
        {"x": CSVRecordReader(table_csv(tmp_path, x, "x.csv")),
         "y": CSVRecordReader(table_csv(tmp_path, y, "y.csv", header="a,b"), 1)},
        4, inputs=["x"], outputs=["y"])
    b = list(it)
    assert [m.num_examples() for m in b] == [4, 4, 1]
    np.testing.assert_array_equal(b[2].features[0].numpy(), x[8:].astype(np.float32))
    np.testing.assert_array_equal(b[1].labels[0].numpy(), y[4:8].astype(np.float32))
    it.reset()
    np.testing.assert_array_equal(it.next().features[0].numpy(), x[:4].astype(np.float32))


def test_multi_readers_of_different_lengths(tmp_path):
    it = RecordReaderMultiDataSetIterator(
        {"a": CSVRecordReader(write(tmp_path, "a.csv", "1\n2\n3\n")),
         "b": CSVRecordReader(write(tmp_path, "b.csv", "1\n2\n"))},
        2, inputs=["a"], outputs=["b"])
    it.next()
    with pytest.raises(ValueError) as info:
        it.next()
    assert str(info.value) == ("readers ['b'] ran out of records before the others: the "
                               "readers must have the same number of records")


def test_multi_spec_errors(tmp_path):
    path = write(tmp_path, "a.csv", "1,2\n2,5\n")
    r = {"a": CSVRecordReader(path)}
    with pytest.raises(ValueError, match=r"inputs: unknown reader 'b'; readers are \['a'\]"):
        RecordReaderMultiDataSetIterator(r, 2, inputs=["b"])
    with pytest.raises(TypeError, match="OneHot specs are for outputs only"):
        RecordReaderMultiDataSetIterator(r, 2, inputs=[OneHot("a", 1, 3)])
    with pytest.raises(ValueError, match="inputs: col_to must be >= col_from"):
        RecordReaderMultiDataSetIterator(r, 2, inputs=[("a", 1, 0)])
    with pytest.raises(TypeError, match="outputs: a spec is a reader name"):
        RecordReaderMultiDataSetIterator(r, 2, inputs=["a"], outputs=[("a", 1)])
    with pytest.raises(ValueError, match="inputs must contain at least one spec"):
        RecordReaderMultiDataSetIterator(r, 2, inputs=[])
    with pytest.raises(TypeError, match="readers must be a non-empty dict"):
        RecordReaderMultiDataSetIterator({}, 2, inputs=["a"])
    it = RecordReaderMultiDataSetIterator(r, 2, inputs=[("a", 0, 2)])
    with pytest.raises(ValueError, match=r"col_to 2 of spec \('a', 0, 2\) is out of range "
                                         r"for reader 'a' with 2 fields"):
        it.next()
    it = RecordReaderMultiDataSetIterator(r, 2, inputs=[("a", 0, 0)],
                                          outputs=[OneHot("a", 1, 3)])
    with pytest.raises(ValueError, match=r"reader 'a': label 5.0 in column index 1 is not a "
                                         r"class index in \[0, 3\)"):
        it.next()


def test_docstring_examples():
    result = doctest.testmod(ndws.data.records)
    assert result.failed == 0 and result.attempted >= 10


def test_reader_malformed_quoting_and_byte_order_mark(tmp_path):
    p = tmp_path / "bom.csv"
    p.write_bytes(b'\xef\xbb\xbf1,2\n"3,4\n')
    r = CSVRecordReader(p)
    assert r.next() == [1.0, 2.0]  # the byte-order mark is not part of the first field
    with pytest.raises(ValueError) as info:
        r.next()
    assert str(info.value) == f"{p}:2: malformed CSV: unexpected end of data"
    q = write(tmp_path, "q.csv", '1,2\n"3"x,4\n')
    with pytest.raises(ValueError) as info:
        list(CSVRecordReader(q))
    assert str(info.value) == f"{q}:2: malformed CSV: ',' expected after '\"'"


def test_abandoned_reader_closes_its_file(tmp_path):
    import gc

    r = CSVRecordReader(write(tmp_path, "a.csv", "1\n2\n3\n"))
    r.next()
    del r
    gc.collect()  # an unclosed file would raise ResourceWarning (an error in this suite)
    it = RecordReaderDataSetIterator(CSVRecordReader(write(tmp_path, "b.csv", "1,0\n2,1\n")),
                                     1, label_index=1, num_classes=2)
    it.next()
    del it
    gc.collect()


def test_normalized_csv_through_async_prefetch(tmp_path, cls_table):
    """The whole pipeline: CSV -> batches -> NormalizerStandardize as pre_processor, prefetched
    by AsyncDataSetIterator (the transform runs in the producer, on ring-allocated batches)."""
    async_iterators = pytest.importorskip("ndws.data.async_iterators")
    from ndws.data.normalizers import NormalizerStandardize

    it = RecordReaderDataSetIterator(CSVRecordReader(table_csv(tmp_path, cls_table)), 4,
                                     label_index=4, num_classes=3)
    norm = NormalizerStandardize()
    norm.fit(it)
    it.pre_processor = norm
    expected = [b.copy().detach() for b in it]
    with async_iterators.AsyncDataSetIterator(it, queue_size=2) as prefetch:
        for _ in range(2):
            got = [b.detach() for b in prefetch]
            assert len(got) == len(expected) == 6
            assert all(g == e for g, e in zip(got, expected))


# -- after an error, encodings, paths that are not CSV files ---------------------------------

def test_a_record_that_fails_mid_batch_loses_nothing_silently(tmp_path):
    path = write(tmp_path, "mid.csv", "1,0\n2,1\nx,0\n4,1\n5,0\n")
    it = RecordReaderDataSetIterator(CSVRecordReader(path), batch_size=4, label_index=1,
                                     num_classes=2)
    with pytest.raises(ValueError, match=r"mid.csv:3: column index 0: cannot parse 'x' as a "
                                         r"number$"):
        it.next()
    for call in (it.next, it.next):        # records 1-2 are not skipped: the epoch stops
        with pytest.raises(RuntimeError, match=r"^RecordReaderDataSetIterator stopped at an "
                                               r"error in an earlier batch \(ValueError: "):
            call()
    it.reset()
    with pytest.raises(ValueError, match="mid.csv:3"):
        it.next()                           # the same batch fails again: the data is bad


def test_the_reader_itself_refuses_after_an_error_until_reset(tmp_path):
    path = write(tmp_path, "r.csv", "1,2\n3\n5,6\n")
    reader = CSVRecordReader(path)
    assert reader.next() == [1.0, 2.0]
    with pytest.raises(ValueError, match=r"r.csv:2: expected 2 fields, got 1$"):
        reader.next()
    for call in (reader.has_next, reader.next):
        with pytest.raises(RuntimeError) as info:
            call()
        assert str(info.value).startswith("CSVRecordReader stopped at an error (ValueError: ")
        assert str(info.value).endswith("it does not skip to the next record: call reset() to "
                                        "read again from the start")
    reader.reset()
    assert reader.next() == [1.0, 2.0]


def test_undecodable_bytes_name_the_file_line_and_encoding(tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes("a,b\n1,2\n3,4\n5,6\ncaf\u00e9,7\n".encode("latin-1"))
    with pytest.raises(ValueError) as info:
        list(CSVRecordReader(path, skip_num_lines=1))
    assert str(info.value) == (
        f"{path}:5: can't decode byte 0xe9 (byte 4 of the line) as 'utf-8' (invalid "
        f"continuation byte); pass the file's encoding, e.g. CSVRecordReader(..., "
        f"encoding='latin-1')")
    # with the right encoding the field decodes, and is then reported as not a number
    with pytest.raises(ValueError, match=r"latin.csv:5: column index 0: cannot parse 'caf\u00e9' "
                                         r"as a number$"):
        list(CSVRecordReader(path, skip_num_lines=1, encoding="latin-1"))


def test_other_encodings_and_the_byte_order_mark(tmp_path):
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbf1,2\n3,4\n")
    assert list(CSVRecordReader(tmp_path / "bom.csv")) == [[1.0, 2.0], [3.0, 4.0]]
    (tmp_path / "u16.csv").write_bytes("1,2\n3,4\n".encode("utf-16"))
    assert list(CSVRecordReader(tmp_path / "u16.csv", encoding="utf-16")) == [[1.0, 2.0],
                                                                             [3.0, 4.0]]
    assert "encoding='utf-16'" in repr(CSVRecordReader(tmp_path / "u16.csv", encoding="utf-16"))


def test_a_binary_file_is_reported_not_parsed(tmp_path):
    path = tmp_path / "blob.csv"
    path.write_bytes(b"1,2\n" + bytes(range(128, 256)))
    with pytest.raises(ValueError, match=r"blob.csv:2: can't decode byte 0x80 \(byte 1 of the "
                                         r"line\) as 'utf-8' \(invalid start byte\)"):
        list(CSVRecordReader(path))


@pytest.mark.parametrize("kw, exc, msg", [
    (dict(encoding="klingon"), ValueError, "encoding: unknown encoding 'klingon'"),
    (dict(encoding=8), TypeError, "encoding must be a str, got int 8"),
])
def test_bad_encoding_arguments(tmp_path, kw, exc, msg):
    path = write(tmp_path, "ok.csv", "1\n")
    with pytest.raises(exc) as info:
        CSVRecordReader(path, **kw)
    assert str(info.value) == msg


def test_a_directory_or_a_missing_file(tmp_path):
    with pytest.raises(IsADirectoryError) as info:
        CSVRecordReader(tmp_path)
    assert str(info.value) == f"path_or_paths: {str(tmp_path)!r} is a directory, not a CSV file"
    with pytest.raises(FileNotFoundError) as info:
        CSVRecordReader(tmp_path / "nope.csv")
    assert str(info.value) == f"path_or_paths: no such file {str(tmp_path / 'nope.csv')!r}"
    import os
    os.mkfifo(tmp_path / "fifo.csv")           # reading it would wait for a writer forever
    with pytest.raises(ValueError) as info:
        CSVRecordReader(tmp_path / "fifo.csv")
    assert str(info.value) == (f"path_or_paths: {str(tmp_path / 'fifo.csv')!r} is not a regular "
                               f"file")


def test_an_empty_or_truncated_file(tmp_path):
    empty = write(tmp_path, "empty.csv", "")
    assert list(CSVRecordReader(empty)) == []
    with pytest.raises(ValueError, match="reader has no records"):
        RecordReaderDataSetIterator(CSVRecordReader(empty), 2, label_index=0,
                                    num_classes=2).input_columns()
    cut = write(tmp_path, "cut.csv", "1,2,3\n4,5,6\n7,8")     # the last row was cut short
    with pytest.raises(ValueError, match=r"cut.csv:3: expected 3 fields, got 2$"):
        list(CSVRecordReader(cut))


# -- a header line, class names ----------------------------------------------------------------

def test_a_header_read_as_data_suggests_skip_num_lines(tmp_path):
    path = write(tmp_path, "h.csv", "sepal,petal,label\n1,2,0\n")
    with pytest.raises(ValueError) as info:
        list(CSVRecordReader(path))
    assert str(info.value) == (f"{path}:1: column index 0: cannot parse 'sepal' as a number; if "
                               f"line 1 is a header, pass skip_num_lines=1")
    # after a blank line and a title line: the header's own physical line
    path = write(tmp_path, "t.csv", "\ntitle\nsepal,petal\n1,2\n")
    with pytest.raises(ValueError, match=r"t.csv:2: .*; if line 2 is a header, pass "
                                         r"skip_num_lines=2$"):
        list(CSVRecordReader(path))
    with pytest.raises(ValueError, match=r"t.csv:3: .*; if line 3 is a header, pass "
                                         r"skip_num_lines=3$"):
        list(CSVRecordReader(path, skip_num_lines=2))
    # a first record with numbers in it is data with a bad field, not a header
    path = write(tmp_path, "d.csv", "1,x,0\n")
    with pytest.raises(ValueError, match=r"d.csv:1: column index 1: cannot parse 'x' as a "
                                         r"number$"):
        list(CSVRecordReader(path))
    # each file's first record (skip_num_lines applies to each)
    a = write(tmp_path, "a.csv", "1,2\n")
    b = write(tmp_path, "b.csv", "x,y\n3,4\n")
    with pytest.raises(ValueError, match=r"b.csv:1: .*; if line 1 is a header"):
        list(CSVRecordReader([a, b]))


IRIS = ("sepal_length,sepal_width,species\n5.1,3.5,setosa\n7.0,3.2,versicolor\n"
        "6.3,3.3, virginica\n4.9,3.0,setosa\n5.9,3.0,\"virginica\"\n")
NAMES = ["setosa", "versicolor", "virginica"]


def iris_table():
    x = np.array([[5.1, 3.5], [7.0, 3.2], [6.3, 3.3], [4.9, 3.0], [5.9, 3.0]], np.float32)
    return x, np.array([0, 1, 2, 0, 2])


def test_class_names_without_a_mapping_say_how_to_map_them(tmp_path):
    path = write(tmp_path, "iris.csv", IRIS)
    it = RecordReaderDataSetIterator(CSVRecordReader(path, 1), 2, label_index=2, num_classes=3)
    with pytest.raises(ValueError) as info:
        it.next()
    assert str(info.value) == (f"{path}:2: column index 2: cannot parse 'setosa' as a number; "
                               f"for class names in the label column pass label_mapping (the "
                               f"names in class order, or 'auto')")
    with pytest.raises(ValueError, match=r"^num_classes is required for classification \("
                                         r"label_index=2\); pass regression=True for float "
                                         r"targets, or label_mapping for class names$"):
        RecordReaderDataSetIterator(CSVRecordReader(path, 1), 2, label_index=2)


@pytest.mark.parametrize("mapping", ["auto", NAMES, {"virginica": 2, "setosa": 0,
                                                     "versicolor": 1}, tuple(NAMES)])
def test_label_mapping_turns_class_names_into_one_hot_rows(tmp_path, mapping):
    path = write(tmp_path, "iris.csv", IRIS)
    reader = CSVRecordReader(path, skip_num_lines=1)
    it = RecordReaderDataSetIterator(reader, 2, label_index=2, label_mapping=mapping)
    assert reader.text_columns == {2}
    assert it.labels == NAMES and it.total_outcomes() == 3 and it.input_columns() == 2
    x, y = iris_table()
    for _ in range(2):                                   # a second epoch reads the same
        got = list(it)
        assert [b.num_examples() for b in got] == [2, 2, 1]
        np.testing.assert_array_equal(np.concatenate([b.features.numpy() for b in got]), x)
        np.testing.assert_array_equal(np.concatenate([b.labels.numpy() for b in got]),
                                      np.eye(3, dtype=np.float32)[y])


def test_auto_numbers_the_classes_in_sorted_order_in_every_shard(tmp_path):
    path = write(tmp_path, "iris.csv", IRIS)
    it = RecordReaderDataSetIterator(CSVRecordReader(path, 1), 2, label_index=2,
                                     label_mapping="auto")
    _, y = iris_table()
    parts = [list(it.shard(r, 2)) for r in range(2)]
    labels = [np.concatenate([b.labels.numpy() for b in p]).argmax(1) for p in parts]
    # global batches of 4: rows 0-1 and 4 to rank 0, rows 2-3 to rank 1
    np.testing.assert_array_equal(labels[0], y[[0, 1, 4]])
    np.testing.assert_array_equal(labels[1], y[[2, 3]])
    # the test file lacks versicolor: the training iterator's names keep the numbering
    test_path = write(tmp_path, "test.csv", "a,b,c\n1,2,virginica\n")
    test = RecordReaderDataSetIterator(CSVRecordReader(test_path, 1), 1, label_index=2,
                                       label_mapping=it.labels)
    assert test.next().labels.numpy().tolist() == [[0.0, 0.0, 1.0]]
    alone = RecordReaderDataSetIterator(CSVRecordReader(test_path, 1), 1, label_index=2,
                                        label_mapping="auto")
    assert alone.labels == ["virginica"]


def test_a_name_outside_the_mapping_names_the_file_and_line(tmp_path):
    path = write(tmp_path, "iris.csv", IRIS)
    it = RecordReaderDataSetIterator(CSVRecordReader(path, 1), 3, label_index=2,
                                     label_mapping=["setosa", "virginica"])
    with pytest.raises(ValueError) as info:
        it.next()
    assert str(info.value) == (f"{path}:3: label 'versicolor' in column index 2 is not in "
                               f"label_mapping (classes: ['setosa', 'virginica'])")
    wide = RecordReaderDataSetIterator(CSVRecordReader(path, 1), 5, label_index=2,
                                       label_mapping={"setosa": 0, "versicolor": 1,
                                                      "virginica": 1}, num_classes=4)
    assert wide.labels == ["setosa", "versicolor", "", ""]
    assert wide.next().labels.numpy().argmax(1).tolist() == [0, 1, 1, 0, 1]


@pytest.mark.parametrize("kwargs, exc, msg", [
    (dict(label_mapping="bogus"), ValueError, r"^label_mapping: expected 'auto', a sequence of "
                                              r"class names or a mapping of name to index, got "
                                              r"the str 'bogus'$"),
    (dict(label_mapping=3), TypeError, r"^label_mapping: expected 'auto', a sequence of class "
                                       r"names or a mapping of name to index, got int$"),
    (dict(label_mapping=[]), ValueError, r"^label_mapping: no classes given$"),
    (dict(label_mapping=["a", "a"]), ValueError, r"^label_mapping: class name 'a' is given "
                                                 r"twice$"),
    (dict(label_mapping=["a", 1]), TypeError, r"^label_mapping: class names must be str, got "
                                              r"int 1$"),
    (dict(label_mapping=[" a"]), ValueError, r"^label_mapping: class name ' a' has surrounding "
                                             r"blanks"),
    (dict(label_mapping={"a": -1}), ValueError, r"^label_mapping\['a'\] must be >= 0, got -1$"),
    (dict(label_mapping={"a": True}), TypeError, r"^label_mapping\['a'\] must be an int"),
    (dict(label_mapping=["a", "b", "c"], num_classes=2), ValueError,
     r"^label_mapping: index 2 is out of range for num_classes=2$"),
    (dict(label_mapping="auto", regression=True), ValueError,
     r"^label_mapping applies to classification only \(label_index >= 0, regression=False\)$"),
    (dict(label_index=-1, label_mapping="auto"), ValueError,
     r"^label_mapping applies to classification only"),
])
def test_label_mapping_arguments(tmp_path, kwargs, exc, msg):
    path = write(tmp_path, "iris.csv", IRIS)
    args = dict(label_index=2)
    args.update(kwargs)
    with pytest.raises(exc, match=msg):
        RecordReaderDataSetIterator(CSVRecordReader(path, 1), 2, **args)


def test_auto_checks_num_classes_and_custom_readers_must_give_text(tmp_path):
    path = write(tmp_path, "iris.csv", IRIS)
    it = RecordReaderDataSetIterator(CSVRecordReader(path, 1), 2, label_index=2,
                                     label_mapping="auto", num_classes=4)
    with pytest.raises(ValueError, match=r"^label_mapping='auto' found 3 classes \['setosa', "
                                         r"'versicolor', 'virginica'\] but num_classes=4; pass "
                                         r"the class names as label_mapping"):
        it.next()

    with pytest.raises(ValueError, match=r"label_mapping: the reader gave 0.0 in column index 1, "
                                         r"not text \(a custom reader must return the class name "
                                         r"as a str\)$"):
        RecordReaderDataSetIterator(ListReader([[1.0, 0.0], [2.0, 1.0]]), 2, label_index=1,
                                    label_mapping=["a"]).next()


def test_text_columns(tmp_path):
    path = write(tmp_path, "iris.csv", IRIS)
    reader = CSVRecordReader(path, 1, text_columns=[2, np.int64(0)])
    assert reader.next() == ["5.1", 3.5, "setosa"]
    assert "text_columns=[0, 2]" in repr(reader)
    with pytest.raises(ValueError, match=r"^reader.text_columns \[0\]: only the label column may "
                                         r"be text \(with label_mapping\); a feature must be a "
                                         r"number$"):
        RecordReaderDataSetIterator(reader, 2, label_index=2, label_mapping="auto")
    with pytest.raises(TypeError, match=r"^text_columns must be an iterable of column indices, "
                                        r"got int 2$"):
        CSVRecordReader(path, text_columns=2)
    with pytest.raises(ValueError, match=r"^text_columns: a column index must be >= 0, got -1$"):
        CSVRecordReader(path, text_columns=[-1])
    with pytest.raises(TypeError, match=r"^text_columns: a column index must be an int"):
        CSVRecordReader(path, text_columns=[True])


def test_numpy_integers_for_the_readers_ints(tmp_path, cls_table):
    path = table_csv(tmp_path, cls_table)
    it = RecordReaderDataSetIterator(CSVRecordReader(path, np.int64(0)), np.int32(5),
                                     label_index=np.int64(4), num_classes=np.uint8(3))
    assert (it.batch_size, it.label_index, it.num_classes) == (5, 4, 3)
    assert it.next().labels.shape == (5, 3)
    with pytest.raises(TypeError, match=r"^batch_size must be an int, got bool np.True_$"):
        RecordReaderDataSetIterator(CSVRecordReader(path), np.bool_(True), label_index=4,
                                    num_classes=3)


# -- what a reset forgets: widths learned from the records -----------------------------------

def test_reset_forgets_the_number_of_fields_the_reader_learned(tmp_path):
    path = write(tmp_path, "w.csv", "1,0,9\n2,1\n")
    reader = CSVRecordReader(path)
    assert reader.next() == [1.0, 0.0, 9.0] and reader.num_fields == 3
    with pytest.raises(ValueError, match=r"w.csv:2: expected 3 fields, got 2$"):
        reader.next()
    write(tmp_path, "w.csv", "1,0\n2,1\n")          # the file fixed
    reader.reset()
    assert reader.num_fields is None                # as a new reader's
    assert list(reader) == list(CSVRecordReader(path)) == [[1.0, 0.0], [2.0, 1.0]]
    assert reader.num_fields == 2


def test_an_assigned_number_of_fields_is_kept_across_reset(tmp_path):
    path = write(tmp_path, "w.csv", "1,0,9\n")
    reader = CSVRecordReader(path)
    reader.num_fields = np.int64(2)
    for _ in range(2):                               # before and after a reset
        with pytest.raises(ValueError, match=r"w.csv:1: expected 2 fields, got 3$"):
            reader.next()
        reader.reset()
        assert reader.num_fields == 2
    reader.num_fields = None                         # learned again from the records
    assert reader.next() == [1.0, 0.0, 9.0] and reader.num_fields == 3
    with pytest.raises(ValueError, match=r"^num_fields must be >= 1, got 0$"):
        reader.num_fields = 0
    with pytest.raises(TypeError, match=r"^num_fields must be an int, got str '2'$"):
        reader.num_fields = "2"
    assert reader.num_fields == 3                    # a refused value changes nothing


def test_the_iterators_learn_the_widths_again_after_reset():
    # custom readers (no num_fields): the widths the iterators themselves learned
    reader = ListReader([[1.0, 2.0, 0.0], [3.0, 4.0, 1.0]])
    it = RecordReaderDataSetIterator(reader, 2, label_index=2, num_classes=2)
    assert it.input_columns() == 2
    np.testing.assert_array_equal(it.next().features.numpy(), [[1, 2], [3, 4]])
    reader.items = [[1.0, 2.0, 1.0, 3.0], [4.0, 5.0, 0.0, 6.0]]   # one more column
    it.reset()
    assert (it.input_columns(), it.total_outcomes()) == (3, 2)
    ds = it.next()
    np.testing.assert_array_equal(ds.features.numpy(), np.float32([[1, 2, 3], [4, 5, 6]]))
    np.testing.assert_array_equal(ds.labels.numpy(), np.float32([[0, 1], [1, 0]]))

    reader = ListReader([[1.0, 0.0], [2.0, 1.0]])
    multi = RecordReaderMultiDataSetIterator({"r": reader}, 2, inputs=["r"])
    assert multi.next().features[0].shape == (2, 2)
    reader.items = [[1.0, 2.0, 3.0]]
    multi.reset()
    np.testing.assert_array_equal(multi.next().features[0].numpy(), np.float32([[1, 2, 3]]))


def test_an_auto_label_mapping_keeps_its_classes_across_reset(tmp_path):
    path = write(tmp_path, "names.csv", "1,b\n2,a\n")
    it = RecordReaderDataSetIterator(CSVRecordReader(path), 2, label_index=1,
                                     label_mapping="auto")
    assert it.labels == ["a", "b"]
    write(tmp_path, "names.csv", "1,c\n2,b\n")
    it.reset()                     # the classes keep their numbers: 'c' is no class of them
    assert it.labels == ["a", "b"]
    with pytest.raises(ValueError, match=r"names.csv:1: label 'c' in column index 1 is not in "
                                         r"label_mapping \(classes: \['a', 'b'\]\)$"):
        it.next()


# -- numbers: DL4J's syntax, and the range of float32 ------------------------------------------

F32_MAX = float(np.finfo(np.float32).max)
ABOVE_F32_MAX = float(np.nextafter(np.float64(F32_MAX), np.inf))  # rounds down to F32_MAX


def becomes_infinite(value):
    # NumPy's own answer: does the float64 value become an infinity as float32?
    with np.errstate(over="ignore"):
        return bool(np.isinf(np.float32(value))) and np.isfinite(value)


@pytest.mark.parametrize("text, reason", [
    *[(t, "'_' is not a digit separator here") for t in ("1_000", "1_0.5", "-2_5e1_0", " 1_0 ")],
    *[(t, "only ASCII digits are digits here") for t in ("١٢", "１２", "٣.٥", "-१e2")]])
def test_numbers_python_reads_and_dl4j_does_not(tmp_path, text, reason):
    assert float(text) is not None                 # Python reads them, DL4J does not
    path = write(tmp_path, "u.csv", f"1,0\n{text},1\n")
    with pytest.raises(ValueError, match=rf"u.csv:2: column index 0: cannot parse "
                                         rf"{re.escape(repr(text))} as a number \({reason}, as "
                                         r"in DL4J's Double.parseDouble\)$"):
        list(CSVRecordReader(path))
    # in a label column the error is the same: no hint about class names
    it = RecordReaderDataSetIterator(CSVRecordReader(path), 2, label_index=0, num_classes=2)
    with pytest.raises(ValueError, match=r"Double.parseDouble\)$"):
        it.next()
    # the one-pass parse of a numbers-only record sends it field by field as well
    path = write(tmp_path, "e.csv", f"2.5,{text}\n")
    with pytest.raises(ValueError, match=rf"e.csv:1: column index 1: .*\({reason}"):
        list(CSVRecordReader(path))
    # blanks float() strips are still blanks, whatever their code point
    assert list(CSVRecordReader(write(tmp_path, "b.csv", "\u00a01.5\u2003,2\n"))) == [[1.5, 2.0]]


def custom(*records):
    return RecordReaderDataSetIterator(ListReader(list(records)), len(records), label_index=2,
                                       num_classes=3)


def test_custom_readers_text_is_read_as_the_csv_reader_reads_a_field():
    # DataVec's Text writable is read with Double.parseDouble: numbers in text are numbers
    ds = custom(["1.5", " -2e1 ", "2"], [np.float32(3), "inf", 0]).next()
    np.testing.assert_array_equal(ds.features.numpy(), [[1.5, -20.0], [3.0, np.inf]])
    np.testing.assert_array_equal(ds.labels.numpy(), [[0, 0, 1], [1, 0, 0]])
    cases = [
        (["1_000", 1.0, 0], r"^column index 0: cannot parse '1_000' as a number \('_' is not a "
                            r"digit separator here, as in DL4J's Double.parseDouble\)$"),
        ([1.0, "１２", 0], r"^column index 1: cannot parse '１２' as a number \(only ASCII "
                          r"digits are digits here"),
        (["abc", 1.0, 0], r"^column index 0: cannot parse 'abc' as a number$"),
        ([1.0, "1e400", 0], r"^column index 1: '1e400' is out of range: past float64's largest "
                            r"finite value \(1.7976931348623157e\+308\) it would become inf$"),
        ([1.0, 2.0, "two"], r"^column index 2: cannot parse 'two' as a number; for class names "
                            r"in the label column pass label_mapping"),
        ([1.0, 2.0, "1.5"], r"^label 1.5 in column index 2 is not a class index in \[0, 3\)$"),
        ([1.0, 2.0, None], r"^column index 2: the reader gave None, not a number$"),
        ([1.0, 2.0, {}], r"^label \{\} in column index 2 is not a class index in \[0, 3\)$"),
        ([b"1", 2.0, 0], r"^column index 0: the reader gave bytes b'1', not a number \(decode "
                         r"text to str\)$"),
        ([None, 2.0, 0], r"^column index 0: the reader gave None, not a number$"),
        ([1.0, [2.0], 0], r"^the reader gave a field that is not a number outside the label "
                          r"column: every feature must be a number$"),
    ]
    for record, message in cases:
        with pytest.raises(ValueError, match=message):
            custom([1.0, 2.0, 0], record).next()


def test_custom_readers_text_in_a_multi_dataset_iterator():
    def multi(*records):
        return RecordReaderMultiDataSetIterator({"r": ListReader(list(records))}, 2,
                                                inputs=[("r", 0, 1)], outputs=[OneHot("r", 2, 3)])
    mds = multi(["0.5", "1", "2"], [1, "-3", "0"]).next()
    np.testing.assert_array_equal(mds.features[0].numpy(), [[0.5, 1.0], [1.0, -3.0]])
    np.testing.assert_array_equal(mds.labels[0].numpy(), [[0, 0, 1], [1, 0, 0]])
    with pytest.raises(ValueError, match=r"^reader 'r': column index 1: cannot parse '٣' as a "
                                         r"number \(only ASCII digits"):
        multi([1, 2, 0], [1, "٣", 0]).next()
    with pytest.raises(ValueError, match=r"^reader 'r': column index 1: the reader gave None"):
        multi([1, 2, 0], [1, None, 0]).next()
    with pytest.raises(ValueError, match=r"^reader 'r' gave a field that is not a number: every "
                                         r"field must be a number$"):
        multi([1, 2, 0], [1, {}, 0]).next()


def test_an_underscore_in_text_or_in_a_header(tmp_path):
    path = write(tmp_path, "h.csv", "big_x,small_y\n1,Iris_setosa\n")
    with pytest.raises(ValueError, match=r"h.csv:1: column index 0: cannot parse 'big_x' as a "
                                         r"number; if line 1 is a header, pass "
                                         r"skip_num_lines=1$"):
        list(CSVRecordReader(path))
    assert list(CSVRecordReader(path, 1, text_columns=[1])) == [[1.0, "Iris_setosa"]]


def test_a_finite_number_past_float64_is_refused_and_the_infinities_pass(tmp_path):
    path = write(tmp_path, "big.csv", "1,2\n3,-1e400\n")
    with pytest.raises(ValueError, match=r"big.csv:2: column index 1: '-1e400' is out of "
                                         r"range: past float64's largest finite value "
                                         r"\(1.7976931348623157e\+308\) it would become -inf$"):
        list(CSVRecordReader(path))
    path = write(tmp_path, "inf.csv", "inf,-inf,+Infinity,-INFINITY,nan,NaN, inf \n")
    values = CSVRecordReader(path).next()
    assert values[:4] == [np.inf, -np.inf, np.inf, -np.inf] and values[6] == np.inf
    assert np.isnan(values[4]) and np.isnan(values[5])


def test_the_one_pass_parse_reads_as_the_field_by_field_one(tmp_path):
    # records that take the one-pass route and records that do not, in one file
    rows = ["1.5, -2 ,3e2", "\x1c4\x1c,5,6", "nan,1,2", "1e308,1e308,1", "7,8,9"]
    path = write(tmp_path, "mix.csv", "\n".join(rows) + "\n")
    got = list(CSVRecordReader(path))
    expected = [[float(f.strip()) for f in row.split(",")] for row in rows]
    assert np.array_equal(np.array(got), np.array(expected), equal_nan=True)


@pytest.mark.parametrize("value", [1e39, -1e300, float(2**128 - 2**103), -float(2**128),
                                   ABOVE_F32_MAX, -ABOVE_F32_MAX, F32_MAX, 1e38, -1e-300,
                                   float(2**128 - 2**103 - 2**75)])
def test_a_value_float32_cannot_hold_is_refused_naming_its_place(tmp_path, value):
    path = write(tmp_path, "r.csv", f"1,2,0\n3,4,1\n5,{value!r},0\n")
    it = RecordReaderDataSetIterator(CSVRecordReader(path), 3, label_index=2, num_classes=2)
    if becomes_infinite(value):
        sign = "-" if value < 0 else ""
        message = (rf"r.csv:3: column index 1: {re.escape(repr(value))} is out of range for "
                   rf"float32, the batches' dtype: past its largest finite value "
                   rf"\(3.4028235e\+38\) it would become {sign}inf$")
        with pytest.raises(ValueError, match=message):
            it.next()
    else:
        assert it.next().features.numpy()[2, 1] == np.float32(value)


def test_float32_range_in_regression_targets_shards_and_the_multi_iterator(tmp_path):
    path = write(tmp_path, "t.csv", "1,2\n3,4\n5,1e39\n7,8\n")
    reg = RecordReaderDataSetIterator(CSVRecordReader(path), 4, label_index=1,
                                      regression=True)
    message = r"t.csv:3: column index 1: 1e\+39 is out of range for float32"
    with pytest.raises(ValueError, match=message):
        reg.next()
    for rank in (0, 1):            # the value is in rank 0's part: both ranks refuse the batch
        with pytest.raises(ValueError, match=message):
            reg.shard(rank, 2).next()
    multi = RecordReaderMultiDataSetIterator({"t": CSVRecordReader(path)}, 4,
                                             inputs=[("t", 0, 0)], outputs=[("t", 1, 1)])
    with pytest.raises(ValueError, match=r"t.csv:3: reader 't': column index 1: 1e\+39 is out "
                                         r"of range for float32"):
        multi.next()
    # a one-hot column is a class index, checked as one
    onehot = RecordReaderMultiDataSetIterator({"t": CSVRecordReader(path)}, 4,
                                              inputs=[("t", 0, 0)], outputs=[OneHot("t", 1, 9)])
    with pytest.raises(ValueError, match=r"label 1e\+39 in column index 1 is not a class"):
        onehot.next()
    for rank in (0, 1):            # the label is in rank 0's part: both ranks refuse the batch
        onehot = RecordReaderMultiDataSetIterator({"t": CSVRecordReader(path)}, 4,
                                                  inputs=[("t", 0, 0)],
                                                  outputs=[OneHot("t", 1, 9)])
        with pytest.raises(ValueError, match=r"^.*t.csv:3: reader 't': label 1e\+39 in column "
                                             r"index 1 is not a class index in \[0, 9\)$"):
            onehot.shard(rank, 2).next()


def test_float32_range_in_arrays_from_a_custom_reader():
    image = np.zeros((2, 2))
    image[1, 0] = -1e39
    reader = ListReader([[np.zeros((2, 2)), 0.0], [image, 1.0]])
    it = RecordReaderDataSetIterator(reader, 2, label_index=1, num_classes=2)
    with pytest.raises(ValueError, match=r"^column index 0, array index \(1, 0\): -1e\+39 is "
                                         r"out of range for float32"):
        it.next()
    reader.items = [[np.zeros(2), 0.0], [np.zeros(2), 1e39]]
    it = RecordReaderDataSetIterator(reader, 2, label_index=1, regression=True)
    with pytest.raises(ValueError, match=r"^column index 1: 1e\+39 is out of range"):
        it.next()
    # every record of the global batch is checked, in each shard: rank 0 refuses rank 1's
    # bad record too (a shard refusing alone would leave the others waiting for it)
    for items, message in [([[np.zeros(2), 0.0], [np.zeros(2), 1e39]], r"^column index 1: "),
                           ([[np.zeros(2), 0.0], [np.full(2, 1e39), 1.0]],
                            r"^column index 0, array index \(0,\): 1e\+39"),
                           ([[np.zeros(2), 0.0], [np.zeros(3), 1.0]],
                            r"^records' arrays must all have one shape: \(2,\) first, then "
                            r"\(3,\)$")]:
        for rank in (0, 1):
            it = RecordReaderDataSetIterator(ListReader(items), 2, label_index=1,
                                             regression=True).shard(rank, 2)
            with pytest.raises(ValueError, match=message):
                it.next()
    # a good batch: each shard its own part
    items = [[np.full(2, float(i)), float(i)] for i in range(4)]
    parts = [RecordReaderDataSetIterator(ListReader(items), 4, label_index=1,
                                         regression=True).shard(rank, 2).next()
             for rank in (0, 1)]
    np.testing.assert_array_equal(parts[0].features.numpy(), [[0, 0], [1, 1]])
    np.testing.assert_array_equal(parts[1].labels.numpy(), [[2], [3]])


def test_an_integer_beyond_float64_from_a_reader_is_named_not_an_overflow():
    from ndws.data import SequenceRecordReaderDataSetIterator
    big = 10 ** 400
    with pytest.raises(ValueError, match=r"the reader gave an integer beyond the range of "
                                         r"float64: every feature must fit a float"):
        RecordReaderDataSetIterator(ListReader([[big, 0]]), 1, 1, 2).next()
    with pytest.raises(ValueError, match=r"reader 'r' gave an integer beyond the range of "
                                         r"float64: every field must fit a float"):
        RecordReaderMultiDataSetIterator({"r": ListReader([[big, 0]])}, 1, inputs=[("r", 0, 0)],
                                         outputs=[("r", 1, 1)]).next()
    with pytest.raises(ValueError, match=r"gave a sequence with an integer beyond the range "
                                         r"of float64 \(every field must fit a float\)"):
        SequenceRecordReaderDataSetIterator(ListReader([[[big, 0], [1, 1]]]), 1, 2, 1).next()
