"""Hostile input to the core (docs/architecture.md's invariant 1 and the error rules of
docs/workspaces.md): inputs that once crashed the interpreter, results ndws can't hold, calls that
fail half-way, and the errors that must name the argument at fault.

Each reproducer asserts the exact exception and message, and that a failed call left the
workspace's counters exactly as they were. The crash reproducers also run in a child process,
so that a regression shows up as a failed test rather than a dead test run.
"""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ndws

BIG = ndws.WorkspaceConfiguration(initial_size=1 << 20, policy_learning="NONE")
#: a workspace of size 0 that never learns: every allocation spills
SPILLING = ndws.WorkspaceConfiguration(initial_size=0, policy_learning="NONE")


def counters(ws) -> tuple:
    return (ws.this_cycle_allocations, ws.primary_offset, ws.spilled_size,
            ws.number_of_external_allocations, ws.generation)


# ------------------------------------------------------------------------------------------------
# More dimensions than ndws once held (32): NumPy 2's 64 everywhere, a clear error beyond


@pytest.mark.parametrize("ndim", [5, 33, 40, 64])
def test_many_dimensions_on_every_path(ndim):
    ones = np.ones((1,) * (ndim - 1) + (3,))
    with ndws.workspace("MANYDIM", BIG):
        a = ndws.asarray(ones)
        assert a.shape == ones.shape and a.is_attached()
        assert ndws.array([1.0, 2.0, 3.0], ndmin=ndim).shape == ones.shape
        assert ndws.sin(np.zeros(ones.shape)).shape == ones.shape
        assert (ndws.zeros(3) + ones).shape == ones.shape
        assert ndws.sum(ones, axis=0).shape == ones.shape[1:]
        assert a.sum().item() == 3.0
        np.testing.assert_array_equal(np.asarray(a + a), ones * 2)
        assert a[(0,) * (ndim - 1)].tolist() == [1.0, 1.0, 1.0]
        assert a.T.shape == ones.shape[::-1]
        assert memoryview(a).shape == ones.shape
        assert ndws.from_numpy(ones).shape == ones.shape
        assert ndws.zeros((1,) * ndim).ndim == ndim
        assert ndws.empty_like(a).shape == ones.shape
        assert a.reshape(3).shape == (3,)
        assert ndws.asarray(np.ones(3)).reshape((1,) * (ndim - 1) + (3,)).ndim == ndim


def test_more_than_64_dimensions_raise_numpy_s_error():
    msg = "maximum supported dimension for an ndarray is currently 64, found 65"
    for call in (lambda: ndws.zeros((1,) * 65), lambda: ndws.array([1.0], ndmin=65),
                 lambda: ndws.ones(3).reshape((1,) * 62 + (3, 1, 1))):
        with pytest.raises(ValueError, match=msg):
            call()


CRASHERS = """
import numpy as np, ndws
ndws.asarray(np.zeros((1,)*33))
ndws.array([1.0], ndmin=33)
ndws.sin(np.zeros((1,)*33))
ndws.zeros(3) + np.ones((1,)*40)
ndws.sum(np.ones((1,)*34), axis=0)
with ndws.workspace("CRASH"):
    for call in (lambda: ndws.zeros(3) + np.array([1, 2, 3], dtype=object),
                 lambda: ndws.add(ndws.zeros(3), 1, dtype=object),
                 lambda: ndws.negative(ndws.zeros(3), dtype=object)):
        try:
            call()
        except TypeError:
            pass
a = ndws.zeros(3)
m = memoryview(a)
try:
    a.__init__(1000)
except TypeError:
    pass
assert m.tolist() == [0.0, 0.0, 0.0]
print("survived")
"""


def test_former_crashers_survive_in_a_child_process():
    # a regression kills only the child: the test then reports its signal
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CRASHERS)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip() == "survived"


# ------------------------------------------------------------------------------------------------
# Dtypes ndws does not hold are refused before any memory is touched


NON_NUMERIC = [
    ("add", lambda x, i: ndws.add(x, 1, dtype=object), "add", "dtype('O')"),
    ("negative", lambda x, i: ndws.negative(x, dtype=object), "negative", "dtype('O')"),
    ("object operand", lambda x, i: x + np.array([1, 2, 3], dtype=object), "add", "dtype('O')"),
    ("datetime", lambda x, i: i + np.datetime64("2020-01-01"), "add", "dtype('<M8[D]')"),
    ("timedelta", lambda x, i: i * np.timedelta64(1, "s"), "multiply", "dtype('<m8[s]')"),
    ("np.add", lambda x, i: np.add(x, np.array(["a", "b", "c"], dtype=object)), "add",
     "dtype('O')"),
]


@pytest.mark.parametrize("call, op, dt", [c[1:] for c in NON_NUMERIC],
                         ids=[c[0] for c in NON_NUMERIC])
def test_non_numeric_results_are_refused_before_allocating(call, op, dt):
    with ndws.workspace("NONNUM", BIG) as ws:
        x, i = ndws.zeros(3), ndws.zeros(3, dtype=np.int64)
        before = counters(ws)
        with pytest.raises(TypeError) as info:
            call(x, i)
        assert str(info.value) == (f"{op}: the result: ndws arrays hold numbers (bool, int, "
                                   f"uint, float, complex); got {dt}")
        assert counters(ws) == before


@pytest.mark.parametrize("call", [
    lambda: ndws.ones(3, dtype="M8[s]"),
    lambda: ndws.zeros(3).astype(object),
    lambda: ndws.empty(3, dtype="U3"),
    lambda: ndws.array(np.array([1, 2], dtype="m8[s]")),
    lambda: ndws.from_numpy(np.array([b"x"])),
], ids=["datetime", "astype-object", "str", "timedelta-array", "bytes"])
def test_non_numeric_dtypes_are_refused(call):
    with pytest.raises(TypeError, match=r"ndws arrays hold numbers \(bool, int, uint, float, "
                                        r"complex\); got dtype\("):
        call()


def test_ndarray_init_cannot_run_twice():
    a = ndws.arange(3.0)
    m = memoryview(a)
    with pytest.raises(TypeError) as info:
        a.__init__(1000)
    assert str(info.value) == ("NDArray.__init__ can't re-initialise an existing array; create "
                               "a new one with ndws.empty (or NDArray(shape, dtype))")
    assert m.tolist() == [0.0, 1.0, 2.0] and a.shape == (3,)
    b = ndws.NDArray((2, 2))
    with pytest.raises(TypeError):
        ndws.NDArray.__init__(b, (7,))
    assert b.shape == (2, 2)
    v = a[1:]
    with pytest.raises(TypeError):
        v.__init__(4)
    assert v.tolist() == [1.0, 2.0]


# ------------------------------------------------------------------------------------------------
# A failed call leaves nothing behind


def _divmod_by_zero(b):
    with np.errstate(divide="raise"):
        divmod(b, 0.0)


FAILING = [
    ("astype-order", lambda b: b.astype(np.float32, order="Z"), ValueError,
     "order: expected 'C', 'F', 'A' or 'K', got 'Z'"),
    ("copy-order", lambda b: b.copy(order="Z"), ValueError,
     "order: expected 'C', 'F', 'A' or 'K', got 'Z'"),
    ("empty_like-order", lambda b: ndws.empty_like(b, order="Z"), ValueError,
     "order: expected 'C', 'F', 'A' or 'K', got 'Z'"),
    ("ones_like-order", lambda b: ndws.ones_like(b, order="Z"), ValueError,
     "order: expected 'C', 'F', 'A' or 'K', got 'Z'"),
    ("reshape-copy", lambda b: b.reshape(7, copy=True), ValueError,
     "cannot reshape array of size 6 into shape (7,)"),
    ("divmod-errstate", _divmod_by_zero, FloatingPointError,
     "divide by zero encountered in divmod"),
    ("astype-safe", lambda b: b.astype(np.int8, casting="safe"), TypeError,
     "Cannot cast array data from dtype('float64') to dtype('int8') according to the rule "
     "'safe'"),
    ("full-None", lambda b: ndws.full(3, None), TypeError,
     "fill_value: expected a number or an array of numbers, got NoneType None"),
    ("full_like-None", lambda b: ndws.full_like(b, None), TypeError,
     "fill_value: expected a number or an array of numbers, got NoneType None"),
    ("full-shape", lambda b: ndws.full(3, [1.0, 2.0]), ValueError,
     "fill_value: shape (2,) can't be broadcast to the array's shape (3,)"),
    ("add-out", lambda b: ndws.add(b, 1, out="str"), TypeError,
     "add: out must be an NDArray (or a numpy.ndarray), got str 'str'"),
    ("where-cast", lambda b: ndws.where(np.arange(6) > 2, b, 0.5, out=np.zeros(6, np.int8)),
     TypeError, "where: cannot cast the result from dtype('float64') to out's dtype "
     "dtype('int8') with casting rule 'same_kind'"),
]


@pytest.mark.parametrize("conf", [BIG, SPILLING], ids=["main-block", "spills"])
@pytest.mark.parametrize("call, exc, msg", [c[1:] for c in FAILING], ids=[c[0] for c in FAILING])
def test_a_failed_call_keeps_no_workspace_bytes(conf, call, exc, msg):
    with ndws.workspace("FAILING", conf) as ws:
        b = ndws.arange(6.0)
        before = counters(ws)
        with pytest.raises(exc) as info:
            call(b)
        assert str(info.value) == msg
        assert counters(ws) == before
        assert b.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_two_outputs_are_both_given_back():
    # rollback works newest first, so an op with two new outputs returns both
    with ndws.workspace("TWO_OUT", BIG) as ws:
        b = ndws.arange(1.0, 7.0)
        before = counters(ws)
        with np.errstate(divide="raise", invalid="raise"):
            for call in (lambda: np.divmod(b, 0.0), lambda: divmod(b, 0.0),
                         lambda: np.modf(b / 0.0)):
                with pytest.raises(FloatingPointError):
                    call()
                assert counters(ws) == before
        q, r = divmod(b, 2.0)                 # and the bytes are reused
        assert (q.tolist(), r.tolist()) == ([0.0, 1.0, 1.0, 2.0, 2.0, 3.0],
                                             [1.0, 0.0, 1.0, 0.0, 1.0, 0.0])
        assert ws.this_cycle_allocations == before[0] + 2 * ndws.ALIGNMENT


# ------------------------------------------------------------------------------------------------
# Clear errors that name the argument


CLEAR = [
    ("out", lambda: ndws.add(ndws.zeros(3), 1, out="str"), TypeError,
     "add: out must be an NDArray (or a numpy.ndarray), got str 'str'"),
    ("out-tuple", lambda: ndws.add(ndws.zeros(3), 1, out=(3,)), TypeError,
     "add: out must be an NDArray (or a numpy.ndarray), got int 3"),
    ("reduce-out", lambda: ndws.zeros(3).prod(out=[1]), TypeError,
     "prod: out must be an NDArray (or a numpy.ndarray), got list [1]"),
    ("ddof-str", lambda: ndws.zeros(3).var(ddof="x"), TypeError,
     "ddof: expected a number, got str 'x'"),
    ("ddof-huge", lambda: ndws.zeros(3).std(ddof=10**30), ValueError,
     "ddof: must fit in a 64-bit integer, got 1000000000000000000000000000000"),
    ("ddof-huge-fn", lambda: ndws.var(np.zeros(3), ddof=-10**30), ValueError,
     "ddof: must fit in a 64-bit integer, got -1000000000000000000000000000000"),
    ("arange-step", lambda: ndws.arange(0, 10, 10**30), ValueError,
     "step: must fit in a 64-bit integer, got 1000000000000000000000000000000"),
    ("arange-stop", lambda: ndws.arange(0, "10"), TypeError,
     "stop: expected a real number, got str '10'"),
    ("arange-zero-step", lambda: ndws.arange(0, 10, 0), ValueError, "step: must not be zero"),
    ("full-None", lambda: ndws.full(3, None), TypeError,
     "fill_value: expected a number or an array of numbers, got NoneType None"),
    ("empty_like-None", lambda: ndws.empty_like(None), TypeError,
     "a: expected an array (the prototype of the new array's shape and dtype), got None"),
    ("dot-str", lambda: ndws.zeros(3).dot("x"), TypeError,
     "dot: unsupported operand b of type 'str'"),
    ("matmul-str", lambda: ndws.matmul(ndws.zeros((2, 2)), "x"), TypeError,
     "matmul: unsupported operand x2 of type 'str'"),
    ("matmul-object", lambda: ndws.matmul(ndws.zeros((2, 2)), np.ones((2, 2), dtype=object)),
     TypeError, "matmul: unsupported operand x2 of dtype object"),
    # norm multiplied the NotImplemented its operand check returned; clip with no bound
    # copied it into out
    ("norm-str", lambda: ndws.norm("abc"), TypeError, "norm: unsupported operand x of type 'str'"),
    ("norm-None-inside", lambda: ndws.norm([1.0, None]), TypeError,
     "norm: unsupported operand x of type 'list'"),
    ("clip-no-bounds-out", lambda: ndws.clip(["a"] * 3, None, None, out=ndws.zeros(3)),
     TypeError, "clip: unsupported operand a of type 'list'"),
    ("shape-None", lambda: ndws.zeros(None), TypeError,
     "shape: expected an int or a sequence of ints, got None"),
    ("shape-str", lambda: ndws.empty((2, "a")), TypeError,
     "shape: expected an int or a sequence of ints, got (2, 'a')"),
    ("shape-bool", lambda: ndws.ones(True), TypeError,
     "shape: expected an int or a sequence of ints, got True"),
    ("shape-huge", lambda: ndws.zeros(10**30), ValueError,
     "shape: 1000000000000000000000000000000 is too many bytes: array is too big; "
     "`arr.size * arr.dtype.itemsize` is larger than the maximum possible size."),
    ("shape-huge-product", lambda: ndws.empty((2**40, 2**40)), ValueError,
     "shape: (1099511627776, 1099511627776) of float64 is too many bytes: array is too big; "
     "`arr.size * arr.dtype.itemsize` is larger than the maximum possible size."),
    ("full-2**70-int64", lambda: ndws.full((2,), 2**70, dtype=np.int64), ValueError,
     "fill_value: 1180591620717411303424 is out of bounds for int64 (it holds "
     "[-9223372036854775808, 9223372036854775807])"),
    ("full-300-int8", lambda: ndws.full(3, 300, dtype=np.int8), ValueError,
     "fill_value: 300 is out of bounds for int8 (it holds [-128, 127])"),
    ("full-2**70", lambda: ndws.full(3, 2**70), ValueError,
     "fill_value: 1180591620717411303424 does not fit in a 64-bit integer (give a float, or a "
     "float dtype)"),
    ("full_like-uint8", lambda: ndws.full_like(np.zeros(2, np.uint8), -1), ValueError,
     "fill_value: -1 is out of bounds for uint8 (it holds [0, 255])"),
    ("zeros_like-str", lambda: ndws.zeros_like("abc"), TypeError,
     "a: expected a number or an array of numbers, got str 'abc'"),
    ("ones_like-big", lambda: ndws.ones_like([2**70]), ValueError,
     "a: [1180591620717411303424] does not fit in a 64-bit integer (give a float, or a float "
     "dtype)"),
    ("empty_like-ragged", lambda: ndws.empty_like([[1], [1, 2]]), ValueError,
     "a: can't be made an array of numbers (setting an array element with a sequence. The "
     "requested array has an inhomogeneous shape after 1 dimensions. The detected shape was "
     "(2,) + inhomogeneous part.)"),
    ("array-str", lambda: ndws.array("abc"), TypeError,
     "obj: ndws arrays hold numbers (bool, int, uint, float, complex); got dtype('<U3')"),
    ("array-object", lambda: ndws.asarray(np.array([None, 1])), TypeError,
     "obj: expected a number or an array of numbers, got ndarray array([None, 1], "
     "dtype=object)"),
    # given a dtype, NumPy reads text and makes None a NaN: ndws refuses them as without one
    ("array-None-dtype", lambda: ndws.asarray([1.0, None], np.float32), TypeError,
     "obj: expected a number or an array of numbers, got list [1.0, None]"),
    ("array-None-scalar", lambda: ndws.array(None, dtype=np.float64), TypeError,
     "obj: expected a number or an array of numbers, got NoneType None"),
    ("array-text-dtype", lambda: ndws.asarray(["1.5", "2"], np.float32), TypeError,
     "obj: ndws arrays hold numbers (bool, int, uint, float, complex); got dtype('<U3')"),
    ("array-text-numpy", lambda: ndws.array(np.array(["1"]), dtype=np.int32), TypeError,
     "obj: ndws arrays hold numbers (bool, int, uint, float, complex); got dtype('<U1')"),
    ("array-bytes-in-objects", lambda: ndws.asarray(np.array([1, b"2"], dtype=object),
                                                    np.float64), TypeError,
     "obj: expected a number or an array of numbers, got ndarray array([1, b'2'], "
     "dtype=object)"),
    # and writes into an array likewise (NumPy would store NaN or the parsed text)
    ("setitem-None", lambda: ndws.zeros(3).__setitem__(0, None), TypeError,
     "setitem: value: expected a number or an array of numbers, got NoneType None"),
    ("setitem-list-None", lambda: ndws.zeros(3).__setitem__(slice(0, 2), [None, 1]), TypeError,
     "setitem: value: expected a number or an array of numbers, got list [None, 1]"),
    ("setitem-text", lambda: ndws.zeros(3).__setitem__(1, "5"), TypeError,
     "setitem: value: ndws arrays hold numbers (bool, int, uint, float, complex); got "
     "dtype('<U1')"),
    ("fill-text", lambda: ndws.zeros(3, np.float32).fill("3"), TypeError,
     "fill: value: ndws arrays hold numbers (bool, int, uint, float, complex); got "
     "dtype('<U1')"),
    ("assign-None", lambda: ndws.zeros(2).assign([1.0, None]), TypeError,
     "assign: value: expected a number or an array of numbers, got list [1.0, None]"),
    ("array-2**70", lambda: ndws.array([1, 2**70]), ValueError,
     "obj: [1, 1180591620717411303424] does not fit in a 64-bit integer (give a float, or a "
     "float dtype)"),
    ("array-2**70-int64", lambda: ndws.array(2**70, dtype=np.int64), ValueError,
     "obj: 1180591620717411303424 is out of bounds for int64 (Python int too large to convert "
     "to C long)"),
    ("array-ndmin", lambda: ndws.array([1.0], ndmin="2"), TypeError,
     "ndmin: expected an int, got str '2'"),
    ("array-order", lambda: ndws.array([1.0], order="Q"), ValueError,
     "order: expected 'C', 'F', 'A' or 'K', got 'Q'"),
    ("eye-negative", lambda: ndws.eye(-1), ValueError, "N: expected an int >= 0, got -1"),
    ("eye-float", lambda: ndws.eye(3, 2.0), TypeError, "M: expected an int >= 0, got float 2.0"),
    ("eye-huge", lambda: ndws.eye(2**31), ValueError,
     "N, M: 4611686018427387904 elements of 8 bytes are too many: array is too big; "
     "`arr.size * arr.dtype.itemsize` is larger than the maximum possible size."),
    ("eye-k", lambda: ndws.eye(3, k=2**70), ValueError,
     "k: must fit in a 64-bit integer, got 1180591620717411303424"),
    ("linspace-num", lambda: ndws.linspace(0, 1, 2.5), TypeError,
     "num: expected an int >= 0, got float 2.5"),
    ("linspace-huge", lambda: ndws.linspace(0, 1, 2**62), ValueError,
     "num: 4611686018427387904 elements of 8 bytes are too many: array is too big; "
     "`arr.size * arr.dtype.itemsize` is larger than the maximum possible size."),
    ("linspace-str", lambda: ndws.linspace("a", 1), TypeError,
     "start: expected a number or an array of numbers, got str 'a'"),
    ("arange-huge", lambda: ndws.arange(0, 2**62), ValueError,
     "stop: too many values from start=0 to stop=4611686018427387904 by step=None (array is "
     "too big; `arr.size * arr.dtype.itemsize` is larger than the maximum possible size.)"),
    ("statistics-file", lambda: ndws.get_workspace_manager()
     .print_allocation_statistics_for_current_thread(file="notafile"), TypeError,
     "file: expected a text stream with a write() method, got str 'notafile'"),
]


@pytest.mark.parametrize("call, exc, msg", [c[1:] for c in CLEAR], ids=[c[0] for c in CLEAR])
def test_errors_name_the_argument(call, exc, msg):
    with pytest.raises(exc) as info:
        call()
    assert type(info.value) is exc
    assert str(info.value) == msg


CREATION = ["shape-huge", "shape-huge-product", "full-2**70-int64", "full-300-int8",
            "full-2**70", "full_like-uint8", "zeros_like-str", "ones_like-big",
            "empty_like-ragged", "array-str", "array-object", "array-2**70", "array-2**70-int64",
            "array-ndmin", "array-order", "eye-negative", "eye-float", "eye-huge", "eye-k",
            "linspace-num", "linspace-huge", "linspace-str", "arange-huge", "full-None"]


@pytest.mark.parametrize("write", [
    lambda x, v: x.assign(v), lambda x, v: x.__setitem__(slice(None), v),
    lambda x, v: x.__setitem__(slice(None), list(v)), lambda x, v: x.fill(v[1]),
], ids=["assign", "setitem", "setitem-list", "fill"])
def test_an_object_that_is_no_number_is_refused_before_anything_is_written(write):
    # NumPy's cast writes the elements before the first it can't convert: [5.0, object(),
    # 7.0] left 5.0 in x[0] before its TypeError
    x = ndws.ones(3)
    v = np.array([5.0, object(), 7.0], dtype=object)
    with pytest.raises(TypeError, match=r"^(assign|setitem|fill): value: expected a number "
                                        r"or an array of numbers, got "):
        write(x, v)
    assert x.tolist() == [1.0, 1.0, 1.0]
    # numbers of any kind in an object array still convert (Decimal, NumPy scalars, bool)
    from decimal import Decimal
    x.assign(np.array([Decimal("2.5"), np.float32(3), True], dtype=object))
    assert x.tolist() == [2.5, 3.0, 1.0]


@pytest.mark.parametrize("dtype, value", [
    (np.int8, [1, 2, 1000]), (np.uint8, (1, -1, 3)), (np.float64, [1.0, 1 + 1j, 3.0]),
    (np.int8, (1, 2.7, True)), (np.bool_, [2, 0, 1]),
])
def test_a_sequence_written_by_setitem_is_all_or_nothing(dtype, value):
    # NumPy writes a list element by element: a[:] = [1, 2, 1000] into int8 leaves [1, 2, 0]
    # before its OverflowError. ndws converts the whole sequence first: NumPy's values and
    # NumPy's error, and on an error nothing written
    x, a = ndws.zeros(3, dtype=dtype), np.zeros(3, dtype=dtype)
    try:
        a[:] = value
    except (OverflowError, TypeError) as exc:
        with pytest.raises(type(exc), match=re.escape(str(exc))):
            x[:] = value
        assert not x.numpy().any()
    else:
        x[:] = value
        np.testing.assert_array_equal(x.numpy(), a)


@pytest.mark.parametrize("call, exc", [c[1:3] for c in CLEAR if c[0] in CREATION],
                         ids=[c[0] for c in CLEAR if c[0] in CREATION])
def test_a_refused_creation_leaves_the_workspace_as_it_was(call, exc):
    assert len(CREATION) == len({c[0] for c in CLEAR} & set(CREATION))
    with ndws.workspace("HOSTILE") as ws:
        keep = ndws.zeros(3)
        before = (ws.this_cycle_allocations, ws.primary_offset, ws.spilled_size)
        with pytest.raises(exc):
            call()
        assert (ws.this_cycle_allocations, ws.primary_offset, ws.spilled_size) == before
        assert keep.tolist() == [0.0, 0.0, 0.0]


def test_the_matmul_operator_defers_to_the_other_operand():
    # the operators still return NotImplemented, so Python's own message (and the other
    # operand's __rmatmul__) apply
    with pytest.raises(TypeError, match=r"unsupported operand type\(s\) for @: "
                                        r"'ndws._core.NDArray' and 'str'"):
        ndws.zeros((2, 2)) @ "x"

    class Other:
        def __rmatmul__(self, left):
            return "other"

    assert ndws.zeros((2, 2)) @ Other() == "other"


@pytest.mark.parametrize("call, msg", [
    (lambda x: x * "2", "multiply: unsupported operand x2 of type 'str'"),
    (lambda x: "2" * x, "multiply: unsupported operand x1 of type 'str'"),
    (lambda x: b"2" * x, "multiply: unsupported operand x1 of type 'bytes'"),
    (lambda x: x * [1, "a", 2], "multiply: unsupported operand x2 of type 'list'"),
    (lambda x: ("a",) + x, "add: unsupported operand x1 of type 'tuple'"),
    (lambda x: x % "2", "remainder: unsupported operand x2 of type 'str'"),
])
def test_operators_name_a_builtin_sequence_of_no_numbers(call, msg):
    # Python would otherwise go on to the sequence's repetition, which asks x.__index__ and
    # reports "only integer scalar arrays can be converted to a scalar index"
    x = ndws.asarray(np.ones(3, np.float32))
    with pytest.raises(TypeError, match=re.escape(msg)):
        call(x)
    with pytest.raises(TypeError, match="multiply: unsupported operand x2 of type 'str'"):
        x *= "2"
    assert x.tolist() == [1.0, 1.0, 1.0]
    # a sequence of numbers is an array operand, and == still compares element-wise
    assert (x * (1, 2, 3)).tolist() == [1.0, 2.0, 3.0]
    assert (x == "2").tolist() == [False, False, False]

    class Other:
        def __rmul__(self, left):
            return "other"

    assert x * Other() == "other"


def test_private_exception_classes_do_not_escape():
    for call in (lambda: ndws.zeros(3).dot("x"), lambda: ndws.dot("x", ndws.zeros(3)),
                 lambda: ndws.matmul("x", ndws.zeros(3))):
        with pytest.raises(TypeError) as info:
            call()
        assert type(info.value) is TypeError


# found by probing every public entry with hostile arguments (each in a child process)

@pytest.mark.parametrize("call, exc, msg", [
    (lambda: ndws.sum(10**30), TypeError,
     "sum: a must be an array of numbers, got int 1000000000000000000000000000000"),
    (lambda: ndws.argmax(np.array([1, None], dtype=object)), TypeError,
     "argmax: a must be an array of numbers, got ndarray array([1, None], dtype=object)"),
    (lambda: ndws.max(np.array(["a", "b"])), TypeError,
     "max: a must be an array of numbers, got dtype <U1"),
    (lambda: ndws.ones((3, 3)).sum(axis=10**30), np.exceptions.AxisError,
     "axis 1000000000000000000000000000000 is out of bounds for array of dimension 2"),
    (lambda: ndws.ones((3, 3)).max(axis=-10**30), np.exceptions.AxisError,
     "axis -1000000000000000000000000000000 is out of bounds for array of dimension 2"),
    (lambda: ndws.nn.functional.softmax(ndws.ones((2, 2)), axis=10**30), ValueError,
     "softmax: axis 1000000000000000000000000000000 is out of bounds for an array of "
     "dimension 2"),
    (lambda: ndws.data.ArrayDataSetIterator(ndws.array(3.0), ndws.ones(1), 2), ValueError,
     "features must have at least one dimension (examples), got a 0-d array"),
])
def test_probe_findings(call, exc, msg):
    import ndws.data            # noqa: F401  (the submodules the calls use)
    import ndws.nn.functional   # noqa: F401
    with pytest.raises(exc) as info:
        call()
    assert type(info.value) is exc
    assert str(info.value) == msg


# -- workspace sizes the machine can't give --------------------------------------------------------

def test_a_strict_workspace_beyond_the_limit_names_the_field():
    with pytest.raises(ndws.ConfigurationError, match=r"^initial_size: must be at most "
                                                      r"4611686018427387903 bytes, got "
                                                      r"4611686018427387904$"):
        ndws.WorkspaceConfiguration(initial_size=2**62, policy_allocation="STRICT")


def test_a_strict_workspace_the_machine_cant_give_names_the_workspace_and_the_field():
    conf = ndws.WorkspaceConfiguration(initial_size=2**62 - 1, policy_allocation="STRICT")
    with pytest.raises(MemoryError, match=r"^Workspace \[HUGE\]: can't allocate its block of "
                                          r"4611686018427387903 bytes \(initial_size="
                                          r"4611686018427387903, min_size=0, max_size=0, "):
        with ndws.workspace("HUGE", conf):
            pass
    assert ndws.current_workspace() is None
    assert not ndws.get_workspace_manager().check_if_workspace_exists("HUGE")


def test_a_learned_size_the_machine_cant_give_leaves_a_spilling_workspace():
    conf = ndws.WorkspaceConfiguration(min_size=2**62 - 1, policy_allocation="STRICT")
    ws = ndws.get_workspace_manager().get_workspace_for_current_thread(conf, "LEARN")
    with pytest.raises(MemoryError, match=r"^Workspace \[LEARN\]: can't allocate its block of "
                                          r"4611686018427387903 bytes \(initial_size=0, "
                                          r"min_size=4611686018427387903, .*the largest cycle "
                                          r"64 bytes\): not enough memory$"):
        with ws:                                # FIRST_LOOP: sized as the first cycle closes
            ndws.zeros(3)
    assert ndws.current_workspace() is None
    assert ws.current_size == 0                     # no block: it claims none
    with ws:
        x = ndws.zeros(3)
        assert x.workspace_id == "LEARN" and x.tolist() == [0.0] * 3
        assert ws.spilled_size == 64
    ws.destroy()


@pytest.mark.parametrize("with_path", [False, True], ids=["temporary", "path"])
def test_an_mmap_file_the_disk_cant_hold_is_refused_before_writing(tmp_path, monkeypatch,
                                                                    with_path):
    import os

    class Free:                                     # 400 KiB free on every file system
        f_bavail, f_frsize = 100, 4096
    monkeypatch.setattr(os, "statvfs", lambda directory: Free())
    path = tmp_path / "ws.bin"
    conf = ndws.WorkspaceConfiguration(initial_size=2**40, policy_location="MMAP",
                                       policy_learning="NONE",
                                       temp_file_path=path if with_path else None)
    with pytest.raises(OSError, match=r"^\[Errno 28\] Workspace \[MAPPED\]: initial_size="
                                      r"1099511627776 bytes for its memory-mapped file: more "
                                      r"than the 409600 bytes free in "):
        with ndws.workspace("MAPPED", conf):
            pass
    assert not path.exists() and not list(tmp_path.iterdir())
    assert not ndws.get_workspace_manager().check_if_workspace_exists("MAPPED")
    small = conf.replace(initial_size=16384)            # what fits is still written
    with ndws.workspace("MAPPED", small) as ws:
        assert ndws.zeros(4).workspace is ws


@pytest.mark.parametrize("call, role", [
    (lambda be: ndws.nn.functional.lstm_forward(be((1, 1, 2)), np.ones((1, 4)), np.ones((1, 4)),
                                                np.zeros(4)), "lstm_forward: x"),
    (lambda be: ndws.nn.functional.lstm_forward(np.ones((1, 1, 2)), np.ones((1, 4)),
                                                np.ones((1, 4)), np.zeros(4),
                                                out=be((1, 1, 2))), "lstm_forward: out"),
    (lambda be: ndws.nn.functional.conv2d(be((1, 1, 3, 3)), np.ones((1, 1, 2, 2))),
     "conv2d: x"),
    (lambda be: ndws.nn.functional.relu(be((2, 3))), "relu: x"),
])
def test_an_array_of_the_other_byte_order_is_named(call, role):
    # ndws arrays hold native byte order: a NumPy array in the other one is refused by the
    # kernel entry that takes it, naming the argument and the conversion
    import ndws.nn.functional  # noqa: F401

    other = np.dtype(np.float64).newbyteorder("S")
    with pytest.raises(TypeError, match=rf"^{role} has dtype '{other.str}', not in native byte "
                                        rf"order \(ndws arrays use it: convert with "
                                        rf"\.astype\('{np.dtype(np.float64).str}'\)\)$"):
        call(lambda shape: np.zeros(shape, other))
