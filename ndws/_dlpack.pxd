# DLPack (v1.0) for Cython: the structs of ndws/_dlpack.h and the codes NDArray.__dlpack__ uses
# (docs/workspaces.md, "NumPy interop"). Declarations only: no module to import at run time.
from libc.stdint cimport uint8_t, uint16_t, uint32_t, int32_t, int64_t, uint64_t

cdef extern from "_dlpack.h":
    ctypedef struct DLPackVersion "ndws_DLPackVersion":
        uint32_t major
        uint32_t minor
    ctypedef struct DLDevice "ndws_DLDevice":
        int32_t device_type
        int32_t device_id
    ctypedef struct DLDataType "ndws_DLDataType":
        uint8_t code
        uint8_t bits
        uint16_t lanes
    ctypedef struct DLTensor "ndws_DLTensor":
        void* data
        DLDevice device
        int32_t ndim
        DLDataType dtype
        int64_t* shape
        int64_t* strides
        uint64_t byte_offset
    ctypedef struct DLManagedTensor "ndws_DLManagedTensor":
        DLTensor dl_tensor
        void* manager_ctx
        void (*deleter)(DLManagedTensor*) noexcept
    ctypedef struct DLManagedTensorVersioned "ndws_DLManagedTensorVersioned":
        DLPackVersion version
        void* manager_ctx
        void (*deleter)(DLManagedTensorVersioned*) noexcept
        uint64_t flags
        DLTensor dl_tensor

cdef enum:                     # DLDeviceType, DLDataTypeCode and the v1.0 flags
    DL_CPU = 1
    DL_INT = 0
    DL_UINT = 1
    DL_FLOAT = 2
    DL_COMPLEX = 5
    DL_BOOL = 6
    DL_READ_ONLY = 1
    DL_IS_COPIED = 2
