"""The arguments of ndws.nn._rnn's time loops, read with the GIL held: operands, formats,
activations, sizes, the loop workspace, and one call's allocations (outputs, temporaries for
outputs that overlap an input, scratch) for the kernel-entry contract's rollback
(docs/architecture.md)."""
cimport numpy as cnp

import numpy as np

from ndws._arena cimport Arena
from ndws._core cimport NDArray
from ndws._dispatch cimport (array_arg, scratch_arg, float_arg, new_result, whole_strides,
                             shape_of, arrays_overlap, second_name)
from ndws._typedefs cimport intp_t
from ndws.nn._activations cimport (ACT_N_ELEMENTWISE, _CallAllocations,
                                   activation_code)
from ndws.workspace import DummyWorkspace as _DummyWorkspace

cnp.import_array()

cdef object _U8 = np.dtype(np.uint8)

# sizes a call may reach: far from intp's overflow in every product the loops make
cdef intp_t SIZE_LIMIT = (<intp_t>1) << 48


cdef NDArray _operand(object x, str op, str role, object dtype=None):
    # a float32/float64 operand; its dtype must be `dtype` when given
    cdef NDArray a = float_arg(x, op, role)
    if dtype is not None and a._dtype != dtype:
        raise TypeError(f"{op}: {role} has dtype {a._dtype}, expected {dtype} (the dtype of x)")
    return a


cdef int _shape_is(NDArray a, tuple shape, str op, str role, str what) except -1:
    if shape_of(a) != shape:
        raise ValueError(f"{op}: {role} must have shape {shape} ({what}), got {shape_of(a)}")
    return 0


cdef bint _ncw(object data_format, str op) except -1:
    return not second_name(data_format, op, "data_format", "NCW", "NWC")


cdef tuple _seq_shape(intp_t B, intp_t c, intp_t T, bint ncw):
    return (B, c, T) if ncw else (B, T, c)


cdef void _seq_strides(NDArray a, bint ncw, intp_t* sb, intp_t* sc, intp_t* st) noexcept:
    # element strides of a sequence array along (batch, channels, time) whatever its format
    sb[0] = _es(a, 0)
    if ncw:
        sc[0] = _es(a, 1)
        st[0] = _es(a, 2)
    else:
        sc[0] = _es(a, 2)
        st[0] = _es(a, 1)


cdef int _check_size(tuple dims, str op) except -1:
    cdef object total = 1
    for d in dims:
        total *= d
        if d >= SIZE_LIMIT or total >= SIZE_LIMIT:
            raise ValueError(f"{op}: sizes {dims} are too large")
    return 0


cdef int _activation(object name, str op, str role, double* alpha) except -1:
    # the activation argument `role` of `op`, its errors named by both (the activations'
    # lookup names only "activation"); None is not identity, nor the network's default
    cdef int code
    if name is None:
        raise TypeError(f"{op}: {role} must be an activation name (a str), got None")
    try:
        code = activation_code(name, None, alpha)
    except (TypeError, ValueError) as exc:
        msg = str(exc)
        raise type(exc)(f"{op}: {role}: "
                        f"{msg[12:] if msg.startswith('activation: ') else msg}") from None
    if code >= ACT_N_ELEMENTWISE:
        raise ValueError(f"{op}: {role} must be an elementwise activation, got {name!r}")
    return code


cdef Arena _loop_workspace(object ws, str op):
    # None or a DummyWorkspace (scoped out, or DebugMode.BYPASS_EVERYTHING): no loop
    # workspace, the step's temporaries are scratch
    if ws is None or isinstance(ws, _DummyWorkspace):
        return None
    if not isinstance(ws, Arena):
        raise TypeError(f"{op}: loop_workspace must be an ndws.Workspace (or None), got "
                        f"{type(ws).__name__}")
    return <Arena>ws


cdef class _Call(_CallAllocations):
    """The allocations of one call, for the contract's rollback (docs/architecture.md): results
    and scratch placed in the current workspace, temporaries for outputs that overlap an input
    (computed there, copied into the output by finish()). fail() gives every placed array
    back, newest first."""

    def __cinit__(self, str op):
        self.outs = []

    cdef NDArray _place(self, object dtype, tuple shape):
        cdef intp_t dims[8]
        cdef int i
        cdef NDArray r
        for i in range(len(shape)):
            dims[i] = shape[i]
        r = new_result(dtype, len(shape), dims, self.op)
        self.made.append(r)
        return r

    cdef NDArray out(self, object out, object dtype, tuple shape, str role, tuple inputs):
        """`out` checked (dtype, shape, writeable, whole strides, no self-overlap, none with
        the call's other outputs), through a temporary when it overlaps an input; or a new
        result placed in the current workspace."""
        cdef NDArray o, t
        cdef int d
        if out is None:
            o = self._place(dtype, shape)
            self.outs.append((role, o))
            return o
        o = array_arg(out, self.op, role)
        if not o._writeable:
            raise ValueError(f"{self.op}: {role} is read-only")
        if o._dtype != dtype:
            raise TypeError(f"{self.op}: {role} has dtype {o._dtype}, expected {dtype}")
        if shape_of(o) != shape:
            raise ValueError(f"{self.op}: {role} has shape {shape_of(o)}, expected {shape}")
        if not whole_strides(o):
            raise ValueError(f"{self.op}: {role} has strides that are not whole "
                             f"{o._itemsize}-byte elements")
        for d in range(o._ndim if o._size > 0 else 0):     # (NumPy's empty arrays have
            if o._strides[d] == 0 and o._shape[d] > 1:        # zero strides: no overlap)
                raise ValueError(f"{self.op}: {role} has a zero stride: elements would overlap")
        for other_role, other in self.outs:
            if arrays_overlap(o, <NDArray>other):
                raise ValueError(f"{self.op}: {role} and {other_role} overlap")
        self.outs.append((role, o))
        for a in inputs:
            if a is not None and arrays_overlap(o, <NDArray>a):
                t = self._place(dtype, shape)
                self.temps.append((t, o))
                return t
        return o

    cdef char* scratch(self, object scratch, intp_t need, tuple arrays) except NULL:
        """`need` bytes of scratch, 64-byte aligned: the caller's `scratch=` array or a uint8
        array placed in the current workspace (it then lives until that cycle ends, as DL4J's
        working memory does)."""
        cdef NDArray a
        cdef intp_t off
        cdef intp_t shape[1]
        if scratch is None:
            shape[0] = need + ALIGN
            a = new_result(_U8, 1, shape, self.op)
            self.made.append(a)
        else:
            a = scratch_arg(scratch, self.op, arrays)
        off = (-<size_t>a._data) % ALIGN
        if a._size * a._itemsize - off < need:
            helper = "lstm" if self.op.startswith("lstm") else "simple_rnn"
            raise ValueError(f"{self.op}: scratch has {a._size * a._itemsize} bytes, the call "
                             f"needs {need + ALIGN} (see {helper}_scratch_bytes)")
        return a._data + off


cdef Py_ssize_t size_arg(object v, str op, str role, Py_ssize_t lo) except -1:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{op}: {role} must be an int, got {v!r}")
    if v < lo:
        raise ValueError(f"{op}: {role} must be >= {lo}, got {v!r}")
    if v >= SIZE_LIMIT:
        raise ValueError(f"{op}: {role} {v!r} is too large (at most 2**48 - 1)")
    return <intp_t>v
