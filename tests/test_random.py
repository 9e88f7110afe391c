"""ndws.random: the values are bit-for-bit those of numpy.random.default_rng(seed) making the same
calls in the same order; results are placed like every other ndws array."""
from __future__ import annotations

import numpy as np
import pytest

import ndws
from conftest import assert_matches
from ndws.random import Generator

FLOATS = [np.float32, np.float64]
F_IDS = ["float32", "float64"]
SIZES = [None, (), 5, (2, 3), (3, 1, 4), [2, 2], 0, (2, 0)]
SIZE_IDS = ["None", "0d", "5", "2x3", "3x1x4", "list", "empty", "2x0"]
SEEDS = [0, 12345, 2**40 + 7]


def same_bits(got, expected) -> None:
    """NDArray `got` holds exactly NumPy's `expected` (shape, dtype, every bit)."""
    assert isinstance(got, ndws.NDArray), type(got)
    exp = np.asarray(expected)
    res = got.numpy()
    assert res.shape == exp.shape, (res.shape, exp.shape)
    assert res.dtype == exp.dtype, (res.dtype, exp.dtype)
    assert res.tobytes() == exp.tobytes()


def _shape(size):
    return () if size is None else size


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
@pytest.mark.parametrize("dtype", FLOATS, ids=F_IDS)
def test_random_matches_numpy(seed, size, dtype):
    g, r = Generator(seed), np.random.default_rng(seed)
    for _ in range(2):  # the stream continues identically
        same_bits(g.random(size, dtype=dtype), r.random(_shape(size), dtype=dtype))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
@pytest.mark.parametrize("dtype", FLOATS, ids=F_IDS)
def test_standard_normal_matches_numpy(seed, size, dtype):
    g, r = Generator(seed), np.random.default_rng(seed)
    for _ in range(2):
        same_bits(g.standard_normal(size, dtype=dtype),
                  r.standard_normal(_shape(size), dtype=dtype))


def test_default_dtype_is_float64():
    g = Generator(1)
    assert g.random(3).dtype == np.float64
    assert g.standard_normal(3).dtype == np.float64
    assert g.uniform(size=3).dtype == np.float64
    assert g.normal(size=3).dtype == np.float64
    assert g.integers(0, 5, 3).dtype == np.int64


def test_size_none_gives_zero_d_with_numpys_value():
    g, r = Generator(7), np.random.default_rng(7)
    x = g.random()
    assert x.shape == () and x.item() == r.random()
    y = g.standard_normal()
    assert y.shape == () and y.item() == r.standard_normal()
    z = g.uniform(-1.0, 2.0)
    assert z.shape == () and z.item() == r.uniform(-1.0, 2.0)
    n = g.normal(3.0, 0.5)
    assert n.shape == () and n.item() == r.normal(3.0, 0.5)
    i = g.integers(10)
    assert i.shape == () and i.item() == r.integers(10)


@pytest.mark.parametrize("shape", [(), (4,), (2, 3), (1, 2, 3)], ids=str)
def test_rand_and_randn(shape):
    g, r = Generator(99), np.random.default_rng(99)
    same_bits(g.rand(*shape), r.random(shape))
    same_bits(g.randn(*shape), r.standard_normal(shape))
    same_bits(g.rand(*shape), r.random(shape))


@pytest.mark.parametrize("low, high", [(0.0, 1.0), (-3.0, 5.5), (2, 10), (1e-3, 1e3),
                                       (0.0, 0.0), (-7.5, -7.25)], ids=str)
@pytest.mark.parametrize("size", [None, 7, (3, 4)], ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=F_IDS)
def test_uniform_is_numpys_formula(low, high, size, dtype):
    g, r = Generator(2024), np.random.default_rng(2024)
    got = g.uniform(low, high, size, dtype=dtype)
    exp = low + (high - low) * r.random(_shape(size), dtype=dtype)
    same_bits(got, np.asarray(exp, dtype=dtype) if np.ndim(exp) == 0 else exp)
    if dtype is np.float64:
        r2 = np.random.default_rng(2024)
        same_bits(got, r2.uniform(low, high, _shape(size)))


@pytest.mark.parametrize("loc, scale", [(0.0, 1.0), (-2.0, 0.5), (10, 3), (1.5, 0.0)], ids=str)
@pytest.mark.parametrize("size", [None, 7, (3, 4)], ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=F_IDS)
def test_normal_is_numpys_formula(loc, scale, size, dtype):
    g, r = Generator(77), np.random.default_rng(77)
    got = g.normal(loc, scale, size, dtype=dtype)
    exp = loc + scale * r.standard_normal(_shape(size), dtype=dtype)
    same_bits(got, np.asarray(exp, dtype=dtype) if np.ndim(exp) == 0 else exp)
    if dtype is np.float64:
        r2 = np.random.default_rng(77)
        same_bits(got, r2.normal(loc, scale, _shape(size)))


@pytest.mark.parametrize("dtype", FLOATS, ids=F_IDS)
def test_uniform_reversed_range_is_numpys_error(dtype):
    with pytest.raises(ValueError) as np_info:
        np.random.default_rng(0).uniform(5.0, -1.0, size=3)
    with ndws.workspace("U") as ws:
        before = ws.this_cycle_allocations
        with pytest.raises(ValueError) as info:
            Generator(0).uniform(5.0, -1.0, size=3, dtype=dtype)
        assert str(info.value) == str(np_info.value)
        assert ws.this_cycle_allocations == before


def test_normal_negative_scale_is_value_error():
    with pytest.raises(ValueError):
        np.random.default_rng(0).normal(0.0, -1.0)
    with pytest.raises(ValueError):
        Generator(0).normal(0.0, -1.0, size=3)


@pytest.mark.parametrize("args, kwargs", [
    ((10,), {}), ((0, 10), {}), ((-5, 5), {"size": 20}), ((0, 2**40), {"size": (3, 2)}),
    ((0, 100), {"size": 8, "dtype": np.int32}), ((0, 255), {"size": 8, "dtype": np.uint8}),
    ((0, 1), {"size": 6, "dtype": np.bool_, "endpoint": True}),
    ((1, 6), {"size": 12, "endpoint": True}), ((3,), {"size": (2, 2), "dtype": np.int16}),
    ((0, 10), {"size": 0}),
], ids=str)
def test_integers_match_numpy(args, kwargs):
    g, r = Generator(31337), np.random.default_rng(31337)
    for _ in range(2):
        same_bits(g.integers(*args, **kwargs), np.asarray(r.integers(*args, **kwargs)))


def test_integers_errors_are_numpys():
    for args in [(5, 5), (10, 0), (-1,)]:
        with pytest.raises(ValueError) as np_info:
            np.random.default_rng(0).integers(*args)
        with pytest.raises(ValueError) as info:
            Generator(0).integers(*args)
        assert str(info.value) == str(np_info.value)
    with pytest.raises(TypeError):
        Generator(0).integers(0, 5, dtype=np.float64)


@pytest.mark.parametrize("n", [0, 1, 2, 10, 257])
def test_permutation_of_int(n):
    g, r = Generator(5), np.random.default_rng(5)
    got = g.permutation(n)
    same_bits(got, r.permutation(n))
    assert sorted(got.tolist()) == list(range(n))
    same_bits(g.permutation(np.int64(n)), r.permutation(np.int64(n)))


@pytest.mark.parametrize("shape", [(8,), (6, 3), (4, 2, 3)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_],
                         ids=["float32", "float64", "int32", "int64", "bool"])
def test_permutation_of_array_is_a_shuffled_copy(shape, dtype):
    src = (np.arange(int(np.prod(shape))) % 5).astype(dtype).reshape(shape)
    g, r = Generator(11), np.random.default_rng(11)
    x = ndws.array(src)
    got = g.permutation(x)
    same_bits(got, r.permutation(src))
    assert got is not x
    same_bits(x, src)  # the input is untouched
    same_bits(g.permutation(src), r.permutation(src))          # NumPy input
    same_bits(g.permutation(src.tolist()), r.permutation(src.tolist()))  # list input


@pytest.mark.parametrize("shape, axis", [((10,), 0), ((5, 4), 0), ((5, 4), 1), ((3, 4, 2), -1)],
                         ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64], ids=str)
def test_shuffle_in_place(shape, axis, dtype):
    src = np.arange(int(np.prod(shape))).astype(dtype).reshape(shape)
    g, r = Generator(3), np.random.default_rng(3)
    x = ndws.array(src)
    exp = src.copy()
    assert g.shuffle(x, axis=axis) is None
    r.shuffle(exp, axis=axis)
    same_bits(x, exp)
    assert not np.array_equal(x.numpy(), src) or src.shape[axis] < 3
    assert sorted(x.numpy().ravel().tolist()) == sorted(src.ravel().tolist())


def test_shuffle_of_view_shuffles_base_and_allocates_nothing():
    src = np.arange(20.0).reshape(4, 5)
    exp = src.copy()
    np.random.default_rng(8).shuffle(exp[:, ::2])
    with ndws.workspace("S") as ws:
        x = ndws.array(src)
        before = ws.this_cycle_allocations
        Generator(8).shuffle(x[:, ::2])
        assert ws.this_cycle_allocations == before
        got = x.numpy()
    np.testing.assert_array_equal(got, exp)


def test_shuffle_needs_an_ndarray():
    with pytest.raises(TypeError):
        Generator(0).shuffle([1, 2, 3])
    with pytest.raises(TypeError):
        Generator(0).shuffle(np.arange(3))


def test_mixed_call_sequence_matches_numpy():
    g, r = Generator(424242), np.random.default_rng(424242)
    for dtype in FLOATS:
        same_bits(g.random(4, dtype=dtype), r.random(4, dtype=dtype))
        same_bits(g.standard_normal((2, 3), dtype=dtype), r.standard_normal((2, 3), dtype=dtype))
        same_bits(g.integers(0, 100, 5), r.integers(0, 100, 5))
        same_bits(g.uniform(-1, 1, 3, dtype=dtype),
                  (-1 + 2 * r.random(3, dtype=dtype)).astype(dtype))
        same_bits(g.normal(2.0, 3.0, (2, 2), dtype=dtype),
                  2.0 + 3.0 * r.standard_normal((2, 2), dtype=dtype))
        same_bits(g.permutation(7), r.permutation(7))
        x, e = ndws.arange(9.0), np.arange(9.0)
        g.shuffle(x)
        r.shuffle(e)
        same_bits(x, e)
        same_bits(g.rand(2), r.random(2))
        same_bits(g.randn(3), r.standard_normal(3))


def test_reproducible_and_seed_forms():
    a = Generator(123).random(50)
    b = Generator(123).random(50)
    same_bits(a, b.numpy())
    c = Generator(124).random(50)
    assert not np.array_equal(a.numpy(), c.numpy())
    same_bits(ndws.random.default_rng(123).random(50), a.numpy())
    same_bits(Generator(np.random.SeedSequence(123)).random(50), a.numpy())
    same_bits(Generator(np.random.PCG64(123)).random(50), a.numpy())
    same_bits(Generator([1, 2, 3]).standard_normal(5),
              np.random.default_rng([1, 2, 3]).standard_normal(5))
    assert isinstance(Generator(1).numpy_generator, np.random.Generator)
    # unseeded generators draw fresh entropy
    assert not np.array_equal(Generator().random(8).numpy(), Generator().random(8).numpy())


@pytest.mark.parametrize("method", ["random", "standard_normal", "uniform", "normal"])
@pytest.mark.parametrize("bad", [np.int32, np.int64, np.bool_, np.float16, np.complex128],
                         ids=["int32", "int64", "bool", "float16", "complex128"])
def test_bad_dtype_is_type_error_and_allocates_nothing(method, bad):
    g = Generator(0)
    with pytest.raises(TypeError):
        getattr(np.random.default_rng(0), "random" if method == "uniform" else
                "standard_normal" if method == "normal" else method)(3, dtype=bad)
    with ndws.workspace("B") as ws:
        before = ws.this_cycle_allocations
        with pytest.raises(TypeError):
            getattr(g, method)(size=3, dtype=bad)
        assert ws.this_cycle_allocations == before
    # the failed call consumed nothing from the stream
    same_bits(g.random(4), np.random.default_rng(0).random(4))


def test_failed_integers_allocates_nothing():
    with ndws.workspace("B") as ws:
        before = ws.this_cycle_allocations
        with pytest.raises(ValueError):
            Generator(0).integers(5, 5, size=10)
        assert ws.this_cycle_allocations == before


PRODUCERS = {
    "random": lambda g: g.random((3, 4)),
    "random32": lambda g: g.random(5, dtype=np.float32),
    "random0d": lambda g: g.random(),
    "rand": lambda g: g.rand(2, 2),
    "standard_normal": lambda g: g.standard_normal(6),
    "randn": lambda g: g.randn(3),
    "uniform": lambda g: g.uniform(-1, 1, (2, 2)),
    "normal": lambda g: g.normal(0, 2, 4, dtype=np.float32),
    "integers": lambda g: g.integers(0, 9, (2, 3)),
    "integers0d": lambda g: g.integers(9),
    "permutation_int": lambda g: g.permutation(8),
    "permutation_arr": lambda g: g.permutation(np.arange(6.0)),
}


@pytest.mark.parametrize("name", list(PRODUCERS))
def test_placement(name):
    make = PRODUCERS[name]
    with ndws.workspace("G") as ws:
        before = ws.this_cycle_allocations
        x = make(Generator(1))
        assert x.workspace_id == "G" and x.workspace is ws
        assert ws.this_cycle_allocations > before
        inside = x.numpy()
        with ndws.scope_out_of_workspaces():
            y = make(Generator(1))
            assert y.workspace_id is None
    assert x.stale == "leaked"
    z = make(Generator(1))
    assert z.workspace_id is None
    same_bits(z, inside)
    same_bits(y, inside)


def test_zero_size_results_are_not_attached():
    with ndws.workspace("G") as ws:
        before = ws.this_cycle_allocations
        for x in (Generator(0).random(0), Generator(0).standard_normal((2, 0)),
                  Generator(0).integers(0, 3, 0), Generator(0).permutation(0)):
            assert x.size == 0 and x.workspace_id is None
        assert ws.this_cycle_allocations == before


def test_module_level_functions_draw_from_one_seeded_generator():
    ndws.random.seed(7)
    ref = np.random.default_rng(7)
    assert_matches(ndws.random.rand(2, 3), ref.random((2, 3)))
    assert_matches(ndws.random.randn(4), ref.standard_normal(4))
    assert_matches(ndws.random.normal(1.0, 2.0, size=3), ref.normal(1.0, 2.0, size=3))
    assert_matches(ndws.random.uniform(-1.0, 1.0, size=3), ref.uniform(-1.0, 1.0, size=3))
    assert_matches(ndws.random.integers(0, 10, size=5), ref.integers(0, 10, size=5))
    assert_matches(ndws.random.random(2, dtype=np.float32), ref.random(2, dtype=np.float32))
    assert_matches(ndws.random.standard_normal(2), ref.standard_normal(2))
    assert_matches(ndws.random.permutation(6), ref.permutation(6))
    x = ndws.arange(5)
    ndws.random.shuffle(x)
    expected = np.arange(5)
    ref.shuffle(expected)
    assert_matches(x, expected)
    with ndws.workspace("RND_MOD") as ws:
        assert ndws.random.rand(3).workspace is ws


# -- parameters that are not numbers ------------------------------------------------------------

@pytest.mark.parametrize("call, exc, msg", [
    (lambda g: g.normal(0, None, 3), TypeError,
     "scale: expected a real number or an array of them, got NoneType None"),
    (lambda g: g.normal("a"), TypeError,
     "loc: expected a real number or an array of them, got str 'a'"),
    (lambda g: g.normal(0, np.nan, 3), ValueError, "scale: must be finite, got nan"),
    (lambda g: g.normal(0, -1.0, 3), ValueError, "scale: must be non-negative, got -1.0"),
    (lambda g: g.normal(True, 1.0), TypeError,
     "loc: expected a real number or an array of them, got bool True"),
    (lambda g: g.normal(0, 10**400), ValueError, "scale: must be finite, got " + "1" + "0" * 39),
    (lambda g: g.normal(np.zeros(4), 1.0, 3), ValueError,
     "loc: shape (4,) can't be broadcast to size (3,)"),
    (lambda g: g.normal(np.zeros((2, 3)), 1.0, (3,)), ValueError,
     "loc: shape (2, 3) can't be broadcast to size (3,)"),
    (lambda g: g.normal(np.zeros(4), np.ones(3)), ValueError,
     "loc, scale: shapes (4,), (3,) can't be broadcast together"),
    (lambda g: g.normal([0.0, np.nan], 1.0), ValueError, "loc: must be finite, got an array "
                                                         "holding nan"),
    (lambda g: g.normal(0.0, [1.0, -2.0]), ValueError, "scale: must be non-negative, got an "
                                                       "array holding -2.0"),
    (lambda g: g.normal(["a"], 1.0), TypeError,
     "loc: expected a real number or an array of them, got list ['a']"),
    (lambda g: g.uniform(0, np.inf, 2), ValueError, "high: must be finite, got inf"),
    (lambda g: g.uniform([0, 1], 1, 3), ValueError, "low: shape (2,) can't be broadcast to "
                                                    "size (3,)"),
    (lambda g: g.uniform([0, 2], 1, 2), ValueError, "high - low < 0"),
    (lambda g: g.random(2**62), ValueError, "size: 4611686018427387904 is too many values: "
                                            "array is too big"),
    (lambda g: g.integers(0, 5, 3, dtype=np.float64), TypeError,
     "dtype: expected an integer or bool dtype, got <class 'numpy.float64'>"),
    (lambda g: g.permutation(2**70), ValueError, "x: expected an int in [0, 1152921504606846975] "
                                                 "(the length of the permutation), got "
                                                 "1180591620717411303424"),
    (lambda g: g.permutation("abc"), TypeError, "x: expected an int or an array of numbers, "
                                                "got str 'abc'"),
    (lambda g: g.permutation(np.float64(3.0)), ValueError, "x: expected an int or an array of "
                                                           "at least one dimension, got a 0-d "
                                                           "array"),
    (lambda g: g.shuffle(ndws.zeros(3, detached=True), axis=5), ValueError,
     "axis: 5 is out of bounds for x of 1 dimension"),
    (lambda g: g.shuffle(ndws.zeros(3, detached=True), axis="0"), TypeError,
     "axis: expected an int, got str '0'"),
    (lambda g: g.random("a"), TypeError, "size: expected None, an int or a tuple of ints, got "
                                         "'a'"),
    (lambda g: g.standard_normal((2, -1)), ValueError, "size: negative dimensions are not "
                                                       "allowed, got (2, -1)"),
    (lambda g: g.random(3, dtype="abc"), TypeError, "dtype: expected float32 or float64, got "
                                                    "'abc'"),
    (lambda g: g.random(3, dtype=object), TypeError, "dtype: expected float32 or float64, got "
                                                     "<class 'object'>"),
    (lambda g: g.integers(0, 5, size=2.5), TypeError, "size: expected None, an int or a tuple "
                                                      "of ints, got 2.5"),
])
def test_hostile_parameters_name_the_argument(call, exc, msg):
    g = ndws.random.Generator(0)
    state = g.numpy_generator.bit_generator.state
    with ndws.workspace("RANDOM_HOSTILE", ndws.WorkspaceConfiguration(initial_size=4096)) as ws:
        with pytest.raises(exc) as info:
            call(g)
        assert ws.this_cycle_allocations == 0
    assert str(info.value) == msg
    assert g.numpy_generator.bit_generator.state == state    # no draw was made


@pytest.mark.parametrize("dtype", FLOATS, ids=F_IDS)
def test_array_parameters_broadcast_as_numpys(dtype):
    loc, scale = np.array([[0.0], [10.0]]), np.array([1.0, 2.0, 0.5])
    got = Generator(8).normal(loc, scale, dtype=dtype)
    exp = loc.astype(dtype) + scale.astype(dtype) * np.random.default_rng(8).standard_normal(
        (2, 3), dtype=dtype)
    same_bits(got, exp.astype(dtype))
    if dtype == np.float64:
        same_bits(got, np.random.default_rng(8).normal(loc, scale))
        same_bits(Generator(8).uniform([0.0, 1.0], 3.0, (4, 2)),
                  np.random.default_rng(8).uniform([0.0, 1.0], 3.0, (4, 2)))
    assert Generator(8).normal(ndws.array([1.0, 2.0]), 0.0).tolist() == [1.0, 2.0]
