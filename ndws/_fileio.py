"""Reading files nobody vouches for: the zips that `MultiLayerNetwork.save` and the normalizers'
``save`` write, opened so that a hostile or damaged file costs no more memory than the reader
asked for (docs/networks.md, "Saving and resuming").

Everything a file says about sizes is checked against everything else before anything is
allocated: an entry's declared uncompressed size against its compressed size (no deflate stream
inflates more than 1032 times) and against where the archive ends, a JSON entry's size against
a limit, and an ``.npy`` header's dtype and shape against what the caller needs, its data size
against the entry's declared size. Only then is the array allocated, once, and the entry read
into it in bounded chunks; the zip module checks the CRC at the end. Loading runs no code: no
pickle, and JSON is parsed, never evaluated.

Every error is a ``ValueError`` that names the file and the entry, whatever the cause (a
``MemoryError`` for an array that passed every check but does not fit, a ``RecursionError``
from deeply nested JSON, a ``zipfile.BadZipFile``, an ``EOFError``).
"""
from __future__ import annotations

import io
import json
import os
import stat
import struct
import zipfile
import zlib
from typing import Any

import numpy as np

__all__ = ["Archive", "MAX_DEFLATE_RATIO", "output_directory"]

#: the most a deflate stream can inflate: 258 bytes per 2-bit code, slightly over 1032:1
#: (zlib's technical notes)
MAX_DEFLATE_RATIO = 1032
#: an .npy header is a short dict literal: NumPy's own reader refuses more than 10,000 bytes
MAX_NPY_HEADER = 10_000
#: what the zip module raises for a damaged archive or entry (RuntimeError: an encrypted entry
#: read without its password; NotImplementedError: an unsupported zip feature)
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, struct.error, OSError,
               EOFError, ValueError, NotImplementedError, RuntimeError)
_KINDS = {"biufc": "numbers", "U": "text"}
#: bytes read from an entry per call while filling an array (bounds the decompressor's buffers)
CHUNK = 1 << 20


class Archive:
    """A zip file opened for bounded reads of its entries.

    Parameters
    ----------
    path : str
        The file (already checked to be an existing file by the caller, who names its own
        argument in those errors).
    what : str
        What the file should be, for messages: "an ndws network file".
    """

    def __init__(self, path: str, what: str):
        self.path = path
        self.what = what
        try:
            st = os.stat(path)
        except OSError as exc:
            raise ValueError(f"{path}: not {what} ({exc})") from None
        if not stat.S_ISREG(st.st_mode):
            # a FIFO would block the read forever, a device (/dev/zero) never ends
            raise ValueError(f"{path}: not {what} (not a regular file)")
        try:
            self._size = st.st_size
            self._zip = zipfile.ZipFile(path)
        except _ZIP_ERRORS as exc:
            raise ValueError(f"{path}: not {what} (not a zip: {exc})") from None
        self.names = set(self._zip.namelist())

    def __enter__(self) -> "Archive":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._zip.close()

    def close(self) -> None:
        self._zip.close()

    def error(self, name: str, problem: str) -> ValueError:
        """The error of entry `name`: ``"<path>: <name>: <problem>"``."""
        return ValueError(f"{self.path}: {name}: {problem}")

    def require(self, name: str) -> zipfile.ZipInfo:
        """The entry `name`, its sizes checked against each other and the archive's end."""
        if name not in self.names:
            raise ValueError(f"{self.path}: not {self.what} ({name} missing)")
        info = self._zip.getinfo(name)
        if info.flag_bits & 0x1:
            raise self.error(name, "is encrypted")
        if info.compress_type == zipfile.ZIP_STORED:
            if info.file_size != info.compress_size:
                raise self.error(name, f"a stored entry declares {info.file_size} bytes but "
                                       f"holds {info.compress_size}")
        elif info.compress_type == zipfile.ZIP_DEFLATED:
            if info.file_size > info.compress_size * MAX_DEFLATE_RATIO + 1024:
                raise self.error(name, f"declares {info.file_size} bytes inflated from "
                                       f"{info.compress_size} compressed, more than deflate "
                                       f"can produce ({MAX_DEFLATE_RATIO}:1): the archive is "
                                       f"damaged or forged")
        else:
            raise self.error(name, f"compression method {info.compress_type} is not one ndws "
                                   f"writes (stored or deflate)")
        if info.header_offset + info.compress_size > self._size:
            raise self.error(name, f"the archive ends before the entry's {info.compress_size} "
                                   f"compressed bytes (truncated)")
        return info

    def _read_bounded(self, name: str, limit: int, what: str) -> bytes:
        info = self.require(name)
        if info.file_size > limit:
            raise self.error(name, f"is {info.file_size} bytes; {what} is at most {limit}")
        try:
            with self._zip.open(info) as f:
                data = f.read(limit + 1)
        except _ZIP_ERRORS as exc:
            raise self.error(name, f"truncated or corrupt ({exc})") from None
        if len(data) != info.file_size:
            raise self.error(name, f"holds {len(data)} bytes, its header says "
                                   f"{info.file_size} (truncated or corrupt)")
        return data

    def read_json(self, name: str, limit: int) -> Any:
        """Entry `name` parsed as JSON (at most `limit` bytes)."""
        data = self._read_bounded(name, limit, "a valid entry")
        try:
            return json.loads(data)
        except (ValueError, RecursionError) as exc:     # UnicodeDecodeError is a ValueError
            raise self.error(name, f"not JSON text ({type(exc).__name__}: {exc})") from None

    def npy_header(self, name: str, kinds: str = "biufc") -> tuple[np.dtype, tuple, bool, int]:
        """The ``.npy`` header of entry `name`: (dtype, shape, fortran_order, data offset),
        read from its first bytes only; a dtype of another kind than `kinds` is refused, and
        the declared data size is checked against the entry's size."""
        info = self.require(name)
        try:
            with self._zip.open(info) as f:
                head = io.BytesIO(f.read(min(info.file_size, MAX_NPY_HEADER + 16)))
        except _ZIP_ERRORS as exc:
            raise self.error(name, f"truncated or corrupt ({exc})") from None
        try:
            version = np.lib.format.read_magic(head)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(
                    head, max_header_size=MAX_NPY_HEADER)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(
                    head, max_header_size=MAX_NPY_HEADER)
            else:
                raise ValueError(f".npy format version {version} (ndws reads 1.0 and 2.0)")
        except Exception as exc:   # NumPy's header parser (tokenize, ast) raises many kinds
            raise self.error(name, f"not an .npy array ({exc})") from None
        if dtype.hasobject or dtype.kind not in kinds or dtype.fields is not None \
                or dtype.subdtype is not None:
            raise self.error(name, f"holds dtype {dtype}, not {_KINDS.get(kinds, kinds)}")
        if any(n < 0 for n in shape):
            raise self.error(name, f"the header's shape {shape} has a negative size")
        offset = head.tell()
        count = 1
        for n in shape:
            count *= n
        if info.file_size != offset + count * dtype.itemsize:
            raise self.error(name, f"the header says {dtype} {shape} ({count * dtype.itemsize} "
                                   f"bytes), the entry holds {info.file_size - offset} bytes "
                                   f"of data")
        return dtype, shape, fortran, offset

    def read_npy(self, name: str, header: tuple[np.dtype, tuple, bool, int]) -> np.ndarray:
        """Entry `name`'s array, whose header `npy_header` returned and the caller accepted:
        allocated once, then filled from the entry in bounded chunks."""
        dtype, shape, fortran, offset = header
        nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
        try:
            out = np.empty(shape, dtype, order="F" if fortran else "C")
        except (MemoryError, ValueError) as exc:
            raise self.error(name, f"{dtype} {shape} ({nbytes} bytes) can't be allocated "
                                   f"({type(exc).__name__}: {exc})") from None
        buf = memoryview(out.reshape(-1, order="A").view(np.uint8))
        try:
            with self._zip.open(self._zip.getinfo(name)) as f:
                if len(f.read(offset)) != offset:
                    raise EOFError("the header is cut short")
                pos = 0
                while pos < nbytes:
                    chunk = f.read(min(CHUNK, nbytes - pos))
                    if not chunk:
                        raise EOFError(f"{nbytes - pos} of {nbytes} data bytes missing")
                    buf[pos:pos + len(chunk)] = chunk
                    pos += len(chunk)
                if f.read(1):                 # also makes zipfile check the CRC
                    raise ValueError("data past the array's end")
        except _ZIP_ERRORS as exc:
            raise self.error(name, f"truncated or corrupt ({exc})") from None
        return out


def output_directory(where: str, directory: Any) -> str:
    """`directory` (a str or os.PathLike naming a folder to write files into) created with its
    parents if it does not exist; TypeError / ValueError / NotADirectoryError / OSError naming
    `where` (``"CheckpointListener.directory"``) otherwise. Called once every other argument of
    the caller is known good, so nothing is created for a refused object."""
    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(f"{where}: expected a path, got {type(directory).__name__}")
    directory = os.fspath(directory)
    if not isinstance(directory, str) or not directory:
        raise ValueError(f"{where}: expected a folder name, got {directory!r:.60}")
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise NotADirectoryError(f"{where}: {directory!r} exists and is not a directory")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise type(exc)(exc.errno, f"{where}: cannot create {directory!r}: "
                                   f"{exc.strerror}") from None
    return directory
