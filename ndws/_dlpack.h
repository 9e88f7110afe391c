/* The structs of dlpack.h (v1.0), under ndws_ names, so the build needs no extra header
 * (ndws/_dlpack.pxd declares them for Cython; ndws/_core.pyx builds and frees DLPack capsules). */
#ifndef NDWS_DLPACK_H
#define NDWS_DLPACK_H
#include <stdint.h>
typedef struct { uint32_t major; uint32_t minor; } ndws_DLPackVersion;
typedef struct { int32_t device_type; int32_t device_id; } ndws_DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } ndws_DLDataType;
typedef struct {
    void *data; ndws_DLDevice device; int32_t ndim; ndws_DLDataType dtype;
    int64_t *shape; int64_t *strides; uint64_t byte_offset;
} ndws_DLTensor;
typedef struct ndws_DLManagedTensor {
    ndws_DLTensor dl_tensor; void *manager_ctx;
    void (*deleter)(struct ndws_DLManagedTensor *self);
} ndws_DLManagedTensor;
typedef struct ndws_DLManagedTensorVersioned {
    ndws_DLPackVersion version; void *manager_ctx;
    void (*deleter)(struct ndws_DLManagedTensorVersioned *self);
    uint64_t flags; ndws_DLTensor dl_tensor;
} ndws_DLManagedTensorVersioned;
#endif
