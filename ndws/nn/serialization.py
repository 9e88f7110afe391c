"""Saving and loading networks: a zip of the configuration (JSON), the flat parameters and the
flat updater state (``.npy``, read with ``allow_pickle=False``) and the training counters with
the dropout generator's state (JSON); on request, the state the recurrent layers carry between
``rnn_time_step`` calls (one ``.npy`` per layer and key). Loading runs no code: no pickle, no
import by name.

`MultiLayerNetwork.save` / `MultiLayerNetwork.load` (and `ComputationGraph`'s, the same format)
are the entry points; a network loaded with its updater continues training exactly as the
uninterrupted one would, bit for bit. The configuration's "format" says which type of network a
file holds: loading it as the other type is refused with that type's name.
"""
from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile
from typing import Any

import numpy as np

from ndws._fileio import Archive
from ndws.nn.layers.wrappers import Bidirectional, _Wrapper

__all__ = ["save_network", "load_network"]

#: entries of the zip
CONFIGURATION = "configuration.json"
COEFFICIENTS = "coefficients.npy"
UPDATER_STATE = "updater_state.npy"
TRAINING_STATE = "training_state.json"
#: the carried state of recurrent layer i under key k: RNN_STATE + f"{i}/{k}.npy"
RNN_STATE = "rnn_state/"
FORMAT_VERSION = 1
#: the network type each configuration format belongs to
_NETWORKS = {"ndws.MultiLayerConfiguration": "MultiLayerNetwork",
             "ndws.ComputationGraphConfiguration": "ComputationGraph"}


def _npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


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
        for owner, (_, layer) in net._state_layers().items():
            if _keeps_state(layer):
                for key, value in layer.rnn_get_previous_state().items():
                    entries[f"{RNN_STATE}{owner}/{key}.npy"] = _npy_bytes(value.numpy())
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


#: the most bytes a configuration.json may hold (a thousand-layer configuration is a few
#: hundred KiB) and a training_state.json (a few hundred bytes)
MAX_CONFIGURATION_BYTES = 16 << 20
MAX_TRAINING_STATE_BYTES = 1 << 20
_STATE_KEYS = {"format_version", "iteration", "epoch", "score", "dropout_rng",
               "has_updater_state"}


def _training_state(z: Archive) -> dict:
    """training_state.json, every field checked for type and range (nothing is set yet)."""
    state = z.read_json(TRAINING_STATE, MAX_TRAINING_STATE_BYTES)
    if not isinstance(state, dict):
        raise z.error(TRAINING_STATE, f"expected a JSON object, got {type(state).__name__}")
    version = state.get("format_version")
    if type(version) is not int or version != FORMAT_VERSION:
        raise z.error(TRAINING_STATE, f"unsupported format (format_version {version!r:.40}; "
                                      f"this ndws reads {FORMAT_VERSION})")
    unknown = set(state) - _STATE_KEYS
    missing = _STATE_KEYS - set(state)
    if unknown or missing:
        raise z.error(TRAINING_STATE, f"unexpected fields {sorted(unknown)}, missing fields "
                                      f"{sorted(missing)}")
    for key in ("iteration", "epoch"):
        v = state[key]
        if type(v) is not int or not 0 <= v < 2**63:
            raise z.error(TRAINING_STATE, f"{key}: expected an int in [0, 2**63), got "
                                          f"{v!r:.40}")
    score = state["score"]
    if score is not None and type(score) not in (int, float):
        raise z.error(TRAINING_STATE, f"score: expected a number or null, got {score!r:.40}")
    if not isinstance(state["has_updater_state"], bool):
        raise z.error(TRAINING_STATE, f"has_updater_state: expected true or false, got "
                                      f"{state['has_updater_state']!r:.40}")
    try:
        # on a generator of its own: the network's is set only once everything checked out
        np.random.PCG64().state = _pcg64_state(state["dropout_rng"])
    except (TypeError, ValueError, KeyError, OverflowError) as exc:
        raise z.error(TRAINING_STATE, f"dropout_rng: not a PCG64 state ({exc})") from None
    return state


def _pcg64_state(s: Any) -> dict:
    # NumPy's setter masks or wraps some out-of-range values instead of refusing them
    if not isinstance(s, dict) or set(s) != {"bit_generator", "state", "has_uint32",
                                             "uinteger"}:
        raise ValueError(f"expected bit_generator, state, has_uint32, uinteger, got {s!r:.60}")
    inner = s["state"]
    if s["bit_generator"] != "PCG64" or not isinstance(inner, dict) or set(inner) != {"state",
                                                                                       "inc"}:
        raise ValueError(f"expected a PCG64 state, got {s!r:.60}")
    for key, v, hi in (("state", inner["state"], 2**128), ("inc", inner["inc"], 2**128),
                       ("has_uint32", s["has_uint32"], 2), ("uinteger", s["uinteger"], 2**32)):
        if type(v) is not int or not 0 <= v < hi:
            raise ValueError(f"{key}: expected an int in [0, {hi}), got {v!r:.40}")
    return s


def _sizes(conf: Any) -> tuple[int, int]:
    """The configuration's parameter count and updater-state length, from its layers' (and
    vertices') shapes alone (in Python ints: no array is made, nothing can overflow)."""
    n_params = n_state = 0
    for where, layer in conf._param_owners():
        for name, shape in layer.param_shapes().items():
            if not isinstance(shape, tuple) or not all(
                    type(d) is int and d >= 0 for d in shape):
                raise ValueError(f"{where}: parameter {name!r} has shape {shape!r:.40}, "
                                 f"not a tuple of sizes")
            size = 1
            for d in shape:
                size *= d
            n_params += size
            if layer.trainable(name):
                n_state += size * (layer.updater or conf.updater).n_state
    return n_params, n_state


def _vector(z: Archive, name: str, n: int, dtype: np.dtype, needs: str) -> tuple:
    # the .npy header of `name`, which must be a flat vector of n values of `dtype`
    header = z.npy_header(name)
    if header[0] != dtype or header[1] != (n,):
        raise ValueError(f"{z.path}: {name} holds {header[0]} {header[1]}, {needs} "
                         f"{dtype} ({n},)")
    return header


def _keeps_state(layer: Any) -> bool:
    # a recurrent layer (or wrappers of one) with rnn_time_step state: none with a
    # Bidirectional anywhere in the nesting (it refuses stepping)
    while isinstance(layer, _Wrapper):
        if isinstance(layer, Bidirectional):
            return False
        layer = layer.layer
    return hasattr(layer, "state_keys")


def _rnn_state_headers(z: Archive, conf: Any) -> dict:
    # the .npy headers of the saved carried state, checked against the configuration: a
    # recurrent layer's keys, its dtype, (n, n_out) with one n for the layer's keys (nothing
    # read yet). Layers may hold states of different n (rnn_set_previous_state sets each
    # alone), and n may be 0 (a step of 0 rows): what save wrote, load reads. Entries are
    # rnn_state/<owner>/<key>.npy, <owner> a layer index of a MultiLayerNetwork, a vertex
    # name of a ComputationGraph (conf._state_layers())
    headers: dict[Any, dict] = {}
    rows: dict[Any, int] = {}
    owners = conf._state_layers()
    for name in sorted(n for n in z.names if n.startswith(RNN_STATE)):
        owner, _, file = name[len(RNN_STATE):].rpartition("/")
        key = file[:-4] if file.endswith(".npy") else ""
        index, layer = owners.get(owner, (None, None))
        if layer is None or not _keeps_state(layer) or key not in layer.state_keys:
            raise z.error(name, "names no state of a recurrent layer of the configuration")
        header = z.npy_header(name, "f")
        n = header[1][0] if len(header[1]) == 2 else -1
        if header[0] != conf.dtype or header[1] != (n, layer.n_out) or n < 0 or \
                rows.setdefault(index, n) != n:
            raise z.error(name, f"holds {header[0]} {header[1]}, the layer's state is "
                                f"{conf.dtype} (n_samples, {layer.n_out}) with one n_samples for "
                                f"all its arrays")
        headers.setdefault(index, {})[key] = (name, header)
    layers = {index: layer for index, layer in owners.values()}
    for index, keys in headers.items():
        if set(keys) != set(layers[index].state_keys):
            raise z.error(RNN_STATE, f"layer {index}'s state needs "
                                     f"{sorted(layers[index].state_keys)}, the file holds "
                                     f"{sorted(keys)}")
    return headers


def load_network(cls: type, path: Any, load_updater: bool = True) -> Any:
    """Read a network written by `save_network`; ValueError naming the file and the entry for
    anything else (not a zip, truncated, entries missing, malformed or out of range, arrays
    that do not fit the configuration).

    Everything is checked before anything is allocated: the configuration's parameter count
    and updater-state length (from its layers' shapes) against the .npy headers, each entry's
    declared size against its compressed size and the archive (`ndws._fileio`); then the two
    arrays are read, and the network is built on the loaded parameters (none are drawn)."""
    if not isinstance(load_updater, bool):
        raise TypeError(f"load_updater: expected a bool, got {type(load_updater).__name__}")
    path = _path(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"path: {path!r} is a directory, not a saved network")
    if not os.path.exists(path):
        raise FileNotFoundError(f"path: no such file: {path!r}")
    with Archive(path, "an ndws network file") as z:
        for required in (CONFIGURATION, COEFFICIENTS, TRAINING_STATE):
            z.require(required)
        data = z.read_json(CONFIGURATION, MAX_CONFIGURATION_BYTES)
        held = _NETWORKS.get(data.get("format")) if isinstance(data, dict) else None
        if held is not None and held != cls._kind:
            raise z.error(CONFIGURATION, f"holds a {held}, not a {cls._kind}: load it with "
                                         f"{held}.load")
        try:
            conf = cls._conf_class.from_dict(data)
            n_params, n_state = _sizes(conf)
        except (TypeError, ValueError, RecursionError) as exc:
            raise z.error(CONFIGURATION, str(exc)) from None
        state = _training_state(z)
        with_updater = load_updater and state["has_updater_state"]
        dt = conf.dtype
        params_header = _vector(z, COEFFICIENTS, n_params, dt, "the configuration needs")
        updater_header = (_vector(z, UPDATER_STATE, n_state, dt,
                                  "the configuration's updaters need")
                          if with_updater else None)
        rnn_headers = _rnn_state_headers(z, conf)
        # everything agrees: now allocate
        params = z.read_npy(COEFFICIENTS, params_header)
        updater = z.read_npy(UPDATER_STATE, updater_header) if with_updater else None
        rnn_state = {i: {k: z.read_npy(name, header) for k, (name, header) in keys.items()}
                     for i, keys in rnn_headers.items()}
    try:
        net = cls(conf)
        net.init(params)
    except MemoryError as exc:
        raise ValueError(f"{path}: {CONFIGURATION}: a network of {n_params} parameters does "
                         f"not fit in memory ({exc})") from None
    if updater is not None:
        net._set_updater_state_flat(updater, f"{path}: {UPDATER_STATE}")
    for index, layer_state in rnn_state.items():
        try:
            net.rnn_set_previous_state(index, layer_state)
        except (TypeError, ValueError) as exc:            # NaN in it
            raise ValueError(f"{path}: {RNN_STATE}{index}: {exc}") from None
    net.iteration = state["iteration"]
    net.epoch = state["epoch"]
    net._dropout_rng.bit_generator.state = state["dropout_rng"]
    score = state["score"]
    net._score = float("nan") if score is None else float(score)
    return net
