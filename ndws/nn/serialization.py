"""Saving and loading networks: a zip of the configuration (JSON), the flat parameters and the
flat updater state (``.npy``, read with ``allow_pickle=False``) and the training counters with
the dropout generator's state (JSON); on request, the state the recurrent layers carry between
``rnn_time_step`` calls (``.npz``, also read without pickle). Loading runs no code: no pickle,
no import by name.

`MultiLayerNetwork.save` / `MultiLayerNetwork.load` are the entry points; a network loaded with
its updater continues training exactly as the uninterrupted one would, bit for bit.
"""
from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile
from typing import Any

import numpy as np

from ndws.nn.conf import MultiLayerConfiguration

__all__ = ["save_network", "load_network"]

#: entries of the zip
CONFIGURATION = "configuration.json"
COEFFICIENTS = "coefficients.npy"
UPDATER_STATE = "updater_state.npy"
TRAINING_STATE = "training_state.json"
RNN_STATE = "rnn_state.npz"
FORMAT_VERSION = 1


def _npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def _rnn_state_bytes(net: Any) -> bytes:
    # every recurrent layer's carried state as arrays "<layer index>/<key>" of an .npz
    arrays = {}
    for layer in net.layers:
        if hasattr(layer, "rnn_get_previous_state"):
            try:
                state = layer.rnn_get_previous_state()
            except ValueError:              # Bidirectional: no state of its own
                continue
            for key, value in state.items():
                arrays[f"{layer.index}/{key}"] = value.numpy()
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _load_rnn_state(net: Any, z: zipfile.ZipFile, path: str) -> None:
    try:
        with z.open(RNN_STATE) as f:
            data = np.load(io.BytesIO(f.read()), allow_pickle=False)
            arrays = {k: data[k] for k in data.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise ValueError(f"{path}: {RNN_STATE} is malformed ({exc})") from None
    per_layer: dict[int, dict] = {}
    for name, value in arrays.items():
        index, _, key = name.partition("/")
        if not index.isdigit() or int(index) >= len(net.layers):
            raise ValueError(f"{path}: {RNN_STATE}: {name!r} names no layer")
        per_layer.setdefault(int(index), {})[key] = value
    for index, state in per_layer.items():
        try:
            net.rnn_set_previous_state(index, state)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}: {RNN_STATE}: {exc}") from None


def save_network(net: Any, path: Any, save_updater: bool = True,
                 save_rnn_state: bool = False) -> None:
    """Write `net` to `path` (a new file, or one replaced whole: the zip is written next to it
    and renamed, so a failure leaves the old file as it was)."""
    if not isinstance(save_updater, bool):
        raise TypeError(f"save_updater: expected a bool, got {type(save_updater).__name__}")
    if not isinstance(save_rnn_state, bool):
        raise TypeError(f"save_rnn_state: expected a bool, got {type(save_rnn_state).__name__}")
    path = _path(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"path: {path!r} is a directory")
    state = {"format_version": FORMAT_VERSION, "iteration": net.iteration, "epoch": net.epoch,
             "score": None if net.score() != net.score() else net.score(),
             "dropout_rng": net._dropout_rng.bit_generator.state,
             "has_updater_state": save_updater}
    entries = {CONFIGURATION: net.conf.to_json().encode(),
               COEFFICIENTS: _npy_bytes(net.params().numpy()),
               TRAINING_STATE: json.dumps(state).encode()}
    if save_updater:
        entries[UPDATER_STATE] = _npy_bytes(net._updater_state_flat())
    if save_rnn_state:
        entries[RNN_STATE] = _rnn_state_bytes(net)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".ndws-save-", suffix=".zip", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
            for name, data in entries.items():
                z.writestr(name, data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _path(path: Any) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path: expected a str or os.PathLike, got {type(path).__name__}")
    return os.fspath(path)


def _read_npy(z: zipfile.ZipFile, name: str, path: str) -> np.ndarray:
    try:
        with z.open(name) as f:
            return np.lib.format.read_array(io.BytesIO(f.read()), allow_pickle=False)
    except KeyError:
        raise ValueError(f"{path}: not an ndws network file ({name} missing)") from None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path}: {name} is malformed ({exc})") from None


def load_network(cls: type, path: Any, load_updater: bool = True) -> Any:
    """Read a network written by `save_network`; ValueError naming what is wrong for anything
    else (not a zip, truncated, entries missing or malformed, arrays that do not fit the
    configuration)."""
    if not isinstance(load_updater, bool):
        raise TypeError(f"load_updater: expected a bool, got {type(load_updater).__name__}")
    path = _path(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"path: {path!r} is a directory, not a saved network")
    if not os.path.exists(path):
        raise FileNotFoundError(f"path: no such file: {path!r}")
    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ValueError(f"{path}: not an ndws network file (not a zip: {exc})") from None
    with z:
        names = set(z.namelist())
        for required in (CONFIGURATION, COEFFICIENTS, TRAINING_STATE):
            if required not in names:
                raise ValueError(f"{path}: not an ndws network file ({required} missing)")
        try:
            conf_text = z.read(CONFIGURATION)
            state = json.loads(z.read(TRAINING_STATE))
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
            raise ValueError(f"{path}: truncated or corrupt ({exc})") from None
        try:
            conf = MultiLayerConfiguration.from_json(conf_text)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}: {CONFIGURATION}: {exc}") from None
        if not isinstance(state, dict) or state.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{path}: {TRAINING_STATE}: unsupported format")
        params = _read_npy(z, COEFFICIENTS, path)
        updater = (_read_npy(z, UPDATER_STATE, path)
                   if load_updater and state.get("has_updater_state") else None)
        net = cls(conf)
        net.init()
        if RNN_STATE in names:
            _load_rnn_state(net, z, path)
    if params.shape != (net.num_params(),) or params.dtype != conf.dtype:
        raise ValueError(f"{path}: {COEFFICIENTS} holds {params.dtype} {params.shape}, the "
                         f"configuration needs {conf.dtype} ({net.num_params()},)")
    net.set_params(params)
    if updater is not None:
        net._set_updater_state_flat(updater, f"{path}: {UPDATER_STATE}")
    try:
        net.iteration = state["iteration"]
        net.epoch = state["epoch"]
        net._dropout_rng.bit_generator.state = state["dropout_rng"]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {TRAINING_STATE}: {exc}") from None
    score = state.get("score")
    net._score = float("nan") if score is None else float(score)
    return net
