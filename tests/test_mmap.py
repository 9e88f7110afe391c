"""Memory-mapped workspaces (LocationPolicy.MMAP), sized by ND4J's MMAP rules (docs/workspaces.md)."""
from __future__ import annotations

import os

import numpy as np
import pytest

import ndws
from ndws import ConfigurationError, WorkspaceError


def mmap_conf(**kw):
    return ndws.WorkspaceConfiguration(policy_location="MMAP", policy_learning="NONE", **kw)


def test_file_is_zero_filled_in_16k_chunks_and_size_is_initial_size(tmp_path):
    path = tmp_path / "ws.bin"
    ws = ndws.workspace("MM1", mmap_conf(initial_size=100_000, temp_file_path=path))
    assert os.path.getsize(path) == 7 * 16384        # ceil(100000 / 16384) chunks
    assert ws.current_size == 100_000                 # no overallocation for MMAP
    with ws:
        a = ndws.full(1000, 2.5)
        assert ws.this_cycle_allocations == 8000 and ws.spilled_size == 0
        assert a.sum().item() == 2500.0
        b = ndws.zeros(20_000)                        # 160000 bytes: does not fit -> spills
        assert ws.spilled_size == 160_000
        assert b.is_attached()


def test_data_lands_in_the_file(tmp_path):
    path = tmp_path / "ws.bin"
    ws = ndws.workspace("MM2", mmap_conf(initial_size=4096, temp_file_path=path))
    with ws:
        ndws.arange(16, dtype=np.int64)
    ndws.get_workspace_manager().destroy_workspace(ws)
    data = np.fromfile(path, dtype=np.int64, count=16)
    np.testing.assert_array_equal(data, np.arange(16))


def test_existing_long_file_sets_the_size(tmp_path):
    path = tmp_path / "big.bin"
    path.write_bytes(bytes(50_000))
    ws = ndws.workspace("MM3", mmap_conf(temp_file_path=path))
    assert ws.current_size == 50_000
    ws2 = ndws.get_workspace_manager().create_new_workspace(
        mmap_conf(initial_size=10_000, temp_file_path=path), "MM3b")
    assert ws2.current_size == 50_000               # file already long enough
    assert os.path.getsize(path) == 50_000


def test_short_file_is_refilled(tmp_path):
    path = tmp_path / "short.bin"
    path.write_bytes(b"x" * 10)
    ws = ndws.workspace("MM4", mmap_conf(initial_size=20_000, temp_file_path=path))
    assert os.path.getsize(path) == 2 * 16384
    assert ws.current_size == 20_000
    assert path.read_bytes()[:10] == bytes(10)       # truncated and zero-filled


def test_empty_file_without_initial_size_is_refused(tmp_path):
    path = tmp_path / "empty.bin"
    path.write_bytes(b"")
    with pytest.raises(WorkspaceError, match="^Memory-mapped file should have positive "
                                             "length.$") as info:
        ndws.workspace("MM5", mmap_conf(temp_file_path=path))
    assert info.value.kind == "mmap"
    assert not ndws.get_workspace_manager().check_if_workspace_exists("MM5")


def test_temp_file_without_path(tmp_path):
    ws = ndws.workspace("MM6", mmap_conf(initial_size=5000))
    assert ws.current_size == 5000
    with ws:
        assert ndws.ones(5).sum().item() == 5.0


def test_configuration_rules():
    with pytest.raises(ConfigurationError) as info:
        ndws.WorkspaceConfiguration(policy_location="MMAP")
    assert info.value.field == "policy_learning"
    assert "Workspace backed by memory-mapped file can't have LearningPolicy defined" \
        in str(info.value)
    with pytest.raises(ValueError) as info:
        ndws.WorkspaceConfiguration(policy_location="MMAP", policy_learning="NONE")
    assert info.value.field == "initial_size"
    assert "MMAP target file path should be non-null or workspace initialSize should be >0 " \
           "for temp file" in str(info.value)


def test_destroyed_mmap_keeps_arrays_memory_safe(tmp_path):
    path = tmp_path / "ws.bin"
    ws = ndws.workspace("MM7", mmap_conf(initial_size=4096, temp_file_path=path))
    with ws:
        a = ndws.full(8, 7.0)
        exported = np.asarray(a)
        ws.destroy()
        with pytest.raises(WorkspaceError) as info:
            a.sum()
        assert info.value.kind == "destroyed"
        np.testing.assert_array_equal(exported, np.full(8, 7.0))  # mapping still alive
        del exported


def test_a_truncated_file_is_refused_at_the_next_cycle(tmp_path):
    # touching a mapped page past the end of a truncated file is SIGBUS: refuse before that
    path = tmp_path / "ws.bin"
    ws = ndws.workspace("MM_TRUNC", mmap_conf(initial_size=64 * 1024, temp_file_path=path))
    with ws:
        ndws.full(1000, 1.0)
    os.truncate(path, 4096)                          # someone else shortens the file
    before = (ws.generation, ws.cycles_count, ws.is_scope_active)
    with pytest.raises(WorkspaceError) as info:
        with ws:
            ndws.full(8000, 1.0)                     # would write past the end of the file
    assert info.value.kind == "mmap" and info.value.workspace_id == "MM_TRUNC"
    assert str(info.value) == (
        "Workspace [MM_TRUNC]: its memory-mapped file is now 4096 bytes, shorter than the "
        "65536 bytes mapped (truncated by another program?); using it would crash the "
        "process. Destroy this workspace and create a new one.")
    assert (ws.generation, ws.cycles_count, ws.is_scope_active) == before
    assert ndws.current_workspace() is None
    ndws.get_workspace_manager().destroy_workspace(ws)
    with ndws.workspace("MM_TRUNC", mmap_conf(initial_size=64 * 1024, temp_file_path=path)):
        assert ndws.full(8000, 1.0).sum().item() == 8000.0


def test_crash_reproducer_in_a_child_process(tmp_path):
    # the sequence that died of SIGBUS, run where a regression can only kill a child
    import subprocess
    import sys
    code = f"""
import os, ndws
conf = ndws.WorkspaceConfiguration(policy_location="MMAP", policy_learning="NONE",
                                   initial_size=1 << 20, temp_file_path={str(tmp_path / 'c.bin')!r})
ws = ndws.workspace("MM_CHILD", conf)
with ws:
    ndws.zeros(1000)
os.truncate({str(tmp_path / 'c.bin')!r}, 0)
try:
    with ws:
        ndws.full(100_000, 2.0)
except ndws.WorkspaceError as e:
    print(e.kind)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert (proc.returncode, proc.stdout.strip()) == (0, "mmap"), proc.stderr[-2000:]


@pytest.mark.parametrize("user_file", [True, False], ids=["user-file", "temp-file"])
def test_exports_alive_at_cycle_end_keep_the_workspace_memory_mapped(tmp_path, user_file):
    # the block is left to the NumPy view, and the workspace goes on in a freshly mapped
    # temporary file (never silently in RAM), saying so once
    path = tmp_path / "ws.bin"
    conf = mmap_conf(initial_size=8192, temp_file_path=path if user_file else None)
    ws = ndws.workspace("MM_EXPORT", conf)
    with pytest.warns(ndws.WorkspaceWarning, match=r"continues on a freshly mapped temporary "
                                                   r"file \(it stays memory-mapped\)"):
        with ws:
            a = ndws.full(16, 3.0)
            kept = np.asarray(a)
    assert ws.blocks_left_to_exports == 1
    with ws:
        b = ndws.full(16, 4.0)
        assert b.memory_kind == "mmap"
        assert ws.this_cycle_allocations == 128 and ws.spilled_size == 0
    np.testing.assert_array_equal(kept, np.full(16, 3.0))    # the export never changed
    if user_file:
        # the user's file keeps the first cycle's data; later cycles live in the new mapping
        assert np.fromfile(path, dtype=np.float64, count=16).tolist() == [3.0] * 16
    # nothing of the fresh mapping is left on disk
    assert sorted(p.name for p in tmp_path.iterdir()) == (["ws.bin"] if user_file else [])
