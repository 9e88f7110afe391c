# ndws._fallback: the NumPy path of the entry points (see _fallback.pyx).

# `ufunc(*args)` computed by NumPy into a placed result (or `out`); NotImplemented for an
# operand NumPy can only see as an object when `dunder` (the operators' cue), else TypeError.
cdef object numpy_ufunc(object ufunc, tuple args, object out, dict kwargs, bint dunder)
