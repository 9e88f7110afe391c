"""Normalizers: DataSet pre-processors fitted on data (DL4J's ``NormalizerStandardize``,
``NormalizerMinMaxScaler``, ``ImagePreProcessingScaler``).

Fit on an iterator (one pass) or a DataSet, then set as the iterator's ``pre_processor`` so
every batch is transformed in place; ``revert`` undoes the transform:

>>> import numpy as np
>>> from ndws.data.dataset import DataSet
>>> from ndws.data.normalizers import NormalizerStandardize
>>> ds = DataSet(np.array([[1.0, 10.0], [3.0, 10.0]], dtype=np.float32),
...              np.array([[1.0], [0.0]], dtype=np.float32))
>>> norm = NormalizerStandardize()
>>> norm.fit(ds)
>>> norm.mean.tolist(), norm.std.tolist()
([2.0, 10.0], [1.0, 0.0])
>>> norm.transform(ds)
>>> ds.features.numpy().tolist()
[[-1.0, 0.0], [1.0, 0.0]]
>>> norm.revert(ds)
>>> ds.features.numpy().tolist()
[[1.0, 10.0], [3.0, 10.0]]

Statistics are per feature: per column for ``(n, features)`` arrays, per feature over examples
and *unmasked* time steps for time series ``(n, features, time)`` (the mask is ``(n, time)``),
per channel for images ``(n, channels, h, w)``. As in DL4J, masked time steps are set to zero
by ``transform`` and ``revert``.
"""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

import ndws
from ndws._fileio import Archive
from ndws.data.dataset import DataSet

__all__ = [
    "NormalizerStandardize",
    "NormalizerMinMaxScaler",
    "ImagePreProcessingScaler",
    "EPS_THRESHOLD",
]

#: Nd4j.EPS_THRESHOLD: a standard deviation or a min-max range below this is replaced by it, so
#: a constant feature is shifted but never divided by zero (DL4J's StandardizeStrategy and
#: MinMaxStrategy do the same)
EPS_THRESHOLD = 1e-5

_FORMAT = "ndws-normalizer-1"


def _samples(arr: Any, mask: Any, name: str) -> np.ndarray:
    """The values of `arr` as a ``(n_samples, n_features) float64`` table: rows are examples
    (rank 2), unmasked (example, time) steps (rank 3), or (example, pixel) positions per
    channel (rank 4)."""
    x = arr.numpy().astype(np.float64, copy=False)
    if x.ndim == 2:
        if mask is not None:
            m = mask.numpy()
            if m.shape[1] == 1:  # one mask value per example
                x = x[m[:, 0] != 0]
            # a per-value (n, features) mask on tabular data has no DL4J meaning for stats
        return x
    if x.ndim == 3:
        table = x.transpose(0, 2, 1).reshape(-1, x.shape[1])
        if mask is not None:
            table = table[mask.numpy().reshape(-1) != 0]
        return table
    if x.ndim == 4:
        return x.transpose(0, 2, 3, 1).reshape(-1, x.shape[1])
    raise ValueError(f"{name} must have rank 2, 3 (time series) or 4 (images), got shape "
                     f"{tuple(arr.shape)}")


def _bshape(arr: Any, n: int, name: str, what: str) -> tuple[int, ...]:
    """Shape that broadcasts a per-feature vector of length n against `arr`."""
    if arr.ndim not in (2, 3, 4):
        raise ValueError(f"{name} must have rank 2, 3 (time series) or 4 (images), got shape "
                         f"{tuple(arr.shape)}")
    if arr.shape[1] != n:
        raise ValueError(f"{name} has {arr.shape[1]} features (axis 1 of shape "
                         f"{tuple(arr.shape)}), but the normalizer was fitted on {n} {what}")
    return (1, n) + (1,) * (arr.ndim - 2)


def _apply(ds: DataSet, attr: str, mask_attr: str, fn: Any) -> None:
    """Replace ``ds.<attr>`` by ``fn(arr)`` in place when it is a float array (no new batch
    memory: a ring-allocated batch stays in its ring), otherwise by a new float32 array; then
    zero the masked time steps, as DL4J does."""
    arr = getattr(ds, attr)
    if arr is None:
        return
    if arr.dtype.kind != "f":
        arr = ndws.asarray(arr.numpy().astype(np.float32))
        setattr(ds, attr, arr)
    fn(arr)
    mask = getattr(ds, mask_attr)
    if mask is not None and arr.ndim == 3:
        arr *= (mask.numpy() != 0).astype(arr.dtype).reshape(arr.shape[0], 1, arr.shape[2])


def _check_target(ds: DataSet, attr: str, mask_attr: str, width: int | None, op: str) -> None:
    """Raise unless ``ds.<attr>`` (and its mask) can be transformed in place by `_apply`."""
    arr = getattr(ds, attr)
    if arr is None:
        return
    ndws._core.check(arr, op, attr)
    mask = getattr(ds, mask_attr)
    if mask is not None:
        ndws._core.check(mask, op, mask_attr)
    if width is not None:
        _bshape(arr, width, attr, "features")
    if arr.dtype.kind == "f" and not arr.flags.writeable:
        raise ValueError(f"{attr}: the array is read-only, and the normalizer works in place; "
                         f"pass a writable copy (e.g. ds.{attr} = ds.{attr}.copy())")


def _check_dataset(ds: Any, name: str = "ds") -> DataSet:
    if not isinstance(ds, DataSet):
        raise TypeError(f"{name} must be a DataSet, got {type(ds).__name__}")
    return ds


class _Normalizer:
    """Shared fit/transform/save machinery. Subclasses define the statistics they gather
    (`_Stats`), `_forward(arr, stats)` and `_inverse(arr, stats)`."""

    _kind = ""
    _stat_names: tuple[str, ...] = ()

    def __init__(self, fit_label: bool = False) -> None:
        if not isinstance(fit_label, bool):
            raise TypeError(f"fit_label must be a bool, got {fit_label!r}")
        self.fit_label = fit_label
        self._features: dict[str, np.ndarray] | None = None
        self._labels: dict[str, np.ndarray] | None = None

    # -- statistics ------------------------------------------------------------------------
    @staticmethod
    def _new_acc() -> dict[str, Any]:
        raise NotImplementedError

    @staticmethod
    def _accumulate(acc: dict[str, Any], table: np.ndarray) -> None:
        raise NotImplementedError

    @staticmethod
    def _finish(acc: dict[str, Any]) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _add(self, accs: list[Any], ds: DataSet) -> None:
        _check_dataset(ds)
        parts = [("features", ds.features, ds.features_mask)]
        if self.fit_label:
            if ds.labels is None:
                raise ValueError("fit_label=True but a DataSet has no labels")
            parts.append(("labels", ds.labels, ds.labels_mask))
        for i, (name, arr, mask) in enumerate(parts):
            table = _samples(arr, mask, name)
            if accs[i] is None:
                accs[i] = self._new_acc()
                accs[i]["n_features"] = table.shape[1]
            elif accs[i]["n_features"] != table.shape[1]:
                raise ValueError(f"{name} of the DataSets have different numbers of features: "
                                 f"{accs[i]['n_features']} and {table.shape[1]}")
            self._accumulate(accs[i], table)

    def fit(self, data: Any) -> None:
        """Gather the statistics from a DataSet, or from a DataSetIterator in one pass (the
        iterator is reset afterwards when it supports reset, ready for training)."""
        accs: list[Any] = [None, None]
        if isinstance(data, DataSet):
            self._add(accs, data)
        elif callable(getattr(data, "has_next", None)) and callable(getattr(data, "next", None)):
            for ds in data:
                self._add(accs, ds)
            if data.reset_supported():
                data.reset()
        else:
            raise TypeError(f"data must be a DataSet or a DataSetIterator, got "
                            f"{type(data).__name__}")
        if accs[0] is None or accs[0]["count"] == 0:
            raise ValueError("data holds no (unmasked) examples to fit on")
        if self.fit_label and accs[1]["count"] == 0:
            raise ValueError("data holds no (unmasked) label values to fit on")
        self._features = self._finish(accs[0])
        self._labels = self._finish(accs[1]) if self.fit_label else None

    def is_fitted(self) -> bool:
        return self._features is not None

    def _stats(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None]:
        if self._features is None:
            raise RuntimeError(f"{type(self).__name__} has not been fitted: call fit() or "
                               f"load() first")
        return self._features, self._labels

    # -- transform -------------------------------------------------------------------------
    def _forward(self, arr: Any, stats: dict[str, np.ndarray], name: str) -> None:
        raise NotImplementedError

    def _inverse(self, arr: Any, stats: dict[str, np.ndarray], name: str) -> None:
        raise NotImplementedError

    def _in_place(self, ds: DataSet, fn: Any, op: str) -> None:
        # Check every array the transform will write (shape, writable, not stale) before
        # writing any: a failure on the labels must not leave the features transformed.
        _check_dataset(ds)
        feats, labs = self._stats()
        parts = [("features", "features_mask", feats)]
        if labs is not None:
            parts.append(("labels", "labels_mask", labs))
        for attr, mask_attr, stats in parts:
            _check_target(ds, attr, mask_attr, self._width(stats), op)
        for attr, mask_attr, stats in parts:
            _apply(ds, attr, mask_attr, lambda a, st=stats, name=attr: fn(a, st, name))

    @staticmethod
    def _width(stats: dict[str, np.ndarray]) -> int | None:
        # the number of features the statistics describe (None: no statistics)
        return next(iter(stats.values())).shape[0] if stats else None

    def transform(self, ds: DataSet) -> None:
        """Normalize `ds` in place (features, and labels when ``fit_label``). Every array is
        checked before any is written: an error leaves `ds` as it was."""
        self._in_place(ds, self._forward, "transform")

    def pre_process(self, ds: DataSet) -> None:
        """The DataSetPreProcessor hook: ``transform(ds)``."""
        self.transform(ds)

    def revert(self, ds: DataSet) -> None:
        """Undo ``transform`` on `ds` in place (features, and labels when ``fit_label``); like
        `transform`, all or nothing."""
        self._in_place(ds, self._inverse, "revert")

    def revert_features(self, features: Any) -> None:
        """Undo the transform on a features NDArray in place."""
        self._inverse(features, self._stats()[0], "features")

    def revert_labels(self, labels: Any) -> None:
        """Undo the label transform on a labels NDArray in place (e.g. a regression
        network's output); a no-op unless ``fit_label``."""
        labs = self._stats()[1]
        if labs is not None:
            self._inverse(labels, labs, "labels")

    # -- persistence -----------------------------------------------------------------------
    def _params(self) -> dict[str, Any]:
        return {"fit_label": self.fit_label}

    def save(self, path: Any) -> None:
        """Write the statistics and settings to `path` as an ``.npz`` file (exactly `path`:
        no suffix is added)."""
        feats, labs = self._stats()
        arrays = {f"features_{k}": v for k, v in feats.items()}
        if labs is not None:
            arrays.update({f"labels_{k}": v for k, v in labs.items()})
        meta = {"format": _FORMAT, "kind": self._kind, "params": self._params()}
        arrays["meta"] = np.array(json.dumps(meta))
        tmp = f"{os.fspath(path)}.tmp"
        # written under a temporary name, then renamed: never a half-written file at `path`
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Any) -> "_Normalizer":
        """A normalizer restored from a file written by ``save`` (of this class).

        Raises ``FileNotFoundError`` / ``IsADirectoryError`` for a path that is not a file, and
        ``ValueError`` naming the file (and the entry) for anything that is not a complete
        normalizer file of this class (truncated, another format, settings of the wrong type,
        missing or mis-shaped statistics). Every statistic's header is checked against the
        others before any is read (`ndws._fileio`); loading never runs code (no pickle)."""
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path: expected a str or os.PathLike, got {type(path).__name__}")
        name = os.fspath(path)
        if os.path.isdir(name):
            raise IsADirectoryError(f"path: {name!r} is a directory, not a normalizer file")
        if not os.path.exists(name):
            raise FileNotFoundError(f"path: no such file: {name!r}")
        what = "an ndws normalizer file, or not a complete one"
        with Archive(name, what) as z:
            meta = _read_meta(z)
            if meta.get("format") != _FORMAT or meta.get("kind") != cls._kind:
                raise _WrongKind(f"{name!r} holds a {meta.get('kind')!r:.40} normalizer, not "
                                 f"{cls._kind!r}")
            params = meta.get("params")
            if not isinstance(params, dict) or not all(isinstance(k, str) for k in params):
                raise z.error(_META, f"params: expected a JSON object, got {params!r:.40}")
            try:
                obj = cls(**params)
            except (TypeError, ValueError) as exc:
                raise z.error(_META, f"params: {exc}") from None
            groups = ["features"] + (["labels"] if obj.fit_label else [])
            headers = {}
            for group in groups:
                for stat in cls._stat_names:
                    entry = f"{group}_{stat}.npy"
                    h = z.npy_header(entry)
                    if h[0] != np.float64 or len(h[1]) != 1:
                        raise z.error(entry, f"holds {h[0]} {h[1]}, a statistic is a "
                                             f"(n_features,) float64 vector")
                    first = headers.get(group)
                    if first is not None and first[1][1] != h[1]:
                        raise z.error(entry, f"holds {h[1][0]} features, {first[0]} holds "
                                             f"{first[1][1][0]}")
                    headers.setdefault(group, (entry, h))
                    headers[group, stat] = (entry, h)
            stats = {group: {stat: z.read_npy(*headers[group, stat])
                             for stat in cls._stat_names} for group in groups}
        obj._features = stats["features"]
        if obj.fit_label:
            obj._labels = stats["labels"]
        return obj


#: the zip entry of the normalizer's kind and settings (np.savez's name for "meta")
_META = "meta.npy"
#: the most text the settings may be: a few settings, in JSON
_MAX_META_CHARS = 1 << 16


def _read_meta(z: Archive) -> dict:
    header = z.npy_header(_META, kinds="U")
    if header[1] != () or header[0].itemsize > 4 * _MAX_META_CHARS:
        raise z.error(_META, f"holds {header[0]} {header[1]}, not one text of at most "
                             f"{_MAX_META_CHARS} characters")
    text = str(z.read_npy(_META, header))
    try:
        meta = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise z.error(_META, f"not JSON text ({type(exc).__name__}: {exc})") from None
    if not isinstance(meta, dict):
        raise z.error(_META, f"expected a JSON object, got {type(meta).__name__}")
    return meta


class NormalizerStandardize(_Normalizer):
    """Zero mean, unit variance per feature: ``x' = (x - mean) / max(std, EPS_THRESHOLD)``.

    ``std`` is the population standard deviation (ND4J's ``var(biasCorrected=false)``),
    gathered in one pass with Chan's pairwise update in float64.

    Parameters
    ----------
    fit_label : bool
        Also standardize the labels (regression targets), as DL4J's ``fitLabel(true)``.
    """

    _kind = "standardize"
    _stat_names = ("mean", "std")

    @staticmethod
    def _new_acc() -> dict[str, Any]:
        return {"count": 0, "mean": 0.0, "m2": 0.0}

    @staticmethod
    def _accumulate(acc: dict[str, Any], table: np.ndarray) -> None:
        n_b = table.shape[0]
        if n_b == 0:
            return
        mean_b = table.mean(axis=0)
        m2_b = ((table - mean_b) ** 2).sum(axis=0)
        n_a = acc["count"]
        n = n_a + n_b
        delta = mean_b - acc["mean"]
        acc["mean"] = acc["mean"] + delta * (n_b / n)
        acc["m2"] = acc["m2"] + m2_b + delta ** 2 * (n_a * n_b / n)
        acc["count"] = n

    @staticmethod
    def _finish(acc: dict[str, Any]) -> dict[str, np.ndarray]:
        return {"mean": np.asarray(acc["mean"], dtype=np.float64),
                "std": np.sqrt(acc["m2"] / acc["count"])}

    @property
    def mean(self) -> np.ndarray:
        """``(n_features,) ndarray of float64``: the feature means."""
        return self._stats()[0]["mean"].copy()

    @property
    def std(self) -> np.ndarray:
        """``(n_features,) ndarray of float64``: the feature standard deviations (unclamped)."""
        return self._stats()[0]["std"].copy()

    @property
    def label_mean(self) -> np.ndarray | None:
        labs = self._stats()[1]
        return None if labs is None else labs["mean"].copy()

    @property
    def label_std(self) -> np.ndarray | None:
        labs = self._stats()[1]
        return None if labs is None else labs["std"].copy()

    def _forward(self, arr: Any, stats: dict[str, np.ndarray], name: str) -> None:
        shape = _bshape(arr, stats["mean"].shape[0], name, "features")
        arr -= stats["mean"].astype(arr.dtype).reshape(shape)
        arr /= np.maximum(stats["std"], EPS_THRESHOLD).astype(arr.dtype).reshape(shape)

    def _inverse(self, arr: Any, stats: dict[str, np.ndarray], name: str) -> None:
        shape = _bshape(arr, stats["mean"].shape[0], name, "features")
        arr *= np.maximum(stats["std"], EPS_THRESHOLD).astype(arr.dtype).reshape(shape)
        arr += stats["mean"].astype(arr.dtype).reshape(shape)


class NormalizerMinMaxScaler(_Normalizer):
    """Scale each feature to ``[min_range, max_range]``:
    ``x' = (x - min) / max(max - min, EPS_THRESHOLD) * (max_range - min_range) + min_range``.

    Parameters
    ----------
    min_range, max_range : float
        The target range (``min_range < max_range``).
    fit_label : bool
        Also scale the labels, as DL4J's ``fitLabel(true)``.
    """

    _kind = "minmax"
    _stat_names = ("min", "max")

    def __init__(self, min_range: float = 0.0, max_range: float = 1.0,
                 fit_label: bool = False) -> None:
        super().__init__(fit_label)
        self.min_range, self.max_range = _check_range(min_range, max_range)

    def _params(self) -> dict[str, Any]:
        return {"min_range": self.min_range, "max_range": self.max_range,
                "fit_label": self.fit_label}

    @staticmethod
    def _new_acc() -> dict[str, Any]:
        return {"count": 0, "min": np.inf, "max": -np.inf}

    @staticmethod
    def _accumulate(acc: dict[str, Any], table: np.ndarray) -> None:
        if table.shape[0] == 0:
            return
        acc["min"] = np.minimum(acc["min"], table.min(axis=0))
        acc["max"] = np.maximum(acc["max"], table.max(axis=0))
        acc["count"] += table.shape[0]

    @staticmethod
    def _finish(acc: dict[str, Any]) -> dict[str, np.ndarray]:
        return {"min": np.asarray(acc["min"], dtype=np.float64),
                "max": np.asarray(acc["max"], dtype=np.float64)}

    @property
    def min(self) -> np.ndarray:
        """``(n_features,) ndarray of float64``: the feature minima."""
        return self._stats()[0]["min"].copy()

    @property
    def max(self) -> np.ndarray:
        """``(n_features,) ndarray of float64``: the feature maxima."""
        return self._stats()[0]["max"].copy()

    def _scale(self, stats: dict[str, np.ndarray]) -> np.ndarray:
        return ((self.max_range - self.min_range)
                / np.maximum(stats["max"] - stats["min"], EPS_THRESHOLD))

    def _forward(self, arr: Any, stats: dict[str, np.ndarray], name: str) -> None:
        shape = _bshape(arr, stats["min"].shape[0], name, "features")
        arr -= stats["min"].astype(arr.dtype).reshape(shape)
        arr *= self._scale(stats).astype(arr.dtype).reshape(shape)
        if self.min_range != 0:
            arr += arr.dtype.type(self.min_range)

    def _inverse(self, arr: Any, stats: dict[str, np.ndarray], name: str) -> None:
        shape = _bshape(arr, stats["min"].shape[0], name, "features")
        if self.min_range != 0:
            arr -= arr.dtype.type(self.min_range)
        arr /= self._scale(stats).astype(arr.dtype).reshape(shape)
        arr += stats["min"].astype(arr.dtype).reshape(shape)


class _WrongKind(ValueError):
    pass


def _check_range(min_range: Any, max_range: Any) -> tuple[float, float]:
    for name, v in (("min_range", min_range), ("max_range", max_range)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name} must be a number, got {v!r}")
        try:
            finite = np.isfinite(float(v))
        except OverflowError:             # a Python int beyond any double
            finite = False
        if not finite:
            raise ValueError(f"{name} must be finite, got {v!r:.40}")
    if not min_range < max_range:
        raise ValueError(f"min_range must be < max_range, got min_range={min_range!r}, "
                         f"max_range={max_range!r}")
    return float(min_range), float(max_range)


class ImagePreProcessingScaler(_Normalizer):
    """Scale pixel values from ``[0, 2**max_bits - 1]`` to ``[min_range, max_range]``:
    ``x' = x / (2**max_bits - 1) * (max_range - min_range) + min_range``.

    Needs no statistics: ``fit`` is accepted (and ignored), as in DL4J. Labels are never
    touched. Integer features (e.g. uint8 images) are replaced by float32 arrays.

    Parameters
    ----------
    min_range, max_range : float
        The target range.
    max_bits : int
        Bits per pixel value (8: values 0..255).
    """

    _kind = "image"

    def __init__(self, min_range: float = 0.0, max_range: float = 1.0,
                 max_bits: int = 8) -> None:
        super().__init__(False)
        self.min_range, self.max_range = _check_range(min_range, max_range)
        if isinstance(max_bits, bool) or not isinstance(max_bits, (int, np.integer)):
            raise TypeError(f"max_bits must be an int, got {max_bits!r}")
        if not 1 <= max_bits <= 32:
            raise ValueError(f"max_bits must be in [1, 32], got {max_bits!r}")
        self.max_bits = int(max_bits)
        self._features = {}

    @property
    def max_pixel_value(self) -> float:
        return float(2 ** self.max_bits - 1)

    def _params(self) -> dict[str, Any]:
        return {"min_range": self.min_range, "max_range": self.max_range,
                "max_bits": self.max_bits}

    def fit(self, data: Any) -> None:
        """No statistics to gather (DL4J's ImagePreProcessingScaler.fit is a no-op too)."""
        if not isinstance(data, DataSet) and not callable(getattr(data, "next", None)):
            raise TypeError(f"data must be a DataSet or a DataSetIterator, got "
                            f"{type(data).__name__}")

    def _factor(self) -> float:
        return (self.max_range - self.min_range) / self.max_pixel_value

    def _forward(self, arr: Any, stats: dict[str, np.ndarray], name: str) -> None:
        arr *= arr.dtype.type(self._factor())
        if self.min_range != 0:
            arr += arr.dtype.type(self.min_range)

    def _inverse(self, arr: Any, stats: dict[str, np.ndarray], name: str) -> None:
        if self.min_range != 0:
            arr -= arr.dtype.type(self.min_range)
        arr /= arr.dtype.type(self._factor())

    @classmethod
    def load(cls, path: Any) -> "ImagePreProcessingScaler":
        """A scaler restored from a file written by ``save``."""
        obj = super().load(path)
        obj._features = {}
        return obj  # type: ignore[return-value]
