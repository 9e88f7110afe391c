"""Reading IDX files (the format of MNIST: LeCun's ``train-images-idx3-ubyte`` and its
siblings), plain or gzipped, with the header checked against the data before anything the size
of the data is allocated.

An IDX file is a magic number (two zero bytes, a type code, the number of dimensions), the
dimensions as big-endian uint32, then the values in C order, big-endian.
"""
from __future__ import annotations

import gzip
import math
import os
import struct
import zlib

import numpy as np

__all__ = ["read_idx"]

#: IDX type code -> NumPy dtype (big-endian, as the format stores them)
IDX_TYPES = {0x08: np.dtype(np.uint8), 0x09: np.dtype(np.int8), 0x0B: np.dtype(">i2"),
             0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}

# gzipped data is read in pieces of this size: memory grows with what the file really holds,
# never to what a (lying) header claims
_CHUNK = 1 << 22


def _exact(f, n: int, path: str, what: str) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise ValueError(f"{path}: truncated IDX file: {what} needs {n} bytes, the file has "
                         f"{len(data)}")
    return data


def read_idx(path: str, ndim: int, dtype: np.dtype) -> np.ndarray:
    """The array of IDX file `path` (gzipped when its name ends in ``.gz``), which must have
    `ndim` dimensions and values of `dtype`. ValueError naming the file for anything else: a
    directory, a bad magic number or type code, dimensions that disagree with the file's size
    (truncated, trailing data, or a header claiming more than the file holds), a corrupt gzip
    stream."""
    if os.path.isdir(path):
        raise ValueError(f"{path}: is a directory, not an IDX file")
    gz = path.endswith(".gz")
    try:
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
            magic = _exact(f, 4, path, "the magic number")
            if magic[0] != 0 or magic[1] != 0 or magic[2] not in IDX_TYPES:
                raise ValueError(f"{path}: not an IDX file: magic number 0x{magic.hex()} "
                                 f"(expected 0x0000 followed by a type code and the number of "
                                 f"dimensions)")
            if IDX_TYPES[magic[2]] != dtype or magic[3] != ndim:
                raise ValueError(f"{path}: expected an IDX file of {ndim} dimension(s) of "
                                 f"{dtype.name} (magic 0x0000{_code(dtype):02x}{ndim:02x}), got "
                                 f"{magic[3]} dimension(s) of {IDX_TYPES[magic[2]].name} "
                                 f"(magic 0x{magic.hex()})")
            dims = struct.unpack(f">{ndim}I", _exact(f, 4 * ndim, path, "the dimensions"))
            count = math.prod(dims)
            nbytes = count * dtype.itemsize
            if not gz:
                have = os.fstat(f.fileno()).st_size - 4 - 4 * ndim
                if have != nbytes:
                    raise ValueError(f"{path}: the header's dimensions {dims} need {nbytes} bytes "
                                     f"of data, the file has {have}"
                                     f"{' (truncated)' if have < nbytes else ''}")
                data = np.empty(count, dtype=dtype)
                if f.readinto(memoryview(data).cast("B")) != nbytes:
                    raise ValueError(f"{path}: the file changed while it was read")
            else:
                buf = bytearray()
                while len(buf) < nbytes:
                    piece = f.read(min(_CHUNK, nbytes - len(buf)))
                    if not piece:
                        break
                    buf += piece
                extra = f.read(1)
                if len(buf) != nbytes or extra:
                    raise ValueError(f"{path}: the header's dimensions {dims} need {nbytes} "
                                     f"bytes of data, the file has "
                                     f"{'more' if extra else len(buf)}"
                                     f"{' (truncated)' if len(buf) < nbytes else ''}")
                data = np.frombuffer(buf, dtype=dtype)
    except (OSError, EOFError, zlib.error) as exc:
        # an unreadable file, or a corrupt gzip stream (BadGzipFile is an OSError)
        raise ValueError(f"{path}: cannot read the IDX file: {exc}") from None
    return data.reshape(dims)


def _code(dtype: np.dtype) -> int:
    return next(c for c, d in IDX_TYPES.items() if d == dtype)
