"""ndws.nn.serialization: MultiLayerNetwork.save / load, bit-exact resume, and files that are
missing, truncated, binary, a directory, or hold arrays that do not fit."""
import io
import json
import os
import zipfile

import numpy as np
import pytest

import ndws
from ndws.nn import Adam, DenseLayer, MultiLayerConfiguration, MultiLayerNetwork, OutputLayer


@pytest.fixture(autouse=True)
def _clean():
    yield
    ndws.destroy_all_workspaces_for_current_thread()


def make(mode="ENABLED", dtype="float32"):
    conf = MultiLayerConfiguration(
        [DenseLayer(n_in=6, n_out=7, activation="relu", dropout=0.8),
         OutputLayer(n_out=3, activation="softmax")], seed=4, updater=Adam(1e-2), dtype=dtype,
        training_workspace_mode=mode)
    net = MultiLayerNetwork(conf)
    net.init()
    return net


def data(rng):
    return rng.standard_normal((40, 6)).astype(np.float32), rng.integers(0, 3, 40)


@pytest.mark.parametrize("mode", ["NONE", "SINGLE", "SEPARATE", "ENABLED"])
def test_resume_continues_bit_for_bit(mode, rng, tmp_path):
    x, y = data(rng)
    a = make(mode)
    a.fit(x, y, batch_size=8, epochs=2)
    path = tmp_path / "net.zip"
    a.save(path)
    a.fit(x, y, batch_size=8, epochs=3)            # the uninterrupted run
    b = MultiLayerNetwork.load(path)
    assert (b.iteration, b.epoch) == (10, 2)
    b.fit(x, y, batch_size=8, epochs=3)
    np.testing.assert_array_equal(a.params().numpy(), b.params().numpy())
    np.testing.assert_array_equal(a._updater_state_flat(), b._updater_state_flat())
    assert (a.iteration, a.epoch, a.score()) == (b.iteration, b.epoch, b.score())
    assert b.conf == a.conf


def test_without_updater_state(rng, tmp_path):
    x, y = data(rng)
    a = make()
    a.fit(x, y, batch_size=8)
    a.save(tmp_path / "p.zip", save_updater=False)
    b = MultiLayerNetwork.load(tmp_path / "p.zip")
    np.testing.assert_array_equal(a.params().numpy(), b.params().numpy())
    assert not b._updater_state_flat().any()             # fresh Adam moments
    a.save(tmp_path / "u.zip")
    c = MultiLayerNetwork.load(tmp_path / "u.zip", load_updater=False)
    assert not c._updater_state_flat().any() and c.iteration == a.iteration
    with zipfile.ZipFile(tmp_path / "u.zip") as z:
        assert sorted(z.namelist()) == ["coefficients.npy", "configuration.json",
                                        "training_state.json", "updater_state.npy"]


def test_save_replaces_whole_and_leaves_no_temporary(rng, tmp_path):
    a = make()
    path = tmp_path / "net.zip"
    path.write_bytes(b"old")
    a.save(path)
    assert MultiLayerNetwork.load(path).num_params() == a.num_params()
    assert sorted(os.listdir(tmp_path)) == ["net.zip"]
    with pytest.raises(IsADirectoryError, match=r"^path: .* is a directory$"):
        a.save(tmp_path)
    with pytest.raises(FileNotFoundError):
        a.save(tmp_path / "missing_dir" / "net.zip")
    assert sorted(os.listdir(tmp_path)) == ["net.zip"]
    with pytest.raises(TypeError, match=r"^path: expected a str or os.PathLike, got int$"):
        a.save(3)
    with pytest.raises(TypeError, match=r"^save_updater: expected a bool"):
        a.save(path, save_updater="yes")


def _rewrite(src, dst, change):
    with zipfile.ZipFile(src) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    change(entries)
    with zipfile.ZipFile(dst, "w") as z:
        for n, d in entries.items():
            z.writestr(n, d)


def _npy(array):
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=True)
    return buf.getvalue()


@pytest.mark.parametrize("change, msg", [
    (lambda e: e.pop("configuration.json"), r"not an ndws network file \(configuration.json "
                                            r"missing\)$"),
    (lambda e: e.pop("coefficients.npy"), r"not an ndws network file \(coefficients.npy missing"),
    (lambda e: e.update({"configuration.json": b"{not json"}), r"configuration.json: "
                                                                r"configuration: not JSON text"),
    (lambda e: e.update({"training_state.json": b"\x00\x01"}), r"truncated or corrupt"),
    (lambda e: e.update({"coefficients.npy": _npy(np.zeros(5, np.float32))}),
     r"coefficients.npy holds float32 \(5,\), the configuration needs float32 \(73,\)"),
    (lambda e: e.update({"coefficients.npy": _npy(np.zeros(73, np.float64))}),
     r"coefficients.npy holds float64 \(73,\)"),
    (lambda e: e.update({"coefficients.npy": _npy(np.array([object()] * 73))}),
     r"coefficients.npy is malformed"),
    (lambda e: e.update({"coefficients.npy": b"garbage"}), r"coefficients.npy is malformed"),
    (lambda e: e.update({"updater_state.npy": _npy(np.zeros(3, np.float32))}),
     r"updater_state.npy holds float32 \(3,\), the configuration's updaters need"),
    (lambda e: e.update({"training_state.json": json.dumps({"format_version": 9}).encode()}),
     r"training_state.json: unsupported format"),
])
def test_malformed_files_are_named(change, msg, tmp_path):
    a = make()
    a.save(tmp_path / "good.zip")
    _rewrite(tmp_path / "good.zip", tmp_path / "bad.zip", change)
    with pytest.raises(ValueError, match=msg):
        MultiLayerNetwork.load(tmp_path / "bad.zip")


def test_files_that_are_not_networks(tmp_path):
    a = make()
    a.save(tmp_path / "good.zip")
    good = (tmp_path / "good.zip").read_bytes()
    (tmp_path / "trunc.zip").write_bytes(good[: len(good) // 2])
    (tmp_path / "binary.bin").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "empty.zip").write_bytes(b"")
    for name in ("trunc.zip", "binary.bin", "empty.zip"):
        with pytest.raises(ValueError, match=r"not an ndws network file|truncated or corrupt"):
            MultiLayerNetwork.load(tmp_path / name)
    with pytest.raises(FileNotFoundError, match=r"^path: no such file"):
        MultiLayerNetwork.load(tmp_path / "nope.zip")
    with pytest.raises(IsADirectoryError, match=r"is a directory, not a saved network"):
        MultiLayerNetwork.load(tmp_path)
    with pytest.raises(TypeError, match=r"^load_updater: expected a bool"):
        MultiLayerNetwork.load(tmp_path / "good.zip", load_updater=None)
