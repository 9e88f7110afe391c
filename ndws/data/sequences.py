"""Sequence records: DataVec's ``CSVSequenceRecordReader`` (one sequence per file, one time
step per line) and DL4J's ``SequenceRecordReaderDataSetIterator`` (padded batches of time
series in NCW layout, ``[batch, size, time]``, with DL4J's masks). See docs/data.md, "Sequence
data".

>>> import os, tempfile
>>> from ndws.data.sequences import (CSVSequenceRecordReader,
...                                  SequenceRecordReaderDataSetIterator)
>>> d = tempfile.mkdtemp()
>>> for name, text in (("0.csv", "1,0\\n2,1\\n3,1\\n"), ("1.csv", "4,1\\n")):
...     with open(os.path.join(d, name), "w") as f:
...         _ = f.write(text)
>>> reader = CSVSequenceRecordReader([os.path.join(d, n) for n in ("0.csv", "1.csv")])
>>> it = SequenceRecordReaderDataSetIterator(reader, mini_batch_size=2, num_possible_labels=2,
...                                          label_index=1)
>>> ds = it.next()
>>> ds.features.numpy().tolist()            # [batch, size, time]
[[[1.0, 2.0, 3.0]], [[4.0, 0.0, 0.0]]]
>>> ds.features_mask.numpy().tolist()       # the short sequence is padded at its end
[[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]
"""
from __future__ import annotations

import enum
import os
from typing import Any, Iterator

import numpy as np

from ndws.data.dataset import DataSet
from ndws.data.iterators import DataSetIterator
from ndws.data.records import (CSVRecordReader, _check_int, _float32_error, _float32_overflow,
                               _has_text, _no_class_index, _reader_copy, _RecordShard,
                               _text_fields_as_numbers, _where)

__all__ = ["CSVSequenceRecordReader", "AlignmentMode", "SequenceRecordReaderDataSetIterator"]

#: The largest batch array (bytes) the iterator asks for; a one-hot label array is as big as
#: the claimed number of classes makes it, so an absurd num_possible_labels is refused by name
#: before anything is allocated (the same bound as the network's arrays, docs/data.md).
MAX_BATCH_BYTES = 1 << 48

#: DL4J's message for sequences of different lengths under EQUAL_LENGTH (after the file names)
_EQUAL_LENGTH_MESSAGE = ("Alignment mode is set to EQUAL_LENGTH but variable length data was "
                         "encountered. Use AlignmentMode.ALIGN_START or AlignmentMode.ALIGN_END "
                         "with variable length data")


class _Steps(list):
    """A sequence as the reader's generator yields it: the steps, and each step's line."""

    __slots__ = ("lines",)


class CSVSequenceRecordReader(CSVRecordReader):
    """Read one sequence per CSV file, one time step per line (DataVec's
    ``CSVSequenceRecordReader``).

    Parameters
    ----------
    path_or_paths : str or os.PathLike, or a sequence of them
        The files, one sequence each, read in the order given. DataVec's
        ``NumberedFileInputSplit("seq_%d.csv", 0, 9)`` is
        ``[f"seq_{i}.csv" for i in range(10)]`` here. A directory is refused: list its files
        in the order wanted.
    skip_num_lines : int
        Lines skipped at the start of *each* file (headers).
    delimiter, quote, encoding, text_columns
        As `CSVRecordReader`.

    Notes
    -----
    ``next()`` (also ``sequence_record()``, DataVec's name) returns the next file's sequence:
    a list of time steps, each a list of fields (floats). ``location`` is then
    ``(file, None)`` and ``step_lines`` the 1-based line of each step, which the iterators use
    to name the line of a bad value. Empty lines are skipped; a file with no step (empty, or a
    header only) gives an empty sequence, which `SequenceRecordReaderDataSetIterator`
    reports as an error naming the file (DL4J's ``ZeroLengthSequenceException``).

    Every step of every file must have as many fields as the first step read since the last
    ``reset()``; a ragged line or a field that is not a number is a ``ValueError`` naming the
    file and the line, as in `CSVRecordReader`. After an error the reader does not skip to
    the next file: ``has_next()`` and ``next()`` raise ``RuntimeError`` until ``reset()``.
    """

    #: the 1-based line of each step of the sequence last returned by next(), or None
    step_lines: list[int] | None = None

    def __init__(self, path_or_paths: Any, skip_num_lines: int = 0, delimiter: str = ",",
                 quote: str = '"', encoding: str = "utf-8",
                 text_columns: Any = None) -> None:
        candidates = ([path_or_paths] if isinstance(path_or_paths, (str, os.PathLike))
                      else path_or_paths if isinstance(path_or_paths, (list, tuple)) else [])
        for p in candidates:
            if isinstance(p, (str, os.PathLike)) and os.path.isdir(p):
                raise IsADirectoryError(
                    f"path_or_paths: {os.fspath(p)!r} is a directory; a sequence reader reads "
                    f"one sequence per file: pass its files in the order wanted, e.g. "
                    f"sorted(glob.glob(os.path.join(folder, '*.csv')))")
        super().__init__(path_or_paths, skip_num_lines, delimiter, quote, encoding,
                         text_columns)

    def __repr__(self) -> str:
        return "CSVSequenceRecordReader" + super().__repr__()[len("CSVRecordReader"):]

    def _records(self) -> Iterator[tuple[list, str, None]]:
        for path in self.paths:
            steps = _Steps()
            steps.lines = []
            for record, _, line in self._decoded_records(path):
                steps.append(record)
                steps.lines.append(line)
            yield steps, path, None

    def next(self) -> list[list[Any]]:
        """The next file's sequence: a list of time steps, each a list of fields."""
        steps = super().next()
        self.step_lines = getattr(steps, "lines", None)
        return list(steps)

    def sequence_record(self) -> list[list[Any]]:
        """DataVec's name for `next`."""
        return self.next()

    def reset(self) -> None:
        super().reset()
        self.step_lines = None


class AlignmentMode(enum.Enum):
    """How `SequenceRecordReaderDataSetIterator` aligns features and labels in time (DL4J's
    ``SequenceRecordReaderDataSetIterator.AlignmentMode``; docs/data.md has pictures).

    EQUAL_LENGTH
        Every sequence of a batch, features and labels, has one length; anything else is
        DL4J's error. No mask.
    ALIGN_START
        Each example's features and labels start at step 0; everything is padded at the end
        to the batch's longest sequence, and masked.
    ALIGN_END
        Each example's features and labels end together (at the example's longer one), then
        are padded at the end to the batch's longest: a single-step label file is the label
        of a sequence's last step (sequence classification).
    """

    EQUAL_LENGTH = "EQUAL_LENGTH"
    ALIGN_START = "ALIGN_START"
    ALIGN_END = "ALIGN_END"


def _alignment(value: Any, default: AlignmentMode) -> AlignmentMode:
    if value is None:
        return default
    if isinstance(value, AlignmentMode):
        return value
    if isinstance(value, str) and value in AlignmentMode.__members__:
        return AlignmentMode[value]
    raise ValueError(f"alignment_mode must be an AlignmentMode (EQUAL_LENGTH, ALIGN_START, "
                     f"ALIGN_END) or its name, got {value!r:.60}")


def _steps(n: int) -> str:
    return f"{n} step" if n == 1 else f"{n} steps"


def _is_reader(obj: Any) -> bool:
    return all(callable(getattr(obj, m, None)) for m in ("has_next", "next", "reset"))


class _Sequence:
    """One sequence as read: its steps as a (time, fields) float64 table, and where it came
    from (to name the file and line of a bad value)."""

    __slots__ = ("table", "path", "lines")

    def __init__(self, table: np.ndarray, path: str | None, lines: list[int] | None):
        self.table = table
        self.path = path
        self.lines = lines

    @property
    def length(self) -> int:
        return self.table.shape[0]

    def where(self, step: int | None = None) -> str:
        """"<file>:<line>: " of `step` (or "<file>: "), as much as is known."""
        if self.path is None:
            return "" if step is None else f"step {step}: "
        if step is not None and self.lines is not None and step < len(self.lines):
            return f"{self.path}:{self.lines[step]}: "
        return f"{self.path}: " if step is None else f"{self.path}: step {step}: "


def _read_sequence(reader: Any, role: str) -> _Sequence:
    # The reader's next sequence as a float table; the CSV reader has checked every field
    # already, a custom reader's sequence is checked here.
    steps = reader.next()
    loc = getattr(reader, "location", None)
    path = loc[0] if loc else None
    seq = _Sequence(None, path, getattr(reader, "step_lines", None))     # its table below
    where = _where(reader)
    if isinstance(steps, np.ndarray):
        if steps.ndim != 2:
            raise ValueError(f"{where}{role} gave a sequence array of shape {steps.shape}; "
                             f"expected (time steps, fields)")
        if steps.dtype.kind not in "biuf":
            # complex would lose its imaginary part, dates and text have no float value
            raise TypeError(f"{where}{role} gave a sequence array of dtype {steps.dtype}; "
                            f"expected numbers (bool, integer or floating point)")
        table = steps
    else:
        try:
            steps = list(steps)
        except TypeError:
            raise TypeError(f"{where}{role} gave {type(steps).__name__} for a sequence; "
                            f"expected a list of time steps, each a list of numbers") from None
        if not all(isinstance(s, (list, tuple, np.ndarray)) for s in steps):
            raise TypeError(f"{where}{role} gave a sequence whose time steps are not all lists "
                            f"of fields; expected a list of time steps, each a list of "
                            f"numbers")
        widths = {len(s) for s in steps}
        if len(widths) > 1:
            raise ValueError(f"{where}{role} gave a sequence whose time steps have different "
                             f"numbers of fields ({sorted(widths)}); every step needs the "
                             f"same fields")
        if any(isinstance(v, (complex, np.complexfloating)) for s in steps for v in s):
            raise TypeError(f"{where}{role} gave a complex field; expected real numbers")
        table = [_text_fields_as_numbers(s, seq.where(t)) if _has_text(s) else s
                 for t, s in enumerate(steps)]
    try:
        table = np.asarray(table, dtype=np.float64)
    except OverflowError:
        raise ValueError(f"{where}{role} gave a sequence with an integer beyond the range of "
                         f"float64 (every field must fit a float)") from None
    except (TypeError, ValueError):
        raise ValueError(f"{where}{role} gave a sequence with a field that is not a number "
                         f"(every field of a step must be a number here)") from None
    if table.ndim == 1 and table.size == 0:
        table = table.reshape(0, 0)
    seq.table = table
    return seq


class SequenceRecordReaderDataSetIterator(_RecordShard, DataSetIterator):
    """Batches of sequences as padded time series with masks (DL4J's
    ``SequenceRecordReaderDataSetIterator``).

    Two forms, as DL4J's constructors (positional arguments in DL4J's order, or keywords):

    * ``SequenceRecordReaderDataSetIterator(reader, mini_batch_size, num_possible_labels,
      label_index, regression=False)``: one reader whose sequences hold the label in column
      `label_index` of every step (sequence labelling: a label per step);
    * ``SequenceRecordReaderDataSetIterator(features_reader, labels_reader, mini_batch_size,
      num_possible_labels, regression=False, alignment_mode=AlignmentMode.EQUAL_LENGTH)``:
      sequence i of `labels_reader` labels sequence i of `features_reader`; with
      ``ALIGN_END`` and a labels file of one step, one label per sequence (classification
      of whole sequences).

    Parameters
    ----------
    reader : CSVSequenceRecordReader
        The features (and, in the one-reader form, the labels). Any object with
        ``has_next()``, ``next()`` (a sequence: a list of time steps, each a list of numbers,
        or a ``(time, fields)`` array) and ``reset()`` works. The iterator owns its readers:
        they are reset at construction and by ``reset()``.
    labels_reader : sequence reader, optional
        The labels, one sequence per features sequence (the two-reader form).
    mini_batch_size : int
        Sequences per batch (the last batch may be smaller).
    num_possible_labels : int
        Classification: the number of classes; each step's label is a class index in
        ``[0, num_possible_labels)``, turned into a one-hot column. Regression: None (or -1)
        for one label column (the one-reader form) or every column of the labels reader;
        more than 1 in the one-reader form makes columns ``label_index`` to the last the
        targets (DL4J's rule), and must be their number.
    label_index : int
        One-reader form: the label column (0-based); -1 (the default) is the last column.
        The features are the other columns, in file order.
    regression : bool
        Float targets instead of one-hot classes.
    alignment_mode : AlignmentMode or its name, optional
        How features and labels line up in time (see `AlignmentMode`). The default is DL4J's:
        ``ALIGN_START`` in the one-reader form (a step's features and label are on one line,
        so only the padding at the end differs between sequences), ``EQUAL_LENGTH`` in the
        two-reader form.

    Notes
    -----
    A batch is a `DataSet` with features ``(batch, n_features, T) NDArray of float32`` and
    labels ``(batch, n_labels, T)``, ``T`` the batch's longest sequence (a shard's batch: the
    longest of its global batch, so the shards concatenate to the global batch), placed in
    the current workspace (an async prefetcher's ring). ``features_mask`` and ``labels_mask``
    are ``(batch, T) NDArray of float32``, 1 where a step holds data and 0 where it is
    padding, or None when every sequence of the batch fills all ``T`` steps of that array
    (DL4J's rule: a batch of equal lengths has no mask).

    Errors name the file and the line: a zero-length sequence, a label that is not a class
    index, a finite feature or regression target float32 cannot hold (``1e39``: it would
    become an infinity; NaN and the infinities pass), a labels file whose length disagrees
    with its features file under EQUAL_LENGTH (DL4J's message), readers with different
    numbers of sequences (CSV readers with different numbers of files are refused at
    construction). The numbers of fields are learned from the sequences again after
    ``reset()``, so a file fixed after an error is read as a new iterator reads it.
    """

    AlignmentMode = AlignmentMode

    def __init__(self, reader: Any, *args: Any, labels_reader: Any = None,
                 mini_batch_size: Any = None, num_possible_labels: Any = None,
                 label_index: Any = None, regression: Any = None,
                 alignment_mode: Any = None) -> None:
        given = {"labels_reader": labels_reader, "mini_batch_size": mini_batch_size,
                 "num_possible_labels": num_possible_labels, "label_index": label_index,
                 "regression": regression, "alignment_mode": alignment_mode}
        two = labels_reader is not None or (len(args) > 0 and _is_reader(args[0]))
        names: tuple[str, ...] = (
            ("labels_reader", "mini_batch_size", "num_possible_labels", "regression",
             "alignment_mode") if two else
            ("mini_batch_size", "num_possible_labels", "label_index", "regression"))
        if labels_reader is not None:
            names = names[1:]                 # the labels reader came as a keyword
        if len(args) > len(names):
            raise TypeError(f"SequenceRecordReaderDataSetIterator takes at most "
                            f"{len(names) + 1} positional arguments in the "
                            f"{'two' if two else 'one'}-reader form ({', '.join(names)}), got "
                            f"{len(args) + 1}")
        for name, value in zip(names, args):
            if given[name] is not None:
                raise TypeError(f"SequenceRecordReaderDataSetIterator got multiple values for "
                                f"argument {name!r}")
            given[name] = value
        if not _is_reader(reader):
            raise TypeError(f"reader must be a sequence record reader with has_next(), next() "
                            f"and reset(), got {type(reader).__name__}")
        if two:
            if not _is_reader(given["labels_reader"]):
                raise TypeError(f"labels_reader must be a sequence record reader with "
                                f"has_next(), next() and reset(), got "
                                f"{type(given['labels_reader']).__name__}")
            if given["labels_reader"] is reader:
                raise ValueError("labels_reader is the features reader itself; for labels in "
                                 "a column of the features pass label_index instead")
            if given["label_index"] is not None:
                raise TypeError("label_index is for the one-reader form; with a labels_reader "
                                "the labels are the labels reader's columns")
        if given["mini_batch_size"] is None:
            raise TypeError("SequenceRecordReaderDataSetIterator needs mini_batch_size")
        self.reader = reader
        self.labels_reader = given["labels_reader"] if two else None
        self.batch_size = _check_int("mini_batch_size", given["mini_batch_size"], 1)
        regression = False if given["regression"] is None else given["regression"]
        if not isinstance(regression, (bool, np.bool_)):
            raise TypeError(f"regression must be a bool, got {regression!r}")
        self.regression = bool(regression)
        npl = given["num_possible_labels"]
        if npl is not None:
            npl = _check_int("num_possible_labels", npl, -1)
            if npl == 0:
                raise ValueError("num_possible_labels must be >= 1 (or -1 / None for "
                                 "regression), got 0")
            if npl == -1:
                npl = None
        if not self.regression and npl is None:
            raise ValueError("num_possible_labels is required for classification (the number "
                             "of classes); pass regression=True for float targets")
        self.num_possible_labels: int | None = npl
        index = -1 if given["label_index"] is None else _check_int("label_index",
                                                                    given["label_index"], -1)
        self.label_index = index
        self.alignment_mode = _alignment(
            given["alignment_mode"],
            AlignmentMode.EQUAL_LENGTH if two else AlignmentMode.ALIGN_START)
        if two:
            n_f, n_l = (len(getattr(r, "paths", ())) for r in (reader, self.labels_reader))
            if isinstance(reader, CSVSequenceRecordReader) and \
                    isinstance(self.labels_reader, CSVSequenceRecordReader) and n_f != n_l:
                raise ValueError(f"features_reader has {n_f} files but labels_reader has "
                                 f"{n_l}: sequence i of the labels labels sequence i of the "
                                 f"features, so they need as many files")
        self._widths: dict[str, int] = {}
        self._columns: tuple[int, int] | None = None     # (features, labels) per step
        self._read = 0                       # sequences read this epoch (for messages)
        for r in self._readers():
            r.reset()

    def __repr__(self) -> str:
        labels = (f"labels_reader={self.labels_reader!r}" if self.labels_reader is not None
                  else f"label_index={self.label_index}")
        return (f"SequenceRecordReaderDataSetIterator({self.reader!r}, {labels}, "
                f"mini_batch_size={self.batch_size}, num_possible_labels="
                f"{self.num_possible_labels}, regression={self.regression}, alignment_mode="
                f"{self.alignment_mode.name})")

    def _readers(self) -> list[Any]:
        return [self.reader] if self.labels_reader is None else [self.reader,
                                                                 self.labels_reader]

    # -- columns ------------------------------------------------------------------------------
    def _split_columns(self, seq: _Sequence) -> tuple[list[int], list[int]]:
        # (feature columns, label columns) of the one-reader form for sequences of n fields
        n = seq.table.shape[1]
        index = n - 1 if self.label_index == -1 else self.label_index
        if index >= n:
            raise ValueError(f"{seq.where()}label_index {self.label_index} is out of range for "
                             f"sequences of {n} fields")
        if self.regression and self.num_possible_labels is not None \
                and self.num_possible_labels > 1:
            labels = list(range(index, n))
            if len(labels) != self.num_possible_labels:
                raise ValueError(f"{seq.where()}regression with num_possible_labels="
                                 f"{self.num_possible_labels}: columns {index}..{n - 1} (from "
                                 f"label_index to the last) are {len(labels)} targets, not "
                                 f"{self.num_possible_labels}")
            features = list(range(index))
        else:
            labels = [index]
            features = [c for c in range(n) if c != index]
        if not features:
            raise ValueError(f"{seq.where()}sequences of {n} fields leave no feature column "
                             f"beside the label column(s) {labels}")
        return features, labels

    def _check_width(self, seq: _Sequence, role: str) -> None:
        n = seq.table.shape[1]
        width = self._widths.setdefault(role, n)
        if n != width:
            raise ValueError(f"{seq.where()}the {role} have {n} fields per step, the first "
                             f"sequence had {width}")

    # -- reading ------------------------------------------------------------------------------
    def has_next(self) -> bool:
        more = bool(self.reader.has_next())
        if self.labels_reader is not None and bool(self.labels_reader.has_next()) != more:
            longer, shorter = (("features_reader", "labels_reader") if more
                               else ("labels_reader", "features_reader"))
            raise ValueError(f"{shorter} ran out of sequences after {self._read} while "
                             f"{longer} has more: the readers must give one sequence each per "
                             f"example")
        return more

    def _read_example(self) -> tuple[_Sequence, _Sequence | None]:
        f = _read_sequence(self.reader, "features_reader" if self.labels_reader is not None
                           else "reader")
        lab = None
        if self.labels_reader is not None:
            lab = _read_sequence(self.labels_reader, "labels_reader")
        self._read += 1
        for seq, role in ((f, "features"), (lab, "labels")):
            if seq is None:
                continue
            if seq.length == 0:
                what = "combined features and labels" if self.labels_reader is None else role
                raise ValueError(f"{seq.where()}zero-length sequence ({what}): the file has no "
                                 f"time step (DL4J's ZeroLengthSequenceException)")
            self._check_width(seq, role)
        if lab is not None and not self.regression and lab.table.shape[1] != 1:
            raise ValueError(f"{lab.where()}classification labels must be one column (the "
                             f"class index of each step), got {lab.table.shape[1]} columns; "
                             f"pass regression=True for float targets")
        return f, lab

    def _next(self) -> DataSet:
        examples = []
        while len(examples) < self._global_batch() and self.has_next():
            examples.append(self._read_example())
        if not examples:
            raise StopIteration
        return self._batch(examples, examples[self._part(len(examples))])

    def _tables(self, example: tuple[_Sequence, _Sequence | None]
                ) -> tuple[_Sequence, np.ndarray, _Sequence, np.ndarray]:
        # (features source, features table, labels source, labels table) of one example
        f, lab = example
        if lab is None:
            fc, lc = self._split_columns(f)
            return f, f.table[:, fc], f, f.table[:, lc]
        return f, f.table, lab, lab.table

    def _batch(self, everything: list, part: list) -> DataSet:
        mode = self.alignment_mode
        lengths = [(f.length, f.length if lab is None else lab.length) for f, lab in everything]
        if mode is AlignmentMode.EQUAL_LENGTH:
            self._check_equal_lengths(everything)
        self._check_float32(everything)
        self._check_classes(everything)
        t = max(max(pair) for pair in lengths)       # the global batch's longest sequence
        tables = [self._tables(e) for e in part]
        n = len(part)
        _, ft, _, lt = tables[0] if tables else self._tables(everything[0])
        n_f = ft.shape[1]
        n_l = lt.shape[1] if self.regression else self.num_possible_labels
        self._check_bytes(n, n_f, n_l, t)
        features = np.zeros((n, n_f, t), dtype=np.float32)
        try:
            labels = np.zeros((n, n_l, t), dtype=np.float32)
        except MemoryError:
            raise MemoryError(f"labels of shape ({n}, {n_l}, {t}) do not fit in memory"
                              + ("" if self.regression else
                                 f": check num_possible_labels={n_l}")) from None
        f_mask = np.zeros((n, t), dtype=np.float32)
        l_mask = np.zeros((n, t), dtype=np.float32)
        for i, (fs, ft, ls, lt) in enumerate(tables):
            tf, tl = ft.shape[0], lt.shape[0]
            end = max(tf, tl) if mode is AlignmentMode.ALIGN_END else None
            f0 = 0 if end is None else end - tf
            l0 = 0 if end is None else end - tl
            features[i, :, f0:f0 + tf] = ft.T
            f_mask[i, f0:f0 + tf] = 1
            l_mask[i, l0:l0 + tl] = 1
            if self.regression:
                labels[i, :, l0:l0 + tl] = lt.T
            else:
                labels[i, lt[:, 0].astype(np.intp), np.arange(l0, l0 + tl)] = 1
        # DL4J's rule: an array whose sequences all fill the batch's length has no mask
        full_f = all(tf == t for tf, _ in lengths)
        full_l = all(tl == t for _, tl in lengths)
        self._columns = (n_f, n_l)
        return DataSet(features, labels, None if full_f else f_mask, None if full_l else l_mask)

    def _check_equal_lengths(self, everything: list) -> None:
        # DL4J's EQUAL_LENGTH: every sequence of the batch, features and labels, one length
        first = everything[0][0]
        for f, lab in everything:
            if lab is not None and lab.length != f.length:
                raise ValueError(f"{lab.where()}EQUAL_LENGTH: this labels file has "
                                 f"{_steps(lab.length)} but its features file "
                                 f"{f.path or '(features)'} has {_steps(f.length)}. "
                                 f"{_EQUAL_LENGTH_MESSAGE}")
            if f.length != first.length:
                raise ValueError(f"{f.where()}EQUAL_LENGTH: this sequence has "
                                 f"{_steps(f.length)} but "
                                 f"{first.path or 'the first of the batch'} has "
                                 f"{_steps(first.length)}, in one batch. "
                                 f"{_EQUAL_LENGTH_MESSAGE}")

    def _check_float32(self, everything: list) -> None:
        # A finite value float32 cannot hold would be an infinity in the batch: refused with
        # its file, line and column, in every example of the global batch (every shard
        # refuses the batch). Class labels are not values: _classes checks them.
        for f, lab in everything:
            if lab is None:
                fc, lc = self._split_columns(f)
                checks = [(f, fc + lc if self.regression else fc)]
            else:
                checks = [(f, None)] + ([(lab, None)] if self.regression else [])
            for seq, columns in checks:
                table = seq.table if columns is None else seq.table[:, columns]
                at = _float32_overflow(table)
                if at is not None:
                    step, c = at
                    raise _float32_error(seq.where(step), "column index "
                                         f"{c if columns is None else columns[c]}", table[at])

    def _check_classes(self, everything: list) -> None:
        # Each step's class index: an integer in [0, num_possible_labels), in every example
        # of the global batch, as _check_float32 (a shard refusing alone would leave the
        # others waiting for it at their next collective).
        if self.regression:
            return
        npl = self.num_possible_labels
        for example in everything:
            _, _, source, lt = self._tables(example)
            values = lt[:, 0]
            bad = _no_class_index(values, npl)
            if bad.any():
                step = int(np.argmax(bad))
                column = "" if self.labels_reader is not None else \
                    f" in column index {self._split_columns(source)[1][0]}"
                raise ValueError(f"{source.where(step)}label {float(values[step])!r}{column} "
                                 f"is not a class index in [0, {npl})")

    def _check_bytes(self, n: int, n_f: int, n_l: int, t: int) -> None:
        for name, size in (("features", n_f), ("labels", n_l)):
            nbytes = n * size * t * 4
            if nbytes > MAX_BATCH_BYTES:
                cause = ("num_possible_labels=" + str(self.num_possible_labels)
                         if name == "labels" and not self.regression else "the data")
                raise ValueError(f"a batch of {n} sequences of {t} steps with {size} {name} "
                                 f"per step would be {nbytes} bytes (more than 2**48): check "
                                 f"{cause}")

    # -- protocol -----------------------------------------------------------------------------
    def _reset(self) -> None:
        for r in self._readers():
            r.reset()
        self._read = 0
        # The widths were learned from the files, so the next epoch learns them again: after
        # an error, a fixed file is read as a new iterator reads it. The settings stay
        # (num_possible_labels, label_index). Nothing needs the widths to hold across epochs:
        # DL4J's iterator checks none, an async prefetcher asks for input_columns() again
        # after a reset, and its ring is sized by the bytes of the batches, not their columns.
        self._widths = {}
        self._columns = None

    def _take_readers(self) -> None:
        self.reader = _reader_copy(self.reader)
        if self.labels_reader is not None:
            self.labels_reader = _reader_copy(self.labels_reader)
        self._widths = dict(self._widths)

    def batch(self) -> int:
        return self.batch_size

    def _widths_of(self) -> tuple[int, int]:
        # (features, labels) per step; DL4J preloads a batch for inputColumns/totalOutcomes,
        # here the first example is read and the readers reset, at the start of an epoch only
        if self._columns is None:
            if self._started or self._failure is not None:
                raise ValueError("the number of columns is not known yet and the readers are "
                                 "past their first sequence: call reset() first")
            try:
                if not self.has_next():
                    raise ValueError("the readers have no sequence: the number of columns is "
                                     "unknown")
                _, ft, _, lt = self._tables(self._read_example())
            finally:
                self._reset()
            self._columns = (ft.shape[1], self.num_possible_labels if not self.regression
                             else lt.shape[1])
        return self._columns

    def input_columns(self) -> int:
        """Features per step (DL4J's ``inputColumns``)."""
        return self._widths_of()[0]

    def total_outcomes(self) -> int:
        """Labels per step: the number of classes, or of regression targets."""
        return self._widths_of()[1]
