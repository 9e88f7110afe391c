"""DLPack: NDArray.__dlpack__ / __dlpack_device__ and ndws.from_dlpack, with NumPy (and
PyTorch where it is installed) on the other side. A DLPack export is counted like a buffer
export (docs/architecture.md, invariant 6)."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import ndws

DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
          np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128]
SMALL = ndws.WorkspaceConfiguration(initial_size=1 << 16, policy_learning="NONE")


def values(dtype, shape=(3, 4)):
    return (np.arange(int(np.prod(shape))) % 5).astype(dtype).reshape(shape)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_numpy_round_trip_is_zero_copy(dtype):
    src = values(dtype)
    a = ndws.array(src)
    n = np.from_dlpack(a)
    assert n.dtype == src.dtype and n.shape == src.shape
    np.testing.assert_array_equal(n, src)
    n[0, 0] = 1                                   # same memory, both ways
    assert a[0, 0].item() == n[0, 0]
    back = ndws.from_dlpack(n)
    assert back.dtype == src.dtype and not back.is_attached()
    np.testing.assert_array_equal(back.numpy(), n)


@pytest.mark.parametrize("view", [lambda a: a.T, lambda a: a[::-1, ::2], lambda a: a[1:, 1],
                                  lambda a: a[None, :, :]],
                         ids=["transposed", "negative-strided", "column", "new-axis"])
def test_strided_views_keep_their_strides(view):
    src = values(np.float32)
    n = np.from_dlpack(view(ndws.array(src)))
    expected = view(src)
    np.testing.assert_array_equal(n, expected)
    assert n.strides == expected.strides


def test_zero_size_and_zero_d():
    assert np.from_dlpack(ndws.zeros((0, 3))).shape == (0, 3)
    assert np.from_dlpack(ndws.array(2.5)).item() == 2.5


def test_device_and_versions():
    a = ndws.arange(4.0)
    assert a.__dlpack_device__() == (1, 0)
    legacy = a.__dlpack__()
    assert "dltensor" in repr(legacy) and "versioned" not in repr(legacy)
    versioned = a.__dlpack__(max_version=(1, 0))
    assert "dltensor_versioned" in repr(versioned)
    assert "dltensor_versioned" in repr(a.__dlpack__(max_version=(1, 3)))
    assert "versioned" not in repr(a.__dlpack__(max_version=(0, 8)))   # an older consumer


def test_read_only_arrays_need_a_versioned_consumer():
    src = np.arange(3.0)
    src.flags.writeable = False
    ro = ndws.from_numpy(src)
    with pytest.raises(BufferError, match="read-only array can only be exported to a DLPack "
                                          r"consumer that accepts versioned capsules"):
        ro.__dlpack__()
    n = np.from_dlpack(ro)                        # NumPy asks for a versioned capsule
    assert not n.flags.writeable
    np.testing.assert_array_equal(n, src)


def test_copy_keyword():
    a = ndws.arange(3.0)
    n = np.from_dlpack(a, copy=True)
    n[0] = 7.0
    assert a[0].item() == 0.0
    assert np.from_dlpack(a, copy=False)[0] == 0.0
    with pytest.raises(ValueError, match=r"^copy: expected True, False or None, got 'yes'$"):
        a.__dlpack__(copy="yes")


@pytest.mark.parametrize("kw, msg", [
    (dict(stream=1), "stream: ndws arrays live on the CPU, which has no streams; got 1"),
    (dict(dl_device=(2, 0)), r"dl_device: ndws arrays live on the CPU \(1, 0\), got \(2, 0\)"),
])
def test_devices_and_streams_other_than_the_cpu_are_refused(kw, msg):
    with pytest.raises(BufferError, match=msg):
        ndws.arange(3.0).__dlpack__(**kw)


def test_a_dlpack_export_is_counted_like_a_buffer_export():
    ws = ndws.workspace("DLPACK_EXPORT", SMALL)
    with pytest.warns(ndws.WorkspaceWarning, match=r"^Workspace \[DLPACK_EXPORT\]: a cycle "
                                                   r"ended while 1 NumPy export"):
        with ws:
            a = ndws.full(8, 3.0)
            n = np.from_dlpack(a)
    assert ws.blocks_left_to_exports == 1
    with ws:
        ndws.full(8, -1.0)                        # the next cycle writes a fresh block
    np.testing.assert_array_equal(n, np.full(8, 3.0))
    with pytest.raises(ndws.WorkspaceError) as info:
        a.__dlpack__()                            # the array itself is stale
    assert info.value.kind == "leaked" and info.value.op == "__dlpack__"


def test_an_unconsumed_capsule_gives_its_export_back():
    ws = ndws.workspace("DLPACK_DROP", SMALL)
    with ws:
        a = ndws.full(8, 3.0)
        capsule = a.__dlpack__(max_version=(1, 0))
        del capsule                               # never consumed: the destructor frees it
        gc.collect()
        legacy = a.__dlpack__()
        del legacy
    assert ws.blocks_left_to_exports == 0         # nothing held the block at the cycle end


def test_export_policy_fail_refuses_the_cycle_end():
    ws = ndws.workspace("DLPACK_FAIL", SMALL.replace(policy_exports="FAIL"))
    ws.notify_scope_entered()
    n = np.from_dlpack(ndws.full(4, 1.0))
    with pytest.raises(ndws.WorkspaceError) as info:
        ws.close()
    assert info.value.kind == "exported"
    del n
    gc.collect()
    ws.close()
    assert not ws.is_scope_active


def test_stale_arrays_are_not_exported():
    with ndws.workspace("DLPACK_STALE", SMALL):
        a = ndws.zeros(3)
    with pytest.raises(ndws.WorkspaceError):
        np.from_dlpack(a)


def test_unsupported_dtypes():
    a = ndws.from_numpy(np.zeros(3, dtype=np.longdouble))
    with pytest.raises(BufferError, match=r"^DLPack has no type for dtype dtype\('float128'\)$"):
        a.__dlpack__()


def test_strides_that_are_not_whole_elements_are_refused():
    raw = np.zeros(17, dtype=np.uint8)
    odd = np.lib.stride_tricks.as_strided(raw[1:].view(np.float64), shape=(2,), strides=(4,))
    with pytest.raises(BufferError, match=r"DLPack strides count elements"):
        ndws.from_numpy(odd).__dlpack__()


@pytest.mark.parametrize("bad, exc, msg", [
    ([1, 2], TypeError, "x: expected an object with __dlpack__ (a DLPack tensor), got list"),
    (None, TypeError, "x: expected an object with __dlpack__ (a DLPack tensor), got NoneType"),
])
def test_from_dlpack_refuses_non_tensors(bad, exc, msg):
    with pytest.raises(exc) as info:
        ndws.from_dlpack(bad)
    assert str(info.value) == msg


def test_from_dlpack_arguments():
    with pytest.raises(ValueError, match=r"^device: ndws arrays live on the CPU, got 'cuda'$"):
        ndws.from_dlpack(np.zeros(2), device="cuda")
    with pytest.raises(ValueError, match=r"^copy: expected True, False or None, got 1$"):
        ndws.from_dlpack(np.zeros(2), copy=1)
    src = np.arange(3.0)
    with ndws.workspace("DLPACK_COPY", SMALL):
        c = ndws.from_dlpack(src, copy=True)      # a copy is placed like any new array
        assert c.is_attached() and c.tolist() == [0.0, 1.0, 2.0]
        v = ndws.from_dlpack(src)                 # a view is detached and shares memory
        assert not v.is_attached()
        src[0] = 5.0
        assert v[0].item() == 5.0 and c[0].item() == 0.0


def test_pytorch_round_trip():
    torch = pytest.importorskip("torch")
    a = ndws.array(values(np.float32))
    t = torch.from_dlpack(a)
    assert tuple(t.shape) == a.shape and t.dtype == torch.float32
    t[0, 0] = 42.0
    assert a[0, 0].item() == 42.0
    back = ndws.from_dlpack(t)
    np.testing.assert_array_equal(back.numpy(), t.numpy())
    back[1, 1] = -1.0
    assert t[1, 1].item() == -1.0
