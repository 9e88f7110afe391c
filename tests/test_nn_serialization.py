"""ndws.nn.serialization: MultiLayerNetwork.save / load, bit-exact resume, and files that are
missing, truncated, binary, a directory, or hold arrays that do not fit."""
import io
import json
import os
import struct
import subprocess
import sys
import textwrap
import zipfile
import zlib

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
                                                                r"not JSON text"),
    (lambda e: e.update({"training_state.json": b"\x00\x01"}), r"training_state.json: not "
                                                                r"JSON text"),
    (lambda e: e.update({"coefficients.npy": _npy(np.zeros(5, np.float32))}),
     r"coefficients.npy holds float32 \(5,\), the configuration needs float32 \(73,\)"),
    (lambda e: e.update({"coefficients.npy": _npy(np.zeros(73, np.float64))}),
     r"coefficients.npy holds float64 \(73,\)"),
    (lambda e: e.update({"coefficients.npy": _npy(np.array([object()] * 73))}),
     r"coefficients.npy: holds dtype object, not numbers"),
    (lambda e: e.update({"coefficients.npy": b"garbage"}), r"coefficients.npy: not an .npy "
                                                           r"array"),
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


# -- files nobody vouches for: everything checked before anything is allocated -----------------

def _entries(path):
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist()}


def _write(path, entries, method=zipfile.ZIP_DEFLATED):
    with zipfile.ZipFile(path, "w", method) as z:
        for n, d in entries.items():
            z.writestr(n, d)


def _npy_header(shape, descr="<f4"):
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False,
                                               "shape": shape})
    return buf.getvalue()


def _edit_json(entries, name, edit):
    d = json.loads(entries[name])
    edit(d)
    entries[name] = json.dumps(d).encode()


@pytest.fixture
def saved(tmp_path):
    a = make()
    a.save(tmp_path / "good.zip")
    return _entries(tmp_path / "good.zip")


def _load_bad(tmp_path, entries, method=zipfile.ZIP_DEFLATED):
    _write(tmp_path / "bad.zip", entries, method)
    return MultiLayerNetwork.load(tmp_path / "bad.zip")


def test_an_npy_header_claiming_2_40_elements_is_refused_by_name(saved, tmp_path):
    saved["coefficients.npy"] = _npy_header((2**40,)) + b"\0" * 64
    with pytest.raises(ValueError, match=r"bad.zip: coefficients.npy: the header says float32 "
                                         r"\(1099511627776,\) \(4398046511104 bytes\), the "
                                         r"entry holds 64 bytes of data$"):
        _load_bad(tmp_path, saved)
    # a header that matches its entry's size but not the configuration
    saved["coefficients.npy"] = _npy((np.zeros(5000, np.float32)))
    with pytest.raises(ValueError, match=r"bad.zip: coefficients.npy holds float32 \(5000,\), "
                                         r"the configuration needs float32 \(73,\)$"):
        _load_bad(tmp_path, saved)


def test_a_configuration_edited_to_a_huge_layer_is_refused_before_any_parameter_is_drawn(
        saved, tmp_path, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("a network was built from a configuration its file contradicts")
    monkeypatch.setattr(MultiLayerNetwork, "init", never)
    monkeypatch.setattr(DenseLayer, "init_params", never)
    _edit_json(saved, "configuration.json", lambda d: d["layers"][0].update(n_in=2**24))
    with pytest.raises(ValueError, match=r"bad.zip: coefficients.npy holds float32 \(73,\), "
                                         r"the configuration needs float32 \(117440543,\)$"):
        _load_bad(tmp_path, saved)
    # 2**31 x 2**31 weights: named by file and entry, never "array is too big"
    _edit_json(saved, "configuration.json",
               lambda d: d["layers"][0].update(n_in=2**31, n_out=2**31))
    n = 2**62 + 2**31 + 2**31 * 3 + 3
    with pytest.raises(ValueError, match=rf"bad.zip: coefficients.npy holds float32 \(73,\), "
                                         rf"the configuration needs float32 \({n},\)$"):
        _load_bad(tmp_path, saved)
    # ... and a header forged to agree with it: its size can't be what the entry holds
    saved["coefficients.npy"] = _npy_header((n,)) + b"\0" * 64
    with pytest.raises(ValueError, match=r"bad.zip: coefficients.npy: the header says float32 "
                                         rf"\({n},\) \({4 * n} bytes\), the entry holds 64 "):
        _load_bad(tmp_path, saved)


def test_a_non_numeric_score_names_the_file_and_the_entry(saved, tmp_path):
    _edit_json(saved, "training_state.json", lambda d: d.update(score="abc"))
    with pytest.raises(ValueError, match=r"bad.zip: training_state.json: score: expected a "
                                         r"number or null, got 'abc'$"):
        _load_bad(tmp_path, saved)


@pytest.mark.parametrize("key, value, msg", [
    ("iteration", "3", r"iteration: expected an int in \[0, 2\*\*63\), got '3'"),
    ("iteration", -1, r"iteration: expected an int in \[0, 2\*\*63\), got -1"),
    ("iteration", 2**64, r"iteration: expected an int in \[0, 2\*\*63\)"),
    ("epoch", True, r"epoch: expected an int in \[0, 2\*\*63\), got True"),
    ("epoch", 1.5, r"epoch: expected an int"),
    ("score", [1], r"score: expected a number or null, got \[1\]"),
    ("score", True, r"score: expected a number or null, got True"),
    ("has_updater_state", "yes", r"has_updater_state: expected true or false, got 'yes'"),
    ("format_version", True, r"unsupported format \(format_version True"),
    ("format_version", "1", r"unsupported format"),
    ("dropout_rng", None, r"dropout_rng: not a PCG64 state"),
    ("dropout_rng", {"bit_generator": "MT19937"}, r"dropout_rng: not a PCG64 state"),
    ("extra", 1, r"unexpected fields \['extra'\]"),
])
def test_training_state_fields_are_checked_for_type_and_range(saved, tmp_path, key, value, msg):
    _edit_json(saved, "training_state.json", lambda d: d.update({key: value}))
    with pytest.raises(ValueError, match=r"bad.zip: training_state.json: " + msg):
        _load_bad(tmp_path, saved)


@pytest.mark.parametrize("where, value", [
    ("state", -1), ("state", 2**128), ("inc", "1"), ("has_uint32", 2), ("uinteger", 2**32),
    ("uinteger", None)])
def test_a_dropout_generator_state_out_of_range_is_refused(saved, tmp_path, where, value):
    def edit(d):
        rng = d["dropout_rng"]
        (rng["state"] if where in ("state", "inc") else rng)[where] = value
    _edit_json(saved, "training_state.json", edit)
    with pytest.raises(ValueError, match=rf"training_state.json: dropout_rng: not a PCG64 "
                                         rf"state \({where}: expected an int"):
        _load_bad(tmp_path, saved)


@pytest.mark.parametrize("name, content, msg", [
    ("training_state.json", b"[1, 2]", r"training_state.json: expected a JSON object, got list"),
    ("training_state.json", b"\xff\xfe\x00", r"training_state.json: not JSON text"),
    ("configuration.json", b"[" * 100_000 + b"]" * 100_000,
     r"configuration.json: not JSON text \(RecursionError"),
    ("configuration.json", b"[]", r"configuration.json: configuration: expected a dict"),
    ("configuration.json", b'{"format": "ndws.MultiLayerConfiguration", "version": 1, '
                           b'"layers": [{"@class": "DenseLayer", "n_in": "6", "n_out": 7}]}',
     r"configuration.json: layers\[0\]: DenseLayer.n_in: expected an int"),
    ("updater_state.npy", _npy_header((2**40,)), r"updater_state.npy: the header says"),
    ("updater_state.npy", _npy(np.zeros(3, np.float32)),
     r"updater_state.npy holds float32 \(3,\), the configuration's updaters need float32 "
     r"\(146,\)$"),
    ("coefficients.npy", _npy(np.zeros((73, 1), np.float32)),
     r"coefficients.npy holds float32 \(73, 1\), the configuration needs"),
    ("coefficients.npy", _npy(np.zeros(73, ">f4")), r"coefficients.npy holds >f4 \(73,\)"),
    ("coefficients.npy", b"\x93NUMPY\x03\x00" + b"\0" * 40, r"coefficients.npy: not an .npy "
                                                          r"array \(.*version \(3, 0\)"),
    ("coefficients.npy", b"\x93NUMPY\x01\x00\xff\xff" + b"{" * 100, r"coefficients.npy: not "
                                                                    r"an .npy array"),
    ("coefficients.npy", _npy_header((-73, -1)), r"coefficients.npy: the header's shape "
                                                 r"\(-73, -1\) has a negative size"),
])
def test_malformed_entries_are_named(saved, tmp_path, name, content, msg):
    saved[name] = content
    with pytest.raises(ValueError, match=r"bad.zip: " + msg):
        _load_bad(tmp_path, saved)


def test_a_missing_updater_entry_is_found_before_reading_anything(saved, tmp_path):
    del saved["updater_state.npy"]
    with pytest.raises(ValueError, match=r"bad.zip: not an ndws network file "
                                         r"\(updater_state.npy missing\)$"):
        _load_bad(tmp_path, saved)
    assert MultiLayerNetwork.load(tmp_path / "bad.zip", load_updater=False).num_params() == 73


def test_stored_entries_load_and_a_damaged_one_is_named(saved, tmp_path):
    _write(tmp_path / "stored.zip", saved, zipfile.ZIP_STORED)
    net = MultiLayerNetwork.load(tmp_path / "stored.zip")
    np.testing.assert_array_equal(net.params().numpy(),
                                  np.lib.format.read_array(io.BytesIO(saved["coefficients.npy"])))
    data = bytearray((tmp_path / "stored.zip").read_bytes())
    at = data.index(saved["coefficients.npy"]) + len(saved["coefficients.npy"]) - 5
    data[at] ^= 0xFF                                    # one parameter's byte: the CRC catches it
    (tmp_path / "crc.zip").write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"crc.zip: coefficients.npy: truncated or corrupt "
                                         r"\(Bad CRC-32"):
        MultiLayerNetwork.load(tmp_path / "crc.zip")
    (tmp_path / "cut.zip").write_bytes(bytes(data[:at]))
    with pytest.raises(ValueError, match=r"cut.zip: not an ndws network file \(not a zip"):
        MultiLayerNetwork.load(tmp_path / "cut.zip")


def test_other_compression_methods_and_encryption_are_refused(saved, tmp_path):
    with zipfile.ZipFile(tmp_path / "bz.zip", "w") as z:
        for n, d in saved.items():
            z.writestr(n, d, zipfile.ZIP_BZIP2 if n == "coefficients.npy" else
                       zipfile.ZIP_DEFLATED)
    with pytest.raises(ValueError, match=r"bz.zip: coefficients.npy: compression method 12 is "
                                         r"not one ndws writes"):
        MultiLayerNetwork.load(tmp_path / "bz.zip")
    _write(tmp_path / "enc.zip", saved)
    data = bytearray((tmp_path / "enc.zip").read_bytes())
    central = data.index(b"PK\x01\x02")
    data[central + 8] |= 1                                  # the first entry's "encrypted" bit
    (tmp_path / "enc.zip").write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"enc.zip: [a-z_]+\.(json|npy): is encrypted"):
        MultiLayerNetwork.load(tmp_path / "enc.zip")


def test_sizes_from_the_configuration_match_the_built_network():
    from ndws.nn import BatchNormalization, Sgd
    from ndws.nn.serialization import _sizes
    for conf in [make().conf,
                 MultiLayerConfiguration([DenseLayer(n_in=5, n_out=4, updater=Sgd(0.1)),
                                          BatchNormalization(),
                                          OutputLayer(n_out=2, activation="softmax")],
                                         updater=Adam(1e-3))]:
        net = MultiLayerNetwork(conf)
        net.init()
        assert _sizes(conf) == (net.num_params(), net._updater_state_flat().size)


def test_random_damage_is_always_a_value_error(saved, tmp_path):
    # seeded byte flips, cuts and insertions anywhere in a saved network: a ValueError (or a
    # network whose damage no check can see, e.g. a changed parameter in a stored entry),
    # never another exception
    _write(tmp_path / "good.zip", saved)
    good = (tmp_path / "good.zip").read_bytes()
    rng = np.random.default_rng(20)
    for i in range(300):
        data = bytearray(good)
        kind = i % 3
        at = int(rng.integers(0, len(data)))
        if kind == 0:
            data[at] ^= int(rng.integers(1, 256))
        elif kind == 1:
            data = data[:at] + data[at + int(rng.integers(1, 64)):]
        else:
            data[at:at] = bytes(rng.integers(0, 256, int(rng.integers(1, 16)), dtype=np.uint8))
        (tmp_path / "fuzz.zip").write_bytes(bytes(data))
        try:
            MultiLayerNetwork.load(tmp_path / "fuzz.zip")
        except ValueError as exc:
            assert "fuzz.zip" in str(exc)


BOMB_MIB = 64


def _bomb(path, entries, name, head, tail=b""):
    # `entries` with `name` replaced by `head` + BOMB_MIB MiB of zeros + `tail`, written in
    # chunks (about 64 KiB on disk)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in entries.items():
            if n != name:
                z.writestr(n, d)
        with z.open(name, "w") as f:
            f.write(head)
            for _ in range(BOMB_MIB):
                f.write(bytes(1 << 20))
            f.write(tail)


def _lying_bomb(path, entries):
    # coefficients.npy whose deflate stream inflates to the real array plus BOMB_MIB MiB, but
    # whose headers declare the real array's size and CRC: the reader must stop at the size
    real = entries["coefficients.npy"]
    _bomb(path, entries, "coefficients.npy", real)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        local = z.getinfo("coefficients.npy").header_offset
    central = data.index(b"PK\x01\x02")
    while data[central + 46:central + 46 + 16] != b"coefficients.npy":
        central = data.index(b"PK\x01\x02", central + 4)
    for crc_at, size_at in ((local + 14, local + 22), (central + 16, central + 24)):
        data[crc_at:crc_at + 4] = struct.pack("<I", zlib.crc32(real))
        data[size_at:size_at + 4] = struct.pack("<I", len(real))
    path.write_bytes(bytes(data))


@pytest.mark.skipif(ndws._core._build_info()["sanitized"],
                    reason="AddressSanitizer's quarantine and shadow memory inflate RSS")
def test_zip_bombs_are_refused_before_they_cost_memory(saved, tmp_path):
    # each bomb is ~64 KiB on disk and inflates to 64 MiB; the old reader inflated an entry
    # whole (and copied it) before looking at it: 128 MiB of RSS for each
    _write(tmp_path / "good.zip", saved)
    _bomb(tmp_path / "npy.zip", saved, "coefficients.npy", _npy_header((BOMB_MIB << 18,)))
    _bomb(tmp_path / "tail.zip", saved, "coefficients.npy", saved["coefficients.npy"])
    _bomb(tmp_path / "json.zip", saved, "configuration.json", b" ", b"{}")
    _bomb(tmp_path / "state.zip", saved, "training_state.json", b" ", b"{}")
    _lying_bomb(tmp_path / "lying.zip", saved)
    assert max(os.path.getsize(tmp_path / n) for n in ("npy.zip", "json.zip")) < 256 << 10
    script = textwrap.dedent("""
        import resource, sys
        from ndws.nn import MultiLayerNetwork
        def peak():
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss   # KiB on Linux
        MultiLayerNetwork.load(sys.argv[1] + "/good.zip")     # imports and first-use costs
        for name in ("npy", "tail", "json", "state", "lying"):
            before = peak()
            try:
                MultiLayerNetwork.load(f"{sys.argv[1]}/{name}.zip")
                outcome = "loaded"
            except ValueError as exc:
                outcome = str(exc).split(".zip: ", 1)[1]
            print(f"{name}|{(peak() - before) // 1024}|{outcome}")
    """)
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    rows = {name: (int(mib), outcome) for name, mib, outcome in
            (line.split("|") for line in out.splitlines())}
    assert rows["npy"][1] == ("coefficients.npy holds float32 (16777216,), the configuration "
                              "needs float32 (73,)")
    assert rows["tail"][1].startswith("coefficients.npy: the header says float32 (73,) (292 "
                                      "bytes), the entry holds 67109156 bytes of data")
    assert rows["json"][1].startswith("configuration.json: is 67108867 bytes; a valid entry "
                                      "is at most 16777216")
    assert rows["state"][1].startswith("training_state.json: is 67108867 bytes; a valid entry "
                                       "is at most 1048576")
    assert rows["lying"][1] == "loaded"        # read up to its declared size, which is right
    for name, (mib, _) in rows.items():
        assert mib < 8, (name, rows)


def test_nested_updaters_in_a_configuration_are_refused_without_recursing(saved, tmp_path):
    # only a schedule may stand for a hyperparameter: an updater inside an updater is refused
    # at the first level, so no nesting recurses
    _edit_json(saved, "configuration.json",
               lambda d: d["updater"].update(learning_rate={"@class": "Adam"}))
    with pytest.raises(ValueError, match=r"bad.zip: configuration.json: Schedule.from_dict: "
                                         r"unknown class 'Adam'$"):
        _load_bad(tmp_path, saved)
    text = saved["configuration.json"].decode()
    deep = '{"@class": "Adam", "learning_rate": ' * 900 + "0.1" + "}" * 900
    saved["configuration.json"] = text.replace('{"@class": "Adam"}', deep).encode()
    with pytest.raises(ValueError, match=r"bad.zip: configuration.json: (Schedule.from_dict: "
                                         r"unknown class 'Adam'|not JSON text)"):
        _load_bad(tmp_path, saved)
    with pytest.raises(ValueError, match=r"^configuration: not JSON text \(maximum recursion"):
        MultiLayerConfiguration.from_json("[" * 100_000 + "]" * 100_000)


@pytest.mark.parametrize("edit, msg", [
    (lambda d: d["layers"][0].update(bias_init=10**400),
     r"layers\[0\]: DenseLayer.bias_init: expected a finite real number, got 1000"),
    (lambda d: d["updater"].update(learning_rate=10**400),
     r"Adam.learning_rate: must be in \[0, inf\], got 1000"),
    (lambda d: d["layers"][0].update(l2=-10**400), r"DenseLayer.l2: must be in \[0, inf\]"),
    (lambda d: d.update(seed="1"), r"seed"),
])
def test_configuration_numbers_beyond_a_double_are_named(saved, tmp_path, edit, msg):
    _edit_json(saved, "configuration.json", edit)
    with pytest.raises(ValueError, match=r"bad.zip: configuration.json: .*" + msg):
        _load_bad(tmp_path, saved)


def test_a_fifo_or_a_device_is_refused_without_reading(tmp_path):
    os.mkfifo(tmp_path / "fifo.zip")              # opening it to read would wait for a writer
    with pytest.raises(ValueError, match=r"fifo.zip: not an ndws network file \(not a regular "
                                         r"file\)$"):
        MultiLayerNetwork.load(tmp_path / "fifo.zip")
    with pytest.raises(ValueError, match=r"^/dev/zero: not an ndws network file \(not a regular "
                                         r"file\)$"):
        MultiLayerNetwork.load("/dev/zero")
