"""ndws.datasets.load_mnist and its IDX reader (ndws/datasets/_idx.py) on tiny IDX files written
here, plain and gzipped; every kind of bad file is a ValueError naming it, before anything the
size of the header's claim is allocated."""
import gzip
import os
import re
import struct
import tracemalloc

import numpy as np
import pytest

from ndws.data.iterators import ArrayDataSetIterator
from ndws.datasets import MNIST_FILES, load_mnist


def idx_bytes(array, code=0x08):
    array = np.asarray(array)
    dtype = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}[code]
    head = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return head + array.astype(dtype).tobytes()


def write(folder, name, data, gz=False):
    path = os.path.join(folder, name + (".gz" if gz else ""))
    with (gzip.open(path, "wb") if gz else open(path, "wb")) as f:
        f.write(data)
    return path


@pytest.fixture
def mnist(tmp_path, rng):
    # 5 training and 3 test images of 4 x 3, two files gzipped and two plain
    data = {"train": (rng.integers(0, 256, (5, 4, 3)), rng.integers(0, 10, 5)),
            "test": (rng.integers(0, 256, (3, 4, 3)), np.array([9, 0, 3]))}
    for split, gz in (("train", True), ("test", False)):
        images, labels = data[split]
        write(tmp_path, MNIST_FILES[split][0], idx_bytes(images), gz=gz)
        write(tmp_path, MNIST_FILES[split][1], idx_bytes(labels), gz=not gz)
    return tmp_path, data


@pytest.mark.parametrize("train", [True, False])
def test_arrays_of_both_splits(mnist, train):
    folder, data = mnist
    images, labels = data["train" if train else "test"]
    X, y = load_mnist(folder, train=train)
    assert X.dtype == np.float32 and X.shape == (len(labels), 12)
    assert y.dtype == np.int64
    np.testing.assert_array_equal(X, images.reshape(len(labels), 12))
    np.testing.assert_array_equal(y, labels)
    X4, _ = load_mnist(str(folder), train=train, flatten=False, normalize=True)
    assert X4.shape == (len(labels), 1, 4, 3)
    np.testing.assert_array_equal(X4, (images[:, None] / np.float32(255)).astype(np.float32))
    assert 0.0 <= X4.min() and X4.max() <= 1.0


def test_iterator_with_one_hot_labels(mnist):
    folder, data = mnist
    it = load_mnist(folder, as_iterator=True, batch_size=2, normalize=True)
    assert isinstance(it, ArrayDataSetIterator)
    batches = list(it)
    assert [b.features.shape for b in batches] == [(2, 12), (2, 12), (1, 12)]
    labels = np.concatenate([b.labels.numpy() for b in batches])
    np.testing.assert_array_equal(labels, np.eye(10, dtype=np.float32)[data["train"][1]])
    with pytest.raises(TypeError, match=r"^load_mnist: iterator options \(batch_size\) require "
                                        r"as_iterator=True$"):
        load_mnist(folder, batch_size=2)


def test_plain_is_read_when_both_exist_and_empty_sets_work(tmp_path):
    write(tmp_path, "t10k-images-idx3-ubyte", idx_bytes(np.zeros((0, 28, 28))))
    write(tmp_path, "t10k-images-idx3-ubyte", b"garbage", gz=True)      # not read
    write(tmp_path, "t10k-labels-idx1-ubyte", idx_bytes(np.zeros(0)))
    X, y = load_mnist(tmp_path, train=False)
    assert X.shape == (0, 784) and y.shape == (0,)


def test_missing_files_and_folders(mnist, tmp_path):
    folder, _ = mnist
    os.remove(os.path.join(folder, "t10k-labels-idx1-ubyte.gz"))
    with pytest.raises(FileNotFoundError, match=r"^load_mnist: no t10k-labels-idx1-ubyte \(or "
                                                r"t10k-labels-idx1-ubyte.gz\) in '.*'; MNIST is "
                                                r"the four files train-images-idx3-ubyte, "
                                                r"train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
                                                r"t10k-labels-idx1-ubyte, plain or gzipped "
                                                r"\(ndws downloads nothing\)$"):
        load_mnist(folder, train=False)
    load_mnist(folder, train=True)                      # the training files are all there
    with pytest.raises(FileNotFoundError, match=r"^load_mnist: no such folder '.*nowhere'$"):
        load_mnist(tmp_path / "nowhere")
    with pytest.raises(NotADirectoryError, match=r"^load_mnist: '.*' is a file, not a folder$"):
        load_mnist(os.path.join(folder, "t10k-images-idx3-ubyte"))
    for kw, msg in [({"train": 1}, r"train must be a bool, got 1"),
                    ({"flatten": "no"}, r"flatten must be a bool"),
                    ({"normalize": None}, r"normalize must be a bool")]:
        with pytest.raises(TypeError, match=msg):
            load_mnist(folder, **kw)
    with pytest.raises(TypeError, match=r"^load_mnist: path must be a folder"):
        load_mnist(42)


GOOD_LABELS = idx_bytes(np.arange(3))
HUGE = bytes([0, 0, 8, 3]) + struct.pack(">3I", 2 ** 31, 2 ** 16, 2 ** 16) + bytes(100)


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("content, msg", [
    (idx_bytes(np.zeros((3, 2, 2)))[:-5], r"the header's dimensions \(3, 2, 2\) need 12 bytes of "
                                          r"data, the file has 7 \(truncated\)$"),
    (idx_bytes(np.zeros((3, 2, 2))) + b"\0", r"the header's dimensions \(3, 2, 2\) need 12 "
                                            r"bytes of data, the file has (13|more)$"),
    (bytes([0, 0, 8]), r"truncated IDX file: the magic number needs 4 bytes, the file has 3$"),
    (bytes([0, 0, 8, 3, 0, 0]), r"truncated IDX file: the dimensions needs 12 bytes"),
    (bytes(range(7, 207)), r"not an IDX file: magic number 0x0708090a"),
    (bytes([0, 0, 0x42, 3]) + bytes(40), r"not an IDX file: magic number 0x00004203"),
    (idx_bytes(np.zeros((3, 2, 2)), code=0x0C), r"expected an IDX file of 3 dimension\(s\) of "
                                                r"uint8 \(magic 0x00000803\), got 3 dimension\(s\) "
                                                r"of int32 \(magic 0x00000c03\)$"),
    (idx_bytes(np.zeros((3, 4))), r"expected an IDX file of 3 .*, got 2 dimension\(s\) of uint8"),
    (HUGE, r"the header's dimensions \(2147483648, 65536, 65536\) need 9223372036854775808 "
           r"bytes of data, the file has 100 \(truncated\)$"),
], ids=["truncated", "trailing", "short magic", "short dimensions", "garbage", "type code",
        "int32 images", "two dimensions", "huge claim"])
def test_bad_image_files_are_named_before_any_large_allocation(tmp_path, content, msg, gz):
    path = write(tmp_path, "train-images-idx3-ubyte", content, gz=gz)
    write(tmp_path, "train-labels-idx1-ubyte", GOOD_LABELS)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="^" + re.escape(path) + ": " + msg):
            load_mnist(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20                       # nothing near the claimed size


def test_other_bad_files(tmp_path):
    labels = os.path.join(tmp_path, "train-labels-idx1-ubyte")
    write(tmp_path, "train-images-idx3-ubyte", idx_bytes(np.zeros((3, 2, 2))))
    os.mkdir(labels)                                              # a directory in its place
    with pytest.raises(ValueError, match=r"train-labels-idx1-ubyte: is a directory, not an IDX "
                                         r"file$"):
        load_mnist(tmp_path)
    os.rmdir(labels)
    write(tmp_path, "train-labels-idx1-ubyte", b"\x1f\x8b\x08\x00 not really gzip", gz=False)
    with pytest.raises(ValueError, match=r"train-labels-idx1-ubyte: not an IDX file"):
        load_mnist(tmp_path)
    os.remove(labels)
    write(tmp_path, "train-labels-idx1-ubyte.gz", b"\x1f\x8b\x08\x00 corrupt gzip", gz=False)
    with pytest.raises(ValueError, match=r"train-labels-idx1-ubyte.gz: cannot read the IDX "
                                         r"file: "):
        load_mnist(tmp_path)
    os.remove(labels + ".gz")
    write(tmp_path, "train-labels-idx1-ubyte", idx_bytes(np.arange(4)))
    with pytest.raises(ValueError, match=r"^load_mnist: .*train-images-idx3-ubyte holds 3 images "
                                         r"but .*train-labels-idx1-ubyte holds 4 labels$"):
        load_mnist(tmp_path)
    write(tmp_path, "train-labels-idx1-ubyte", idx_bytes(np.array([1, 12, 3])))
    with pytest.raises(ValueError, match=r"train-labels-idx1-ubyte: label 12 at index 1 is not a "
                                         r"digit 0..9$"):
        load_mnist(tmp_path)
