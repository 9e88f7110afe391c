# Shared C types for ndws' Cython modules (scikit-learn's `_typedefs.pxd` habit): every kernel
# names its element and index types from here, so a dtype change is one edit.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

ctypedef float float32_t
ctypedef double float64_t
ctypedef Py_ssize_t intp_t

ctypedef fused floating_t:
    float32_t
    float64_t
