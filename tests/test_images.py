"""ndws.data.images: ImageRecordReader on tiny PNG/JPEG files written here, feeding
RecordReaderDataSetIterator NCHW (and NHWC) batches; conversions, labels and bad folders."""
import os
import sys

import numpy as np
import pytest

from ndws.data import (ImagePreProcessingScaler, ImageRecordReader, ParentPathLabelGenerator,
                       RecordReader, RecordReaderDataSetIterator,
                       RecordReaderMultiDataSetIterator)

Image = pytest.importorskip("PIL.Image")


def _save(path, array, mode=None, **kw):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    img = Image.fromarray(array) if mode is None else Image.fromarray(array).convert(mode)
    img.save(path, **kw)
    return path


def _mode(path):
    with Image.open(path) as img:
        return img.mode


def _pixels(rng, h, w, c=3):
    return rng.integers(0, 256, (h, w, c) if c > 1 else (h, w), dtype=np.uint8)


@pytest.fixture
def folder(tmp_path, rng):
    # three classes, images of several sizes and formats, and files a reader must skip
    root = tmp_path / "images"
    made = {}
    made["cat/b.png"] = _pixels(rng, 6, 5)
    made["cat/a.png"] = _pixels(rng, 6, 5)
    made["dog/x.PNG"] = _pixels(rng, 6, 5)
    made["bird/nested/z.png"] = _pixels(rng, 6, 5)          # class = the folder it is in
    for name, pixels in made.items():
        _save(str(root / name), pixels)
    (root / "cat" / "notes.txt").write_text("not an image")
    (root / "cat" / ".DS_Store").write_bytes(b"\x00\x01")
    (root / ".hidden").mkdir()
    _save(str(root / ".hidden" / "h.png"), _pixels(rng, 6, 5))
    return root, made


def test_folder_to_nchw_batches_with_sorted_labels(folder):
    root, made = folder
    reader = ImageRecordReader(6, 5, 3)
    reader.initialize(root)
    assert reader.labels == ["cat", "dog", "nested"] == reader.get_labels()
    assert [os.path.relpath(f, root) for f in reader.files] == [
        os.path.join("bird", "nested", "z.png"), os.path.join("cat", "a.png"),
        os.path.join("cat", "b.png"), os.path.join("dog", "x.PNG")]
    assert reader.num_fields == 2
    it = RecordReaderDataSetIterator(reader, batch_size=3, label_index=1,
                                     num_classes=len(reader.labels))
    batches = list(it)
    assert [b.features.shape for b in batches] == [(3, 3, 6, 5), (1, 3, 6, 5)]
    features = np.concatenate([b.features.numpy() for b in batches])
    labels = np.concatenate([b.labels.numpy() for b in batches])
    assert features.dtype == np.float32
    order = ["bird/nested/z.png", "cat/a.png", "cat/b.png", "dog/x.PNG"]
    # the same size: every pixel exactly, channels first
    np.testing.assert_array_equal(features, np.stack([made[n].transpose(2, 0, 1)
                                                      for n in order]))
    np.testing.assert_array_equal(labels, np.eye(3)[[2, 0, 0, 1]])
    # a second epoch reads the same
    again = np.concatenate([b.features.numpy() for b in it])
    np.testing.assert_array_equal(again, features)


def test_nhwc_and_resizing(folder):
    root, made = folder
    nchw = ImageRecordReader(4, 7, 3)
    nhwc = ImageRecordReader(4, 7, 3, nchw_channels_first=False)
    for r in (nchw, nhwc):
        r.initialize(root)
    a = next(iter(RecordReaderDataSetIterator(nchw, 4, 1, 3))).features.numpy()
    b = next(iter(RecordReaderDataSetIterator(nhwc, 4, 1, 3))).features.numpy()
    assert a.shape == (4, 3, 4, 7) and b.shape == (4, 4, 7, 3)
    np.testing.assert_array_equal(a.transpose(0, 2, 3, 1), b)
    # resized as documented: bilinear, after the conversion
    expected = np.asarray(Image.fromarray(made["cat/a.png"]).resize(
        (7, 4), Image.Resampling.BILINEAR), dtype=np.float32)
    np.testing.assert_array_equal(b[1], expected)


def test_channels_grey_rgb_rgba(tmp_path):
    # RGB (10, 20, 30): grey is ITU-R 601-2 luma, 0.299 R + 0.587 G + 0.114 B = 18.15 -> 18
    _save(str(tmp_path / "c" / "rgb.png"), np.tile(np.array([10, 20, 30], np.uint8), (3, 4, 1)))
    for channels, pixel in [(1, [18]), (3, [10, 20, 30]), (4, [10, 20, 30, 255])]:
        reader = ImageRecordReader(3, 4, channels)
        reader.initialize(tmp_path)
        image, label = reader.next()
        assert image.shape == (channels, 3, 4) and label == 0.0
        np.testing.assert_array_equal(image, np.broadcast_to(
            np.array(pixel, np.float32)[:, None, None], (channels, 3, 4)))


def test_modes_that_need_conversion(tmp_path):
    d = tmp_path / "k"
    d.mkdir()
    # a palette image with a transparent entry: through RGBA, so the alpha survives
    pal = Image.new("P", (2, 2))
    pal.putpalette([0, 0, 0, 255, 0, 0] + [0, 0, 0] * 254)
    pal.putdata([0, 1, 1, 0])
    pal.info["transparency"] = 0
    pal.save(d / "p1.png")
    # grey + alpha: the alpha dropped, the grey in every colour channel
    Image.merge("LA", [Image.fromarray(np.array([[50, 60], [70, 80]], np.uint8)),
                       Image.fromarray(np.full((2, 2), 9, np.uint8))]).save(d / "p2.png")
    # 16-bit grey: scaled by 255 / 65535
    Image.fromarray(np.array([[0, 65535], [257, 32896]], np.uint16)).save(d / "p3.png")
    # 1-bit: 0 / 255
    Image.fromarray(np.array([[True, False], [False, True]])).save(d / "p4.png")
    # CMYK JPEG (large and uniform, so the lossy code keeps the colour)
    Image.new("CMYK", (16, 16), (0, 255, 255, 0)).save(d / "p5.jpg", quality=100)
    rgba = ImageRecordReader(2, 2, 4, nchw_channels_first=False)
    rgba.initialize(tmp_path)
    images = [r[0] for r in rgba]
    assert images[0][..., 3].tolist() == [[0, 255], [255, 0]]
    assert images[0][0, 1, :3].tolist() == [255, 0, 0]
    assert _mode(d / "p2.png") == "LA" and _mode(d / "p3.png").startswith("I;16")
    grey = ImageRecordReader(2, 2, 1, nchw_channels_first=False)
    grey.initialize(tmp_path)
    images = [r[0][..., 0] for r in grey]
    np.testing.assert_allclose(images[2], [[0, 255], [1, 128]], rtol=1e-6)
    assert images[3].tolist() == [[255, 0], [0, 255]]
    rgb = ImageRecordReader(2, 2, 3, nchw_channels_first=False)
    rgb.initialize(tmp_path)
    images = [r[0] for r in rgb]
    assert images[1].tolist() == [[[50] * 3, [60] * 3], [[70] * 3, [80] * 3]]
    assert images[2][..., 0].tolist() == images[2][..., 2].tolist() == [[0, 255], [1, 128]]
    assert np.abs(images[4] - [255, 0, 0]).max() <= 2          # CMYK -> red, JPEG-rounded


def test_without_labels_images_may_sit_in_the_folder(tmp_path, rng):
    _save(str(tmp_path / "one.png"), _pixels(rng, 3, 3, 1))
    _save(str(tmp_path / "two.jpg"), _pixels(rng, 3, 3, 1))
    reader = ImageRecordReader(3, 3, 1, label_generator=None)
    reader.initialize(tmp_path)
    assert reader.labels == [] and reader.num_fields == 1
    ds = next(iter(RecordReaderDataSetIterator(reader, 8)))
    assert ds.features.shape == (2, 1, 3, 3) and ds.labels is None


def test_with_parent_labels_images_in_the_folder_itself_are_refused(tmp_path, rng):
    _save(str(tmp_path / "loose.png"), _pixels(rng, 3, 3))
    _save(str(tmp_path / "cls" / "ok.png"), _pixels(rng, 3, 3))
    reader = ImageRecordReader(3, 3, 3)
    with pytest.raises(ValueError, match=r"^ImageRecordReader.initialize: '.*loose.png' is "
                                         r"directly in the folder "
                                         r"given: ParentPathLabelGenerator labels an image by "
                                         r"the folder it is in, so put the images in one "
                                         r"subfolder per class \(or pass label_generator=None "
                                         r"for unlabelled images\)$"):
        reader.initialize(tmp_path)
    assert reader.num_fields is None and reader.labels == []      # nothing half-set


def test_custom_label_generator(tmp_path, rng):
    class ByName:
        def get_label_for_path(self, path):
            return os.path.basename(path)[0]

    for name in ("a1.png", "b1.png", "a2.png"):
        _save(str(tmp_path / name), _pixels(rng, 2, 2))
    reader = ImageRecordReader(2, 2, 3, label_generator=ByName())
    reader.initialize(tmp_path)
    assert reader.labels == ["a", "b"]
    assert [r[1] for r in reader] == [0.0, 0.0, 1.0]

    class Bad:
        def get_label_for_path(self, path):
            return 3

    with pytest.raises(TypeError, match=r"get_label_for_path\(.*\) must return a str, got int"):
        ImageRecordReader(2, 2, 3, label_generator=Bad()).initialize(tmp_path)
    assert ParentPathLabelGenerator().get_label_for_path(os.path.join("x", "cls", "f.png")) \
        == "cls"


def test_bad_images_are_named_and_stop_the_reader(tmp_path, rng):
    _save(str(tmp_path / "c" / "a.png"), _pixels(rng, 3, 3))
    (tmp_path / "c" / "b.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(200)))  # garbage
    good = _save(str(tmp_path / "c" / "c.png"), _pixels(rng, 30, 30))
    reader = ImageRecordReader(3, 3, 3)
    reader.initialize(tmp_path)
    it = RecordReaderDataSetIterator(reader, 1, 1, 1)
    assert it.next().features.shape == (1, 3, 3, 3)
    with pytest.raises(ValueError, match=r"^.*b.png: cannot read the image: "):
        it.next()
    with pytest.raises(RuntimeError, match=r"stopped at an error"):
        it.next()
    # a truncated file
    with open(good, "rb") as f:
        data = f.read()
    with open(good, "wb") as f:
        f.write(data[:len(data) // 2])
    (tmp_path / "c" / "b.png").unlink()
    reader.initialize(tmp_path)
    reader.next()
    with pytest.raises(ValueError, match=r"c.png: cannot read the image: "):
        reader.next()
    with pytest.raises(RuntimeError, match=r"^ImageRecordReader stopped at an error"):
        reader.has_next()
    reader.reset()
    assert reader.next()[0].shape == (3, 3, 3)                # readable again after reset


def test_bad_folders_and_arguments(tmp_path):
    reader = ImageRecordReader(3, 3)
    with pytest.raises(FileNotFoundError, match=r"^ImageRecordReader.initialize: no such folder "
                                                r"'.*nope'$"):
        reader.initialize(tmp_path / "nope")
    (tmp_path / "file.png").write_bytes(b"x")
    with pytest.raises(NotADirectoryError, match=r"^ImageRecordReader.initialize: '.*file.png' "
                                                 r"is a file, not a folder$"):
        reader.initialize(tmp_path / "file.png")
    empty = tmp_path / "empty"
    (empty / "cls").mkdir(parents=True)
    (empty / "cls" / "readme.txt").write_text("no images here")
    with pytest.raises(ValueError, match=r"^ImageRecordReader.initialize: no image files "
                                         r"\(.bmp, .jpeg, .jpg, .png, "
                                         r".tif, .tiff\) under '.*empty'$"):
        reader.initialize(empty)
    with pytest.raises(TypeError, match=r"^ImageRecordReader.initialize: path must be a folder "
                                        r"\(str or os.PathLike\), got int 3$"):
        reader.initialize(3)
    with pytest.raises(RuntimeError, match=r"call initialize\(folder\) before reading"):
        ImageRecordReader(3, 3).next()
    for args, kw, exc, msg in [
            ((0, 3), {}, ValueError, r"^height must be >= 1, got 0$"),
            ((3, 3.5), {}, TypeError, r"^width must be an int, got float 3.5$"),
            ((3, 3, 2), {}, ValueError, r"^channels must be 1 \(grey\), 3 \(RGB\) or 4 "
                                        r"\(RGBA\), got 2$"),
            ((3, 3, True), {}, TypeError, r"^channels must be an int"),
            ((3, 3), {"label_generator": "parent"}, TypeError,
             r"^label_generator must have get_label_for_path\(path\)"),
            ((3, 3), {"nchw_channels_first": 1}, TypeError,
             r"^nchw_channels_first must be a bool, got 1$")]:
        with pytest.raises(exc, match=msg):
            ImageRecordReader(*args, **kw)


def test_pillow_missing_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)          # import PIL -> ImportError
    with pytest.raises(ImportError, match=r"pip install 'ndws\[image\]'"):
        ImageRecordReader(3, 3)


def test_scaler_sharding_and_reset(folder):
    root, made = folder
    reader = ImageRecordReader(6, 5, 3)
    reader.initialize(root)
    it = RecordReaderDataSetIterator(reader, 3, 1, 3)
    it.pre_processor = ImagePreProcessingScaler()
    b = it.next()
    assert 0.0 <= float(b.features.numpy().min()) and float(b.features.numpy().max()) <= 1.0
    np.testing.assert_allclose(b.features.numpy()[1], made["cat/a.png"].transpose(2, 0, 1) / 255,
                               rtol=1e-6)
    # two shards of a batch of 2 (global 4 then 0): disjoint, each (n, 3, 6, 5)
    it.pre_processor = None
    whole = RecordReaderDataSetIterator(reader, 2, 1, 3)
    parts = [whole.shard(r, 2) for r in (0, 1)]
    got = [[b.features.numpy() for b in p] for p in parts]
    assert [[a.shape for a in g] for g in got] == [[(2, 3, 6, 5)], [(2, 3, 6, 5)]]
    order = ["bird/nested/z.png", "cat/a.png", "cat/b.png", "dog/x.PNG"]
    np.testing.assert_array_equal(np.concatenate([got[0][0], got[1][0]]),
                                  np.stack([made[n].transpose(2, 0, 1) for n in order]))
    assert [b.features.shape for b in whole] == [(2, 3, 6, 5)] * 2   # still usable


class _Arrays(RecordReader):
    # a custom reader of array records (the record contract the image reader uses)
    def __init__(self, records):
        self.items = records

    def _records(self):
        for i, r in enumerate(self.items):
            yield r, "mem", i + 1


def test_array_records_contract():
    ok = _Arrays([[np.ones((2, 2)), 1.0], [np.zeros((2, 2)), 0.0]])
    ds = next(iter(RecordReaderDataSetIterator(ok, 5, 1, 2)))
    assert ds.features.shape == (2, 2, 2) and ds.labels.numpy().tolist() == [[0, 1], [1, 0]]
    reg = next(iter(RecordReaderDataSetIterator(_Arrays([[np.ones(3), 0.5]]), 5, 1,
                                                regression=True)))
    assert reg.labels.numpy().tolist() == [[0.5]]
    ragged = _Arrays([[np.ones((2, 2)), 1.0], [np.ones((3, 2)), 0.0]])
    with pytest.raises(ValueError, match=r"^mem:2: records' arrays must all have one shape: "
                                         r"\(2, 2\) first, then \(3, 2\)$"):
        next(iter(RecordReaderDataSetIterator(ragged, 5, 1, 2)))
    mixed = _Arrays([[np.ones(2), 3.0, 1.0]])
    with pytest.raises(ValueError, match=r"^mem:1: a record holding an array must hold that "
                                         r"array and the label column\(s\) only"):
        next(iter(RecordReaderDataSetIterator(mixed, 5, 2, 2)))
    bad_label = _Arrays([[np.ones(2), 2.0]])
    with pytest.raises(ValueError, match=r"^mem:1: label 2.0 in column index 1 is not a class "
                                         r"index in \[0, 2\)$"):
        next(iter(RecordReaderDataSetIterator(bad_label, 5, 1, 2)))
    # the MultiDataSet iterator takes numbers only, and says so
    multi = RecordReaderMultiDataSetIterator({"img": _Arrays([[np.ones(2), 1.0]])}, 2,
                                             inputs=["img"])
    with pytest.raises(ValueError, match=r"^mem:1: reader 'img' gives records holding an array "
                                         r"\(an image reader's\); RecordReaderMultiDataSetIterator "
                                         r"takes records of numbers: use "
                                         r"RecordReaderDataSetIterator$"):
        multi.next()
