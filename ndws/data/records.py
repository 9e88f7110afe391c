"""CSV records and the iterators that turn them into DataSets (DataVec's CSVRecordReader,
DL4J's RecordReaderDataSetIterator and RecordReaderMultiDataSetIterator).

A record is one CSV row parsed to a list of floats. Errors in the data name the file and the
1-based line number, so a bad row in a large file can be found:

>>> import os, tempfile
>>> from ndws.data.records import CSVRecordReader, RecordReaderDataSetIterator
>>> d = tempfile.mkdtemp()
>>> path = os.path.join(d, "tiny.csv")
>>> with open(path, "w") as f:
...     _ = f.write("a,b,label\\n1,2,0\\n\\n3,4,1\\n5,6,2\\n")
>>> reader = CSVRecordReader(path, skip_num_lines=1)
>>> list(reader)
[[1.0, 2.0, 0.0], [3.0, 4.0, 1.0], [5.0, 6.0, 2.0]]
>>> it = RecordReaderDataSetIterator(reader, batch_size=2, label_index=2, num_classes=3)
>>> ds = it.next()
>>> ds.features.numpy().tolist(), ds.labels.numpy().tolist()
([[1.0, 2.0], [3.0, 4.0]], [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
"""
from __future__ import annotations

import codecs
import copy
import csv
import os
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from ndws.data.dataset import DataSet, MultiDataSet
from ndws.data.iterators import DataSetIterator, MultiDataSetIterator, shard_args, shard_part

__all__ = [
    "RecordReader",
    "CSVRecordReader",
    "RecordReaderDataSetIterator",
    "RecordReaderMultiDataSetIterator",
    "OneHot",
]


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)


def folder_arg(path: Any, where: str) -> str:
    """`path` (a str or os.PathLike) as the str of an existing folder; TypeError,
    FileNotFoundError or NotADirectoryError otherwise, each message starting with `where`."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{where}path must be a folder (str or os.PathLike), got "
                        f"{type(path).__name__} {path!r:.60}")
    folder = os.fspath(path)
    if not os.path.exists(folder):
        raise FileNotFoundError(f"{where}no such folder {folder!r}")
    if not os.path.isdir(folder):
        raise NotADirectoryError(f"{where}{folder!r} is a file, not a folder")
    return folder


class RecordReader:
    """Base of the record readers (DataVec's ``RecordReader``): the iteration protocol over the
    records a subclass's ``_records()`` generator yields as ``(record, file, line)`` (line None
    when a file is one record).

    A record is a list of fields, each a number or a NumPy array (DataVec's ``NDArrayWritable``:
    an image reader's ``[image, label]``). ``has_next()``, ``next()`` and ``reset()`` are
    DataVec's, and a reader is a Python iterable (each ``iter()`` starts from the beginning).
    After an error the reader does not skip to the next record: ``has_next()`` and ``next()``
    raise ``RuntimeError`` (from the original error) until ``reset()``.
    """

    #: (file, 1-based line or None) of the record last returned by next(), or None
    location: tuple[str, int | None] | None = None
    _gen: Iterator[tuple[list[Any], str, int | None]] | None = None
    _peeked: tuple[list[Any], str, int | None] | None = None
    _failure: BaseException | None = None

    def _records(self) -> Iterator[tuple[list[Any], str, int | None]]:
        raise NotImplementedError

    def _fill(self) -> bool:
        if self._failure is not None:
            raise RuntimeError(
                f"{type(self).__name__} stopped at an error ({type(self._failure).__name__}: "
                f"{self._failure}); it does not skip to the next record: call reset() to read "
                f"again from the start") from self._failure
        if self._peeked is None:
            if self._gen is None:
                self._gen = self._records()
            try:
                self._peeked = next(self._gen, None)
            except BaseException as exc:
                self._failure = exc
                raise
        return self._peeked is not None

    def has_next(self) -> bool:
        """True when another record can be read."""
        return self._fill()

    def next(self) -> list[Any]:
        """The next record (a list of fields); StopIteration when exhausted."""
        if not self._fill():
            raise StopIteration
        record, path, line = self._peeked  # type: ignore[misc]
        self._peeked = None
        self.location = (path, line)
        return record

    def reset(self) -> None:
        """Start again from the first record."""
        if self._gen is not None:
            self._gen.close()  # closes an open file now, not at garbage collection
        self._gen = None
        self._peeked = None
        self.location = None
        self._failure = None

    def reset_supported(self) -> bool:
        return True

    def close(self) -> None:
        """Close the open file, if any (the reader can still be reset and reused)."""
        self.reset()

    def __iter__(self) -> Iterator[list[Any]]:
        self.reset()
        while self.has_next():
            yield self.next()


def _field_error(message: str, column: int) -> ValueError:
    # a field that is not a number, a plain ValueError that also knows its column (so an
    # iterator can add what to do when it is the label column)
    error = ValueError(message)
    error.column = column  # type: ignore[attr-defined]
    return error


class CSVRecordReader(RecordReader):
    """Read numeric CSV records from one or more files (DataVec's ``CSVRecordReader``).

    Parameters
    ----------
    path_or_paths : str or os.PathLike, or a sequence of them
        The file(s), read in the order given.
    skip_num_lines : int
        Lines skipped at the start of *each* file (headers).
    delimiter : str
        One-character field separator.
    quote : str
        One-character quote character; quoted fields may contain the delimiter (Python's
        ``csv`` module rules, ``""`` is an escaped quote).
    encoding : str
        The files' text encoding (any Python codec); UTF-8 by default, with a leading
        byte-order mark dropped. Bytes the encoding can't decode raise
        ``ValueError("<file>:<line>: can't decode byte ... as <encoding> ...")``.
    text_columns : iterable of int, optional
        Columns (0-based) returned as text (the field with its blanks stripped) instead of
        parsed: class names, for instance. `RecordReaderDataSetIterator` with a
        ``label_mapping`` adds its label column here itself.

    Notes
    -----
    Empty (or whitespace-only) lines are skipped. Every record must have as many fields as
    `num_fields`: the number assigned to it, else the first record's read since the last
    ``reset()`` (a reset forgets it, so a fixed file reads as in a new reader); otherwise
    ``ValueError("<file>:<line>: expected N fields, got M")``. A field that is not a number
    raises ``ValueError("<file>:<line>: column index <c>: cannot parse <value> as a
    number")``; the column index is 0-based, as ``label_index`` is. A number is what
    ``float()`` reads (blanks stripped; ``nan``, ``inf`` and ``infinity`` in any case are
    numbers) except digit separators, ``1_000``, and digits outside ASCII, ``١٢``, which
    DL4J's ``Double.parseDouble`` refuses; a finite number past float64's range (``1e400``),
    which would become an infinity, is refused too, naming the file, line and column. When a
    file's first record has no number at all (a header), the message adds ``if line <n> is a
    header, pass skip_num_lines=<n>``. Line numbers are 1-based physical lines of the file (a
    record spanning lines is reported at its first line).

    The reader is its own iterator protocol in DataVec's style (``has_next()``, ``next()``,
    ``reset()``) and a Python iterable (each ``iter()`` starts from the beginning). After an
    error it does not skip to the next record: ``has_next()`` and ``next()`` raise
    ``RuntimeError`` (from the original error) until ``reset()``.
    """

    def __init__(self, path_or_paths: Any, skip_num_lines: int = 0, delimiter: str = ",",
                 quote: str = '"', encoding: str = "utf-8",
                 text_columns: Iterable[int] | None = None) -> None:
        if isinstance(path_or_paths, (str, os.PathLike)):
            paths = [path_or_paths]
        elif isinstance(path_or_paths, Sequence) and not isinstance(path_or_paths, bytes):
            paths = list(path_or_paths)
            if not paths:
                raise ValueError("path_or_paths must name at least one file, got an empty "
                                 "sequence")
        else:
            raise TypeError("path_or_paths must be a path or a sequence of paths, got "
                            f"{type(path_or_paths).__name__} {path_or_paths!r}")
        for p in paths:
            if not isinstance(p, (str, os.PathLike)):
                raise TypeError("path_or_paths must contain only paths (str or os.PathLike), "
                                f"got {type(p).__name__} {p!r}")
        self.paths: list[str] = [os.fspath(p) for p in paths]
        for p in self.paths:
            if os.path.isdir(p):
                raise IsADirectoryError(f"path_or_paths: {p!r} is a directory, not a CSV file")
            if os.path.exists(p) and not os.path.isfile(p):
                # a FIFO would block the first read, a device would never end
                raise ValueError(f"path_or_paths: {p!r} is not a regular file")
            if not os.path.isfile(p):
                raise FileNotFoundError(f"path_or_paths: no such file {p!r}")
        if not isinstance(encoding, str):
            raise TypeError(f"encoding must be a str, got {type(encoding).__name__} "
                            f"{encoding!r}")
        try:
            codec = codecs.lookup(encoding).name
        except LookupError:
            raise ValueError(f"encoding: unknown encoding {encoding!r}") from None
        self.encoding = encoding
        # utf-8-sig drops the byte-order mark some spreadsheet exports put first
        self._codec = "utf-8-sig" if codec == "utf-8" else codec
        self.skip_num_lines = _check_int("skip_num_lines", skip_num_lines, 0)
        for name, value in (("delimiter", delimiter), ("quote", quote)):
            if not isinstance(value, str) or len(value) != 1:
                raise ValueError(f"{name} must be a one-character string, got {value!r}")
        if delimiter == quote:
            raise ValueError(f"delimiter and quote must differ, both are {delimiter!r}")
        self.delimiter = delimiter
        self.quote = quote
        if text_columns is None:
            text_columns = ()
        elif isinstance(text_columns, (str, bytes)) or not hasattr(text_columns, "__iter__"):
            raise TypeError(f"text_columns must be an iterable of column indices, got "
                            f"{type(text_columns).__name__} {text_columns!r:.40}")
        #: the columns returned as text (str), not parsed as numbers
        self.text_columns: frozenset[int] = frozenset(
            _check_int("text_columns: a column index", c, 0) for c in text_columns)
        # fields per record: assigned to num_fields (kept), or learned from the first record
        # read since the last reset (forgotten by reset(): see there)
        self._given_fields: int | None = None
        self._learned_fields: int | None = None
        #: (file, 1-based line) of the record last returned by next(), or None
        self.location: tuple[str, int] | None = None
        self._gen: Iterator[tuple[list[float], str, int]] | None = None
        self._peeked: tuple[list[float], str, int] | None = None
        self._failure: BaseException | None = None

    def __repr__(self) -> str:
        text = (f", text_columns={sorted(self.text_columns)}" if self.text_columns else "")
        return (f"CSVRecordReader({self.paths!r}, skip_num_lines={self.skip_num_lines}, "
                f"delimiter={self.delimiter!r}, quote={self.quote!r}, "
                f"encoding={self.encoding!r}{text})")

    @property
    def num_fields(self) -> int | None:
        """The number of fields every record must have: the number assigned to it, kept
        across ``reset()``, else the first record's read since the last ``reset()`` (None
        before)."""
        return self._given_fields if self._given_fields is not None else self._learned_fields

    @num_fields.setter
    def num_fields(self, value: int | None) -> None:
        self._given_fields = None if value is None else _check_int("num_fields", value, 1)

    def reset(self) -> None:
        """Start again from the first record, as a new reader would: a number of fields
        learned from the records is forgotten (one assigned to `num_fields` is kept)."""
        super().reset()
        # A learned width is what the files said, not a setting: after an error, fixing the
        # file and resetting must read it as a fresh reader does. Nothing relies on a width
        # holding across epochs (an async prefetcher's ring is sized by the bytes of the
        # batches it has seen, not their columns), and DL4J's reader checks none.
        self._learned_fields = None

    def _records(self) -> Iterator[tuple[list[float], str, int]]:
        for path in self.paths:
            yield from self._decoded_records(path)

    def _decoded_records(self, path: str) -> Iterator[tuple[list[float], str, int]]:
        # one file's records; bytes the encoding can't decode are reported with their line
        try:
            yield from self._file_records(path)
        except UnicodeDecodeError as exc:
            raise self._decode_error(path, exc) from None

    def _file_records(self, path: str) -> Iterator[tuple[list[float], str, int]]:
        # newline="" is what the csv module needs for quoted fields with line breaks
        with open(path, newline="", encoding=self._codec) as f:
            for _ in range(self.skip_num_lines):
                if not f.readline():
                    break
            reader = csv.reader(f, delimiter=self.delimiter, quotechar=self.quote,
                                strict=True)
            line_end = self.skip_num_lines
            first = True
            while True:
                start = line_end + 1
                try:
                    row = next(reader)
                except StopIteration:
                    break
                except csv.Error as exc:
                    raise ValueError(f"{path}:{reader.line_num + self.skip_num_lines}: "
                                     f"malformed CSV: {exc}") from None
                line_end = reader.line_num + self.skip_num_lines
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue
                yield self._parse(row, path, start, first), path, start
                first = False

    def _parse(self, row: list[str], path: str, line: int, first: bool = False) -> list:
        width = self.num_fields
        if width is None:
            self._learned_fields = len(row)
        elif len(row) != width:
            raise ValueError(f"{path}:{line}: expected {width} fields, got {len(row)}")
        # The common record, numbers only, is parsed in one pass: float() strips no blank
        # that str.strip() keeps, so what it reads the field-by-field pass reads alike.
        # Whatever else (a text column, a '_' or a character outside ASCII, a field float()
        # refuses, an infinity or a NaN) goes field by field, which settles it and names the
        # column. The sum is one loop in C, finite when no value is infinite or NaN (finite
        # values adding up past float64's range send the record to the second pass, which
        # then finds nothing).
        joined = "".join(row)
        if not self.text_columns and "_" not in joined and joined.isascii():
            try:
                values = list(map(float, row))
            except ValueError:
                pass
            else:
                total = sum(values)
                if total - total == 0:
                    return values
        return self._parse_fields(row, path, line, first)

    def _parse_fields(self, row: list[str], path: str, line: int, first: bool) -> list:
        values: list = []
        text = self.text_columns
        for column, field in enumerate(row):
            if column in text:
                values.append(field.strip())
                continue
            try:
                values.append(_parse_number(field))
            except ValueError as exc:
                # a file's first record with no number at all is most often its header
                hint = (f"; if line {line} is a header, pass skip_num_lines={line}"
                        if first and not any(map(_is_number, row)) else "")
                raise _number_error(exc, f"{path}:{line}: ", field, column, hint) from None
        return values

    def _decode_error(self, path: str, exc: UnicodeDecodeError) -> ValueError:
        # The text layer decodes ahead in chunks, so find the line of the first bad byte by
        # decoding the raw lines again (only on this error path).
        line, where = 0, ""
        decoder = codecs.getincrementaldecoder(self._codec)()
        with open(path, "rb") as raw:
            for line, data in enumerate(raw, 1):
                try:
                    decoder.decode(data)
                except UnicodeDecodeError as bad:
                    byte = data[bad.start:bad.start + 1]
                    where = f"byte 0x{byte.hex()} (byte {bad.start + 1} of the line)" if byte else \
                        "a truncated character"
                    break
        return ValueError(f"{path}:{line}: can't decode {where or 'the text'} as "
                          f"{self.encoding!r} ({exc.reason}); pass the file's encoding, e.g. "
                          f"CSVRecordReader(..., encoding='latin-1')")


def _no_class_index(values: np.ndarray, num_classes: int) -> np.ndarray:
    # True where a value (a float array) is no class index: not a whole number in
    # [0, num_classes), NaN included
    return ~((values == np.floor(values)) & (values >= 0) & (values < num_classes))


def _is_class_index(value: Any, num_classes: int) -> bool:
    # whether a label field holds a class index: a whole number in [0, num_classes), of any
    # numeric type (a custom reader's None or object is no index, not a TypeError)
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return False
    return number.is_integer() and 0 <= number < num_classes


class _OutOfRange(ValueError):
    """A finite number past float64's range: its message says what it would become."""


def _parse_number(field: str) -> float:
    """`field` (blanks stripped) as DL4J's ``Double.parseDouble`` reads a number: float()'s
    syntax (``nan``, ``inf`` and ``infinity`` in any case included) except digit separators
    (``1_000``) and digits outside ASCII (``١٢``, ``１２``), which float() reads and Java
    refuses. Raises ValueError: without arguments when `field` is no number at all, with the
    reason when float() alone would have read it, and `_OutOfRange` for a finite number past
    float64's range (``1e400``, which float() makes an infinity)."""
    number = field.strip()
    try:
        value = float(number)
    except ValueError:
        raise ValueError() from None
    if "_" in number:
        raise ValueError("'_' is not a digit separator here, as in DL4J's Double.parseDouble")
    if not number.isascii():
        raise ValueError("only ASCII digits are digits here, as in DL4J's Double.parseDouble")
    if value in _INFINITIES and number.lstrip("+-").lower() not in _INFINITY_NAMES:
        raise _OutOfRange(f"out of range: past float64's largest finite value "
                          f"({_FLOAT64_MAX!r}) it would become {value!r}")
    return value


def _number_error(exc: ValueError, where: str, field: str, column: int,
                  hint: str = "") -> ValueError:
    # the error for a field _parse_number refused, `where` naming its file and line
    place = f"{where}column index {column}: "
    if isinstance(exc, _OutOfRange):
        return ValueError(f"{place}{field!r} is {exc}")
    message = f"{place}cannot parse {field!r} as a number"
    if exc.args:
        # a number but for its separators or digits: not a class name, so a plain error (an
        # iterator adds the hint for class names to a _field_error)
        return ValueError(f"{message} ({exc}){hint}")
    return _field_error(message + hint, column)


def _is_number(field: str) -> bool:
    # whether the reader reads `field` as a number (out of range is still a number)
    try:
        _parse_number(field)
    except _OutOfRange:
        return True
    except ValueError:
        return False
    return True


def _has_text(fields: Sequence) -> bool:
    """Whether a custom reader's record needs `_text_fields_as_numbers`."""
    return any(v is None or isinstance(v, (str, bytes)) for v in fields)


def _text_fields_as_numbers(fields: Sequence, where: str) -> list:
    """A custom reader's record (a list of fields) with each str field read as
    `CSVRecordReader` reads one (`_parse_number`: DataVec's Text writable is read with
    ``Double.parseDouble``), None and bytes refused; other fields are left to NumPy's float
    conversion. A field that is not a number raises the CSV reader's error
    (``"<where>column index <c>: cannot parse ..."``, a `_field_error` that knows its
    column)."""
    out = list(fields)
    for column, value in enumerate(out):
        if value is None:
            # NumPy would make it a NaN, a value the reader never gave
            raise ValueError(f"{where}column index {column}: the reader gave None, not a "
                             f"number")
        if isinstance(value, bytes):
            raise ValueError(f"{where}column index {column}: the reader gave bytes "
                             f"{value!r:.40}, not a number (decode text to str)")
        if not isinstance(value, str):
            continue
        try:
            out[column] = _parse_number(value)
        except ValueError as exc:
            raise _number_error(exc, where, value, column) from None
    return out


#: how float() spells the infinities a field may hold on purpose ('inf', '-Infinity', ...)
_INFINITY_NAMES = ("inf", "infinity")
_INFINITIES = (float("inf"), float("-inf"))
_FLOAT64_MAX = float(np.finfo(np.float64).max)
_FLOAT32_MAX = str(np.finfo(np.float32).max)            # '3.4028235e+38'
#: the smallest magnitude float32 rounds to infinity: halfway between its largest finite
#: value, 2**128 - 2**104, and 2**128 (round half to even goes up, the odd side being the
#: largest finite value)
_FLOAT32_OVERFLOW = 2.0**128 - 2.0**103


def _float32_overflow(array: np.ndarray) -> tuple[int, ...] | None:
    """The index of the first finite value of `array` (C order) that float32 cannot hold (it
    would become an infinity there), or None. Vectorised: one pass over the array when no
    value is that large; NaN and the infinities are not flagged (a field may hold them)."""
    if array.dtype.kind != "f" or array.dtype.itemsize <= 4:
        return None                    # float32 or narrower, integers, bools: nothing to lose
    big = np.abs(array) >= _FLOAT32_OVERFLOW           # False for NaN
    if not big.any():
        return None
    big &= np.isfinite(array)
    if not big.any():
        return None
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(big)), big.shape))


def _float32_error(where: str, what: str, value: float) -> ValueError:
    # a finite value refused: the float32 batch would hold an infinity instead
    return ValueError(f"{where}{what}: {float(value)!r} is out of range for float32, the "
                      f"batches' dtype: past its largest finite value ({_FLOAT32_MAX}) it "
                      f"would become {'-' if value < 0 else ''}inf")


def _where(reader: Any) -> str:
    return _at(getattr(reader, "location", None))


def _at(loc: Any) -> str:
    # "<file>:<line>: " (or "<file>: ") of a reader's location, "" when it has none
    if not loc:
        return ""
    return f"{loc[0]}:{loc[1]}: " if loc[1] is not None else f"{loc[0]}: "


def _reader_copy(reader: Any) -> Any:
    # a shard reads its own copy of a RecordReader (CSV, images: same files and options, at
    # the first record), so the iterator it came from stays usable; any other reader is shared
    if isinstance(reader, RecordReader):
        other = copy.copy(reader)
        other._gen = other._peeked = other._failure = other.location = None
        return other
    return reader


class _RecordShard:
    """``shard(rank, size)`` of the record-reader iterators: each batch reads the next global
    batch of ``batch_size * size`` records and keeps this rank's part of it
    (docs/distributed.md, "Sharding the data")."""

    batch_size: int
    _shard = (0, 1)

    def _global_batch(self) -> int:
        return self.batch_size * self._shard[1]

    def _part(self, m: int) -> slice:
        lo, hi = shard_part(m, *self._shard)
        return slice(lo, hi)

    def shard(self, rank: int, size: int) -> Any:
        """This iterator's shard `rank` of `size`: a new iterator of the same kind whose batch
        k is rank `rank`'s part of the global batch k of ``batch_size * size`` records (the
        records this iterator would give with ``batch_size * size``).

        The shards are disjoint and together cover every record once per epoch, and they all
        have the same number of batches. A short last global batch of m records is split as
        evenly as can be, the first ``m % size`` ranks getting one record more; when
        ``m < size``, ranks m and up get a batch of 0 rows. Every shard reads (and checks)
        every record and keeps its own: the reading is not divided, the training is. A
        RecordReader (CSV, images) is copied (same files and options), so this iterator stays
        usable; any other reader is shared with the shard, which then owns it (it resets it).
        """
        rank, size = shard_args(rank, size)
        if self._shard[1] != 1:
            raise ValueError(f"shard: this iterator is already shard {self._shard[0]} of "
                             f"{self._shard[1]}; shard the original iterator")
        other = copy.copy(self)
        other._shard = (rank, size)
        other._started = False
        other._failure = None
        other._take_readers()
        other.reset()
        return other

    def _take_readers(self) -> None:
        raise NotImplementedError


class RecordReaderDataSetIterator(_RecordShard, DataSetIterator):
    """Batches of records as DataSets (DL4J's ``RecordReaderDataSetIterator``).

    Parameters
    ----------
    reader : CSVRecordReader
        Any object with ``has_next()``, ``next()`` (a list of numbers) and ``reset()``. The
        iterator owns it: it is reset at construction and by ``reset()``.
    batch_size : int
        Records per DataSet (the last one may be smaller).
    label_index : int
        Column of the label (0-based). ``-1`` (default, DL4J's value) means no labels: every
        column is a feature and ``labels`` is None.
    num_classes : int, optional
        Classification: the label column holds a class index in ``[0, num_classes)``, turned
        into a one-hot row ``(batch, num_classes)``. Required for classification, unless
        `label_mapping` gives the classes.
    label_mapping : "auto", sequence of str, or mapping of str to int, optional
        Classification with class *names* in the label column (DL4J reads them through a
        DataVec transform; here the iterator does it): the column is read as text (a
        `CSVRecordReader` adds it to its ``text_columns``) and each name is looked up. A
        sequence lists the names in class order (``["setosa", "versicolor", ...]``: index 0,
        1, ...); a mapping gives each name's index; ``"auto"`` reads every record once, before
        the first batch, and takes the distinct names in sorted order. `labels` is the list
        of names by index (DL4J's ``getLabels()``): pass it as the `label_mapping` of the
        test data's iterator, so both number the classes alike (``"auto"`` on a file that
        lacks a class would number them differently). A name not in the mapping is an error
        naming the file and line.
    regression : bool
        Regression: columns ``label_index..label_index_to`` (inclusive, as DL4J's) are float
        targets ``(batch, n_targets)``; ``num_classes`` must be None.
    label_index_to : int, optional
        Last label column for regression (default ``label_index``: one target).

    Features are the remaining columns in file order, ``(batch, n_features) NDArray of
    float32``, placed in the current workspace if one is open (as ``DataSet`` does). A finite
    value float32 cannot hold (``1e39``: it would become an infinity) is a ``ValueError``
    naming its file, line and column, before the batch is made; NaN and the infinities pass.
    The number of fields is learned from the records again after ``reset()``; the classes
    of ``label_mapping="auto"`` are kept, so they keep their numbers.
    """

    def __init__(self, reader: Any, batch_size: int, label_index: int = -1,
                 num_classes: int | None = None, regression: bool = False,
                 label_index_to: int | None = None, label_mapping: Any = None) -> None:
        for method in ("has_next", "next", "reset"):
            if not callable(getattr(reader, method, None)):
                raise TypeError(f"reader must be a record reader with has_next(), next() and "
                                f"reset(), got {type(reader).__name__}")
        self.reader = reader
        self.batch_size = _check_int("batch_size", batch_size, 1)
        label_index = _check_int("label_index", label_index, -1)
        if not isinstance(regression, bool):
            raise TypeError(f"regression must be a bool, got {regression!r}")
        if num_classes is not None:
            num_classes = _check_int("num_classes", num_classes, 1)
        if label_index_to is not None:
            label_index_to = _check_int("label_index_to", label_index_to, 0)
        if label_index == -1:
            if num_classes is not None or regression or label_index_to is not None:
                raise ValueError("label_index must be >= 0 when num_classes, regression or "
                                 "label_index_to is given, got -1 (no labels)")
        elif regression:
            if num_classes is not None:
                raise ValueError(f"num_classes must be None for regression, got {num_classes}")
            if label_index_to is None:
                label_index_to = label_index
            if label_index_to < label_index:
                raise ValueError(f"label_index_to must be >= label_index ({label_index}), got "
                                 f"{label_index_to}")
        else:
            if num_classes is None and label_mapping is None:
                raise ValueError(f"num_classes is required for classification (label_index="
                                 f"{label_index}); pass regression=True for float targets, or "
                                 f"label_mapping for class names")
            if label_index_to is not None:
                raise ValueError("label_index_to applies to regression only, got "
                                 f"{label_index_to} with regression=False")
        self.label_index = label_index
        self.label_index_to = label_index_to
        self.regression = regression
        self._mapping: dict[str, int] | None = None
        self._names: list[str] | None = None
        self._auto = False
        if label_mapping is not None:
            if label_index == -1 or regression:
                raise ValueError("label_mapping applies to classification only (label_index >= "
                                 "0, regression=False)")
            num_classes = self._set_mapping(label_mapping, num_classes)
        text = getattr(reader, "text_columns", None)
        if isinstance(text, frozenset):
            features = text - ({label_index} if label_mapping is not None else set())
            if features:
                raise ValueError(f"reader.text_columns {sorted(features)}: only the label column "
                                 f"may be text (with label_mapping); a feature must be a number")
            if label_mapping is not None:
                # a CSVRecordReader: its label column is read as text from now on
                reader.text_columns = text | {label_index}
        self.num_classes = num_classes
        self._num_fields: int | None = None
        # the iterator owns the reader from now on: start it at its first record
        reader.reset()
        self._consumed = False

    def _set_mapping(self, mapping: Any, num_classes: int | None) -> int | None:
        # label_mapping as {name: index} and the names by index; "auto" waits for the records
        if isinstance(mapping, str):
            if mapping != "auto":
                raise ValueError(f"label_mapping: expected 'auto', a sequence of class names or "
                                 f"a mapping of name to index, got the str {mapping!r:.40}")
            self._auto = True
            return num_classes
        if isinstance(mapping, Mapping):
            pairs = list(mapping.items())
        elif isinstance(mapping, Sequence) and not isinstance(mapping, bytes):
            pairs = [(name, i) for i, name in enumerate(mapping)]
        else:
            raise TypeError(f"label_mapping: expected 'auto', a sequence of class names or a "
                            f"mapping of name to index, got {type(mapping).__name__}")
        if not pairs:
            raise ValueError("label_mapping: no classes given")
        table: dict[str, int] = {}
        for name, index in pairs:
            if not isinstance(name, str):
                raise TypeError(f"label_mapping: class names must be str, got "
                                f"{type(name).__name__} {name!r:.40}")
            index = _check_int(f"label_mapping[{name!r}]", index, 0)
            if name.strip() != name:
                raise ValueError(f"label_mapping: class name {name!r} has surrounding blanks "
                                 f"(the reader strips them from the field)")
            if name in table:
                raise ValueError(f"label_mapping: class name {name!r} is given twice")
            table[name] = index
        width = max(table.values()) + 1
        if num_classes is None:
            num_classes = width
        elif width > num_classes:
            raise ValueError(f"label_mapping: index {width - 1} is out of range for "
                             f"num_classes={num_classes}")
        names = [""] * num_classes
        for name, index in table.items():
            names[index] = names[index] or name
        self._mapping, self._names = table, names
        return num_classes

    def _discover(self) -> None:
        # label_mapping="auto": every record's label once, the distinct names sorted (the same
        # numbering in every process and shard, whatever the order of the rows)
        reader, column = self.reader, self.label_index
        found: set = set()
        reader.reset()
        try:
            while reader.has_next():
                record = reader.next()
                if column >= len(record):
                    raise ValueError(f"{_where(reader)}label_index {column} is out of range for "
                                     f"records of {len(record)} fields")
                found.add(self._label_text(record[column]))
        finally:
            reader.reset()
        if not found:
            raise ValueError("label_mapping='auto': the reader has no records")
        names = sorted(found)
        if self.num_classes is not None and self.num_classes != len(names):
            raise ValueError(f"label_mapping='auto' found {len(names)} classes {names[:10]} but "
                             f"num_classes={self.num_classes}; pass the class names as "
                             f"label_mapping to fix their number and order")
        self._auto = False
        self._mapping = {name: i for i, name in enumerate(names)}
        self._names = names
        self.num_classes = len(names)

    def _label_text(self, value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError(f"{_where(self.reader)}label_mapping: the reader gave "
                             f"{value!r:.40} in column index {self.label_index}, not text (a "
                             f"custom reader must return the class name as a str)")
        return value

    @property
    def labels(self) -> list[str] | None:
        """The class names by index when a `label_mapping` gives them (DL4J's
        ``getLabels()``), else None."""
        if self._auto:
            self._discover()
        return None if self._names is None else list(self._names)

    # -- layout ---------------------------------------------------------------------------
    def _label_columns(self) -> list[int]:
        if self.label_index == -1:
            return []
        if self.regression:
            return list(range(self.label_index, self.label_index_to + 1))  # type: ignore
        return [self.label_index]

    def _set_num_fields(self, n: int) -> None:
        if self._num_fields is None:
            cols = self._label_columns()
            if cols and cols[-1] >= n:
                name = "label_index_to" if self.regression else "label_index"
                raise ValueError(f"{_where(self.reader)}{name} {cols[-1]} is out of range for "
                                 f"records of {n} fields")
            if len(cols) >= n:
                raise ValueError(f"{_where(self.reader)}records of {n} fields leave no "
                                 f"feature column")
            self._num_fields = n

    def _peek_num_fields(self) -> int:
        if self._num_fields is None:
            # DL4J peeks at the first record too; the reader must be fresh for this
            if not self.reader.has_next():
                raise ValueError("reader has no records: the number of columns is unknown")
            n = getattr(self.reader, "num_fields", None)
            if n is None:
                if self._consumed:
                    raise ValueError("the number of columns is unknown: the reader does not "
                                     "report num_fields")
                n = len(self.reader.next())
                self.reader.reset()
            self._set_num_fields(n)
        return self._num_fields  # type: ignore[return-value]

    # -- DataSetIterator ------------------------------------------------------------------
    def has_next(self) -> bool:
        return bool(self._read("has_next"))

    def _take_readers(self) -> None:
        self.reader = _reader_copy(self.reader)

    def _read(self, method: str) -> Any:
        # the reader's has_next() or next() (a record is parsed when peeked at)
        return self._hinted(getattr(self.reader, method))

    def _hinted(self, fn: Any, *args: Any) -> Any:
        # fn(*args), where a label that is not a number (a _field_error of the label column)
        # gets the hint for class names
        try:
            return fn(*args)
        except ValueError as exc:
            if getattr(exc, "column", None) == self.label_index and not self.regression \
                    and self._mapping is None and not self._auto:
                raise ValueError(f"{exc}; for class names in the label column pass "
                                 f"label_mapping (the names in class order, or 'auto')") from None
            raise

    def _next(self) -> DataSet:
        if self._auto:
            self._discover()          # before the first record: the reader is at its start
        rows: list[list[float]] = []
        locations: list = []          # each record's (file, line), to name a value's place
        while len(rows) < self._global_batch() and self._read("has_next"):
            record = self._read("next")
            locations.append(getattr(self.reader, "location", None))
            self._consumed = True
            if self._num_fields is None:
                self._set_num_fields(len(record))
            elif len(record) != self._num_fields:
                raise ValueError(f"{_where(self.reader)}expected {self._num_fields} fields, "
                                 f"got {len(record)}")
            if self._mapping is not None:
                name = self._label_text(record[self.label_index])
                index = self._mapping.get(name)
                if index is None:
                    known = sorted(self._mapping)
                    raise ValueError(f"{_where(self.reader)}label {name!r} in column index "
                                     f"{self.label_index} is not in label_mapping (classes: "
                                     f"{known[:10]}{' ...' if len(known) > 10 else ''})")
                record = list(record)
                record[self.label_index] = float(index)
            if _has_text(record):
                record = self._hinted(_text_fields_as_numbers, record, _where(self.reader))
            if self._mapping is None and self.num_classes is not None:
                value = record[self.label_index]
                if not _is_class_index(value, self.num_classes):
                    raise ValueError(f"{_where(self.reader)}label {value!r} in column index "
                                     f"{self.label_index} is not a class index in "
                                     f"[0, {self.num_classes})")
            rows.append(record)
        if not rows:
            raise StopIteration
        first = rows[0]
        part = self._part(len(rows))                    # a shard's part (all when unsharded)
        if any(isinstance(v, np.ndarray) for v in first):
            return self._array_batch(rows, first, locations, part)
        try:
            table = np.asarray(rows, dtype=np.float64).reshape(len(rows), self._num_fields)
        except OverflowError:
            raise ValueError(f"{_where(self.reader)}the reader gave an integer beyond the range "
                             f"of float64: every feature must fit a float") from None
        except (TypeError, ValueError):
            raise ValueError(f"{_where(self.reader)}the reader gave a field that is not a "
                             f"number outside the label column: every feature must be a "
                             f"number") from None
        # every record of the global batch, as the checks above: every shard refuses the batch
        at = _float32_overflow(table)
        if at is not None:
            raise _float32_error(_at(locations[at[0]]), f"column index {at[1]}", table[at])
        table = table[part]
        label_cols = self._label_columns()
        if not label_cols:
            return DataSet(table.astype(np.float32), None)
        feature_mask = np.ones(table.shape[1], dtype=bool)
        feature_mask[label_cols] = False
        features = table[:, feature_mask].astype(np.float32)
        return DataSet(features, self._labels(table[:, label_cols]))

    def _labels(self, values: np.ndarray) -> np.ndarray:
        # the label columns' values (n, n_label_columns) as regression targets or one-hot rows
        if self.regression:
            return values.astype(np.float32)
        labels = np.zeros((values.shape[0], self.num_classes), dtype=np.float32)
        labels[np.arange(values.shape[0]), values[:, 0].astype(np.intp)] = 1
        return labels

    def _array_batch(self, rows: list, first: list, locations: list, part: slice) -> DataSet:
        # records holding an array (an image reader's [image, label]: DataVec's NDArrayWritable):
        # that array is the example's features, stacked to (batch, *its shape) as DL4J stacks
        # them (an image reader's NCHW batches); `part` of them, each record of the global
        # batch checked (every shard refuses a batch, as _next's checks)
        label_cols = self._label_columns()
        feature_cols = [c for c in range(len(first)) if c not in label_cols]
        if len(feature_cols) != 1 or not isinstance(first[feature_cols[0]], np.ndarray):
            raise ValueError(f"{_where(self.reader)}a record holding an array must hold that "
                             f"array and the label column(s) only, got fields of types "
                             f"{[type(v).__name__ for v in first]} with label_index="
                             f"{self.label_index}")
        col = feature_cols[0]
        shape = first[col].shape
        for i, record in enumerate(rows):
            array = record[col]
            if not isinstance(array, np.ndarray) or array.shape != shape:
                got = array.shape if isinstance(array, np.ndarray) else type(array).__name__
                raise ValueError(f"{_at(locations[i])}records' arrays must all have one "
                                 f"shape: {shape} first, then {got}")
            at = _float32_overflow(array)
            if at is not None:
                raise _float32_error(_at(locations[i]), f"column index {col}, array index "
                                     f"{at}", array[at])
        values = None
        if label_cols:
            values = np.array([[record[c] for c in label_cols] for record in rows],
                              dtype=np.float64).reshape(len(rows), len(label_cols))
            at = _float32_overflow(values)
            if at is not None:
                raise _float32_error(_at(locations[at[0]]),
                                     f"column index {label_cols[at[1]]}", values[at])
        mine = rows[part]
        features = np.empty((len(mine),) + shape, dtype=np.float32)
        for i, record in enumerate(mine):
            features[i] = record[col]
        return DataSet(features, None if values is None else self._labels(values[part]))

    def _reset(self) -> None:
        self.reader.reset()
        self._consumed = False
        # the number of fields was learned from the records: the next epoch learns it again
        # (fixed files are read as a new iterator reads them); the label columns and classes
        # are settings, and an 'auto' mapping stays, so classes keep their numbers
        self._num_fields = None

    def batch(self) -> int:
        return self.batch_size

    def input_columns(self) -> int:
        return self._peek_num_fields() - len(self._label_columns())

    def total_outcomes(self) -> int:
        if self.label_index == -1:
            return 0
        if self.regression:
            return len(self._label_columns())
        if self._auto:
            self._discover()
        return self.num_classes  # type: ignore[return-value]


class OneHot:
    """An output spec of :class:`RecordReaderMultiDataSetIterator`: column ``column`` of
    reader ``reader`` holds a class index, turned into a one-hot ``(batch, num_classes)``
    array (DL4J's ``addOutputOneHot``)."""

    def __init__(self, reader: str, column: int, num_classes: int) -> None:
        if not isinstance(reader, str):
            raise TypeError(f"reader must be a reader name (str), got {reader!r}")
        self.reader = reader
        self.column = _check_int("column", column, 0)
        self.num_classes = _check_int("num_classes", num_classes, 1)

    def __repr__(self) -> str:
        return f"OneHot({self.reader!r}, {self.column}, {self.num_classes})"


class RecordReaderMultiDataSetIterator(_RecordShard, MultiDataSetIterator):
    """Several readers, or column ranges of them, as MultiDataSet inputs and outputs (DL4J's
    ``RecordReaderMultiDataSetIterator`` without its builder).

    Parameters
    ----------
    readers : dict of str to CSVRecordReader
        Named readers, advanced in lockstep (record i of each reader belongs to example i).
    batch_size : int
        Examples per MultiDataSet.
    inputs, outputs : list of specs
        Each spec is a reader name (all its columns), a tuple ``(name, col_from, col_to)``
        (columns ``col_from..col_to`` inclusive, as DL4J's ``addInput``), or, for outputs,
        :class:`OneHot` ``(name, column, num_classes)``. Arrays are ``(batch, n) NDArray of
        float32`` in the order given.

    Examples
    --------
    ``RecordReaderMultiDataSetIterator({"csv": reader}, 32, inputs=[("csv", 0, 3)],
    outputs=[OneHot("csv", 4, 3)])`` is the MultiDataSet form of a classification
    ``RecordReaderDataSetIterator(reader, 32, label_index=4, num_classes=3)``.
    """

    def __init__(self, readers: dict[str, Any], batch_size: int, inputs: Sequence[Any],
                 outputs: Sequence[Any] = ()) -> None:
        if not isinstance(readers, dict) or not readers:
            raise TypeError(f"readers must be a non-empty dict of name -> record reader, got "
                            f"{readers!r}")
        for name, reader in readers.items():
            if not isinstance(name, str):
                raise TypeError(f"readers: names must be str, got {name!r}")
            for method in ("has_next", "next", "reset"):
                if not callable(getattr(reader, method, None)):
                    raise TypeError(f"readers[{name!r}] must be a record reader with "
                                    f"has_next(), next() and reset(), got "
                                    f"{type(reader).__name__}")
        self.readers = dict(readers)
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.inputs = [self._spec("inputs", s, allow_one_hot=False) for s in inputs]
        self.outputs = [self._spec("outputs", s, allow_one_hot=True) for s in outputs]
        if not self.inputs:
            raise ValueError("inputs must contain at least one spec, got none")
        self._widths: dict[str, int] = {}
        for reader in self.readers.values():
            reader.reset()  # the iterator owns the readers: start at their first records

    def _spec(self, arg: str, spec: Any, allow_one_hot: bool) -> Any:
        if isinstance(spec, OneHot):
            if not allow_one_hot:
                raise TypeError(f"{arg}: OneHot specs are for outputs only, got {spec!r}")
            name = spec.reader
        elif isinstance(spec, str):
            name, spec = spec, (spec, 0, None)
        elif isinstance(spec, tuple) and len(spec) == 3:
            name, lo, hi = spec
            lo = _check_int(f"{arg}: col_from", lo, 0)
            hi = _check_int(f"{arg}: col_to", hi, 0)
            if hi < lo:
                raise ValueError(f"{arg}: col_to must be >= col_from, got {spec!r}")
            spec = (name, lo, hi)
        else:
            raise TypeError(f"{arg}: a spec is a reader name, (name, col_from, col_to) or "
                            f"OneHot(name, column, num_classes), got {spec!r}")
        if name not in self.readers:
            raise ValueError(f"{arg}: unknown reader {name!r}; readers are "
                             f"{sorted(self.readers)}")
        return spec

    def has_next(self) -> bool:
        # any, not all: a reader that runs out early is reported by next(), not hidden
        return any(r.has_next() for r in self.readers.values())

    def _check_width(self, name: str, record: list[float]) -> None:
        if any(isinstance(v, np.ndarray) for v in record):
            raise ValueError(f"{_where(self.readers[name])}reader {name!r} gives records "
                             f"holding an array (an image reader's); "
                             f"RecordReaderMultiDataSetIterator takes records of numbers: use "
                             f"RecordReaderDataSetIterator")
        width = self._widths.setdefault(name, len(record))
        if len(record) != width:
            raise ValueError(f"{_where(self.readers[name])}expected {width} fields, got "
                             f"{len(record)}")
        for spec in self.inputs + self.outputs:
            if isinstance(spec, OneHot):
                if spec.reader == name and spec.column >= width:
                    raise ValueError(f"outputs: column {spec.column} of {spec!r} is out of "
                                     f"range for reader {name!r} with {width} fields")
            elif spec[0] == name and spec[2] is not None and spec[2] >= width:
                raise ValueError(f"col_to {spec[2]} of spec {spec!r} is out of range for "
                                 f"reader {name!r} with {width} fields")

    def _next(self) -> MultiDataSet:
        tables: dict[str, list[list[float]]] = {name: [] for name in self.readers}
        locations: dict[str, list] = {name: [] for name in self.readers}   # to name a place
        while len(next(iter(tables.values()))) < self._global_batch():
            have = {name: r.has_next() for name, r in self.readers.items()}
            if not any(have.values()):
                break
            if not all(have.values()):
                short = sorted(n for n, h in have.items() if not h)
                raise ValueError(f"readers {short} ran out of records before the others: the "
                                 f"readers must have the same number of records")
            for name, reader in self.readers.items():
                record = reader.next()
                self._check_width(name, record)
                if _has_text(record):
                    record = _text_fields_as_numbers(record, f"{_where(reader)}reader {name!r}: ")
                tables[name].append(record)
                locations[name].append(getattr(reader, "location", None))
        if not next(iter(tables.values())):
            raise StopIteration
        part = self._part(len(next(iter(tables.values()))))    # a shard's part
        arrays = {}
        for name, rows in tables.items():
            try:
                table = np.asarray(rows, dtype=np.float64).reshape(len(rows),
                                                                   self._widths[name])
            except OverflowError:
                raise ValueError(f"reader {name!r} gave an integer beyond the range of "
                                 f"float64: every field must fit a float") from None
            except (TypeError, ValueError):
                raise ValueError(f"reader {name!r} gave a field that is not a number: every "
                                 f"field must be a number") from None
            # every record of the global batch (every shard refuses the batch), in the columns
            # that become float32 arrays (a OneHot column is checked as a class index)
            columns = self._float_columns(name)
            at = _float32_overflow(table[:, columns])
            if at is not None:
                raise _float32_error(_at(locations[name][at[0]]),
                                     f"reader {name!r}: column index {columns[at[1]]}",
                                     table[at[0], columns[at[1]]])
            arrays[name] = table[part]
            # class indices likewise in every record of the global batch
            for spec in self.outputs:
                if isinstance(spec, OneHot) and spec.reader == name:
                    col = table[:, spec.column]
                    bad = _no_class_index(col, spec.num_classes)
                    if bad.any():
                        row = int(np.argmax(bad))
                        raise ValueError(f"{_at(locations[name][row])}reader {name!r}: label "
                                         f"{float(col[row])!r} in column index {spec.column} "
                                         f"is not a class index in [0, {spec.num_classes})")

        def build(spec: Any) -> np.ndarray:
            if isinstance(spec, OneHot):
                col = arrays[spec.reader][:, spec.column]
                out = np.zeros((col.shape[0], spec.num_classes), dtype=np.float32)
                out[np.arange(col.shape[0]), col.astype(np.intp)] = 1
                return out
            name, lo, hi = spec
            table = arrays[name]
            return table[:, lo:(table.shape[1] if hi is None else hi + 1)].astype(np.float32)

        return MultiDataSet([build(s) for s in self.inputs], [build(s) for s in self.outputs])

    def _float_columns(self, name: str) -> list[int]:
        # the columns of reader `name` that input and output ranges take (as float32)
        width = self._widths[name]
        return sorted({c for spec in self.inputs + self.outputs
                       if not isinstance(spec, OneHot) and spec[0] == name
                       for c in range(spec[1], width if spec[2] is None else spec[2] + 1)})

    def _reset(self) -> None:
        for reader in self.readers.values():
            reader.reset()
        # the readers' widths were learned from their records: the next epoch learns them
        # again, as a new iterator would (the specs' columns are checked against them)
        self._widths = {}

    def _take_readers(self) -> None:
        self.readers = {name: _reader_copy(r) for name, r in self.readers.items()}
        self._widths = dict(self._widths)

    def batch(self) -> int:
        return self.batch_size
