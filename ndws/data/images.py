"""Images from a folder as records (DataVec's ``ImageRecordReader`` and
``ParentPathLabelGenerator``): each image decoded, converted to the channels asked and resized,
its label from the name of the folder it is in.

Pillow decodes the images; it is the optional ``image`` extra (``pip install 'ndws[image]'``),
imported only when a reader is made. A record is ``[image, label]``: the image a float32 array
``(channels, height, width)`` (``(height, width, channels)`` with
``nchw_channels_first=False``) of values in 0..255, the label the index of the class in the
sorted `ImageRecordReader.labels`. `RecordReaderDataSetIterator` stacks them into batches
``(n, channels, height, width)``; docs/data.md, "Images", shows it.
"""
from __future__ import annotations

import os
from typing import Any, Iterator

import numpy as np

from ndws.data.records import RecordReader, _check_int, folder_arg

__all__ = ["ImageRecordReader", "ParentPathLabelGenerator", "IMAGE_EXTENSIONS"]

#: the files a reader takes, by extension in any case (DataVec's ``BaseImageLoader``
#: formats, and ``.tiff``); other files in the folder are skipped
IMAGE_EXTENSIONS = (".bmp", ".jpeg", ".jpg", ".png", ".tif", ".tiff")

#: Pillow modes of one channel with more than 8 bits (16-bit PNG and TIFF): scaled to 0..255
_WIDE_GREY = {"I;16": 65535, "I;16L": 65535, "I;16B": 65535, "I;16N": 65535, "I": 65535}
_MODES = {1: "L", 3: "RGB", 4: "RGBA"}


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError:
        raise ImportError("ImageRecordReader needs Pillow to decode images: "
                          "pip install 'ndws[image]' (or pip install Pillow)") from None
    return Image


class ParentPathLabelGenerator:
    """The label of an image is the name of the folder it is in (DataVec's
    ``ParentPathLabelGenerator``): ``cats/001.png`` is a ``"cats"``.

    A label generator is any object with ``get_label_for_path(path) -> str``.
    """

    __slots__ = ()

    def get_label_for_path(self, path: str) -> str:
        """The name of the folder `path` is in."""
        return os.path.basename(os.path.dirname(os.path.abspath(path)))

    def __repr__(self) -> str:
        return "ParentPathLabelGenerator()"


class ImageRecordReader(RecordReader):
    """Images of a folder as records (DataVec's ``ImageRecordReader``).

    ``initialize(folder)`` lists the images under the folder (recursively, in sorted path
    order; files whose extension is not one of `IMAGE_EXTENSIONS`, and hidden files, are
    skipped) and, with a label generator, the classes: `labels` is their sorted list, and an
    image's label is its class's index in it. Each ``next()`` decodes one image (Pillow),
    converts it to `channels` (1 grey, 3 RGB, 4 RGBA: a palette image through RGBA, so its
    transparency is kept; an alpha channel dropped by converting to grey or RGB; 16-bit grey
    scaled by 255/65535) and resizes it to ``(height, width)`` (bilinear).

    Parameters
    ----------
    height, width : int
        The size every image is resized to (>= 1).
    channels : {1, 3, 4}
        Grey, RGB or RGBA.
    label_generator : object with ``get_label_for_path(path) -> str``, or None
        The class of each image (default: the name of its folder). None: records are
        ``[image]`` only, and images may sit directly in the folder.
    nchw_channels_first : bool
        True (default, DL4J's): images are ``(channels, height, width)`` and batches NCHW;
        False: ``(height, width, channels)`` and NHWC.

    Notes
    -----
    A file that Pillow cannot decode (not an image, truncated, unreadable) raises
    ``ValueError("<file>: cannot read the image: ...")`` from ``next()``; as with every record
    reader, the reader then stops until ``reset()``. Pillow's decompression-bomb limit applies
    (an image of more than about 179 million pixels is refused).
    """

    def __init__(self, height: int, width: int, channels: int = 1,
                 label_generator: Any = ParentPathLabelGenerator(),
                 nchw_channels_first: bool = True) -> None:
        self._image = _pillow()
        self.height = _check_int("height", height, 1)
        self.width = _check_int("width", width, 1)
        channels = _check_int("channels", channels, 1)
        if channels not in _MODES:
            raise ValueError(f"channels must be 1 (grey), 3 (RGB) or 4 (RGBA), got {channels}")
        self.channels = channels
        if label_generator is not None and not callable(
                getattr(label_generator, "get_label_for_path", None)):
            raise TypeError(f"label_generator must have get_label_for_path(path) (e.g. "
                            f"ParentPathLabelGenerator()) or be None, got "
                            f"{type(label_generator).__name__}")
        self.label_generator = label_generator
        if not isinstance(nchw_channels_first, bool):
            raise TypeError(f"nchw_channels_first must be a bool, got {nchw_channels_first!r}")
        self.nchw_channels_first = nchw_channels_first
        #: the class names, sorted (DL4J's getLabels()); empty before initialize()
        self.labels: list[str] = []
        #: fields per record: 2 ([image, label]) or 1 without a label generator; None before
        #: initialize()
        self.num_fields: int | None = None
        self.root: str | None = None
        self._files: list[str] = []
        self._classes: list[int] = []

    def __repr__(self) -> str:
        return (f"ImageRecordReader({self.height}, {self.width}, {self.channels}, "
                f"label_generator={self.label_generator!r}, "
                f"nchw_channels_first={self.nchw_channels_first})")

    # -- the folder ---------------------------------------------------------------------------
    def initialize(self, path: Any) -> None:
        """Read the folder `path` (DataVec's ``initialize(new FileSplit(path))``): its images
        and their classes. Raises ValueError for a folder without images and, with
        ParentPathLabelGenerator, for images directly in `path` (their class would be the
        folder itself); FileNotFoundError / NotADirectoryError for a path that is not a
        folder. Nothing changes when it raises."""
        root = folder_arg(path, "ImageRecordReader.initialize: ")
        files = []
        for folder, subfolders, names in os.walk(root):
            subfolders[:] = [d for d in subfolders if not d.startswith(".")]
            for name in names:
                if not name.startswith(".") and name.lower().endswith(IMAGE_EXTENSIONS):
                    files.append(os.path.join(folder, name))
        files.sort()
        if not files:
            raise ValueError(f"ImageRecordReader.initialize: no image files "
                             f"({', '.join(IMAGE_EXTENSIONS)}) under "
                             f"{root!r}")
        names: list[str] = []
        if self.label_generator is not None:
            top = [f for f in files if os.path.dirname(f) == os.path.normpath(root)]
            if top and isinstance(self.label_generator, ParentPathLabelGenerator):
                raise ValueError(
                    f"ImageRecordReader.initialize: {top[0]!r} is directly in the folder given: "
                    f"ParentPathLabelGenerator labels an image by the folder it is in, so put "
                    f"the images in one subfolder per class (or pass label_generator=None for "
                    f"unlabelled images)")
            for f in files:
                label = self.label_generator.get_label_for_path(f)
                if not isinstance(label, str):
                    raise TypeError(f"label_generator.get_label_for_path({f!r}) must return a "
                                    f"str, got {type(label).__name__}")
                names.append(label)
        self.labels = sorted(set(names))
        index = {label: i for i, label in enumerate(self.labels)}
        self._classes = [index[n] for n in names]
        self._files = files
        self.root = root
        self.num_fields = 2 if self.label_generator is not None else 1
        self.reset()

    @property
    def files(self) -> list[str]:
        """The image files, in the order they are read."""
        return list(self._files)

    def get_labels(self) -> list[str]:
        """The class names, sorted (DL4J's ``getLabels()``; also the `labels` attribute)."""
        return list(self.labels)

    # -- records ------------------------------------------------------------------------------
    def _records(self) -> Iterator[tuple[list[Any], str, None]]:
        if self.num_fields is None:
            raise RuntimeError("ImageRecordReader: call initialize(folder) before reading")
        for i, path in enumerate(self._files):
            image = self.load(path)
            record: list[Any] = [image]
            if self.label_generator is not None:
                record.append(float(self._classes[i]))
            yield record, path, None

    def load(self, path: str) -> np.ndarray:
        """One image file as this reader's array: float32 ``(channels, height, width)`` (or
        ``(height, width, channels)``), values 0..255. ValueError naming the file when it
        cannot be decoded."""
        Image = self._image
        try:
            with Image.open(path) as img:
                img.load()
                array = self._convert(img)
        except (OSError, EOFError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
            # Pillow's errors for what is not a decodable image: UnidentifiedImageError (an
            # OSError), a truncated file (OSError, EOFError), a corrupt header (SyntaxError,
            # ValueError), an unreadable file (PermissionError)
            raise ValueError(f"{path}: cannot read the image: {exc}") from None
        return array if not self.nchw_channels_first else np.ascontiguousarray(
            array.transpose(2, 0, 1))

    def _convert(self, img: Any) -> np.ndarray:
        # (height, width, channels) float32 in 0..255
        Image = self._image
        size = (self.width, self.height)
        if img.mode in _WIDE_GREY or img.mode == "F":
            # more than 8 bits of grey: scaled to 0..255 in float, resized in float ("F")
            grey = np.asarray(img, dtype=np.float32)
            if img.mode in _WIDE_GREY:
                grey = np.clip(grey, 0, _WIDE_GREY[img.mode]) * (255.0 / _WIDE_GREY[img.mode])
            grey = np.asarray(Image.fromarray(grey).resize(size, Image.Resampling.BILINEAR),
                              dtype=np.float32)
            out = np.empty((self.height, self.width, self.channels), dtype=np.float32)
            out[:, :, :min(self.channels, 3)] = grey[:, :, None]
            if self.channels == 4:
                out[:, :, 3] = 255.0
            return out
        if img.mode in ("P", "PA"):
            img = img.convert("RGBA")        # through RGBA: a transparent palette entry stays so
        img = img.convert(_MODES[self.channels]).resize(size, Image.Resampling.BILINEAR)
        out = np.asarray(img, dtype=np.float32)
        return out.reshape(self.height, self.width, self.channels)
