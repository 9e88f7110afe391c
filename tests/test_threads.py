"""Workspaces belong to one thread (docs/architecture.md, invariant 7); threads cycling their own
workspaces run side by side without interference."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import ndws
from ndws import WorkspaceError


def test_each_thread_has_its_own_manager_map_and_current_workspace(threaded):
    main_mgr = ndws.get_workspace_manager()

    def body(i):
        mgr = ndws.get_workspace_manager()
        assert mgr is ndws.get_workspace_manager()
        assert ndws.current_workspace() is None
        ws = ndws.workspace("SHARED_ID")
        with ws:
            assert ndws.current_workspace() is ws
            ndws.zeros(10)
        ids = mgr.get_all_workspaces_ids_for_current_thread()
        mgr.destroy_all_workspaces_for_current_thread()
        # return the objects themselves: ids of freed objects could be reused
        return mgr, ws, ids, mgr.thread_ident == threading.get_ident()

    results = threaded(body, 6)
    assert len({id(r[0]) for r in results}) == 6
    assert len({id(r[1]) for r in results}) == 6
    assert all(r[2] == ["SHARED_ID"] and r[3] for r in results)
    assert all(r[0] is not main_mgr for r in results)
    assert not main_mgr.check_if_workspace_exists("SHARED_ID")


@pytest.mark.parametrize("action, word", [
    (lambda ws: ws.notify_scope_entered(), "entered"),
    (lambda ws: ws.close(), "closed"),
    (lambda ws: ws.notify_scope_borrowed(), "borrowed"),
    (lambda ws: ws.destroy(), "destroyed"),
    (lambda ws: ws.initialize_workspace(), "initialized"),
])
def test_another_threads_workspace_cannot_be_driven(action, word):
    ws = ndws.workspace("MINE")
    errors = []

    def other():
        try:
            action(ws)
        except WorkspaceError as exc:
            errors.append(exc)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert len(errors) == 1
    assert errors[0].kind == "thread" and errors[0].workspace_id == "MINE"
    assert f"can't be {word} from thread" in str(errors[0])
    assert not ws.is_scope_active and ndws.current_workspace() is None


def test_another_threads_manager_refuses_mutations():
    mgr = ndws.get_workspace_manager()
    errors = []

    def other():
        for call in (lambda: mgr.get_workspace_for_current_thread("X"),
                     lambda: mgr.create_new_workspace(None, "X"),
                     mgr.destroy_all_workspaces_for_current_thread,
                     mgr.scope_out_of_workspaces):
            try:
                call()
            except WorkspaceError as exc:
                errors.append(exc.kind)
        # read-only queries are fine from anywhere
        errors.append(mgr.check_if_workspace_exists("X"))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert errors == ["thread"] * 4 + [False]


def test_valid_arrays_can_be_read_from_another_thread():
    with ndws.workspace("READ_ME") as ws:
        a = ndws.arange(100.0)
        out = []
        t = threading.Thread(target=lambda: out.append(((a * 2).sum().item(),
                                                        a.workspace_id, np.asarray(a)[5])))
        t.start()
        t.join()
        assert out == [(9900.0, "READ_ME", 5.0)]
    stale = []

    def read_stale():
        try:
            a.sum()
        except WorkspaceError as exc:
            stale.append(exc.kind)
    t = threading.Thread(target=read_stale)
    t.start()
    t.join()
    assert stale == ["leaked"]
    assert ws.generation == 1


def test_arrays_made_in_another_thread_land_in_that_threads_workspace(threaded):
    def body(i):
        with ndws.workspace("W") as ws:
            a = ndws.full(4, float(i))
            ok = a.workspace is ws and a.workspace_id == "W"
            total = a.sum().item()
        ndws.destroy_all_workspaces_for_current_thread()
        return ok, total

    assert threaded(body, 4) == [(True, 4.0 * i) for i in range(4)]


def test_eight_threads_cycling_their_own_workspaces_10000_times(threaded):
    # Each thread runs 10,000 cycles of a few ops over its own workspaces and checks every
    # result against a NumPy checksum computed independently; any cross-thread interference
    # (shared offsets, a wrong current workspace, reused memory) would change a checksum.
    cycles = 10_000
    conf = ndws.WorkspaceConfiguration(policy_learning="FIRST_LOOP")

    def body(i):
        rng = np.random.default_rng(1000 + i)
        base_np = rng.standard_normal(64)
        base = ndws.from_numpy(base_np)
        outer = ndws.workspace("OUTER", conf)
        inner = ndws.workspace("INNER", conf)
        total = 0.0
        expected = 0.0
        for c in range(cycles):
            scale = float((c % 7) + i)
            with outer:
                x = base * scale
                with inner:
                    y = (x + float(c % 3)).sum()
                    total += y.item()
                assert x.stale is None
            assert x.stale == "leaked"
            expected += float((base_np * scale + float(c % 3)).sum())
        stats = (outer.cycles_count, inner.cycles_count, outer.spilled_size,
                 outer.current_size > 0)
        ndws.destroy_all_workspaces_for_current_thread()
        return total, expected, stats

    results = threaded(body, 8)
    for total, expected, stats in results:
        assert total == pytest.approx(expected, rel=1e-9)
        assert stats == (cycles, cycles, 0, True)


# ------------------------------------------------------------------------------------------------
# Kernel threads: one pool size plus a per-Python-thread limit


@pytest.fixture
def pool_size():
    before = ndws.get_num_threads()
    yield before
    ndws.set_num_threads(before)


def _openmp() -> bool:
    return ndws.show_config("dicts")["openmp"] == "on"


def test_set_num_threads_sets_the_pool_for_every_thread(pool_size, threaded):
    ndws.set_num_threads(3)
    expected = 3 if _openmp() else 1
    assert ndws.get_num_threads() == expected
    assert threaded(lambda i: ndws.get_num_threads(), 2) == [expected, expected]


def test_num_threads_limits_only_the_calling_thread_and_nests(pool_size):
    ndws.set_num_threads(2)
    seen = {}
    inside = threading.Event()
    release = threading.Event()

    def other():
        inside.wait(10)
        seen["other"] = ndws.get_num_threads()
        release.set()

    t = threading.Thread(target=other)
    t.start()
    with ndws.num_threads(1) as ctx:
        assert ctx.n == 1
        assert ndws.get_num_threads() == 1
        inside.set()
        assert release.wait(10)
        with ndws.num_threads(5):
            assert ndws.get_num_threads() == (5 if _openmp() else 1)
        assert ndws.get_num_threads() == 1
    t.join()
    assert seen["other"] == (2 if _openmp() else 1)
    assert ndws.get_num_threads() == (2 if _openmp() else 1)


def test_num_threads_is_restored_when_the_block_raises(pool_size):
    with pytest.raises(KeyError):
        with ndws.num_threads(1):
            raise KeyError("x")
    assert ndws.get_num_threads() == pool_size


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (-2, ValueError), (1.5, TypeError),
                                      ("2", TypeError), (True, TypeError), (None, TypeError)])
def test_thread_counts_are_validated(pool_size, bad, exc):
    with pytest.raises(exc, match=r"^n: expected a positive int, got "):
        ndws.set_num_threads(bad)
    with pytest.raises(exc, match=r"^n: expected a positive int, got "):
        ndws.num_threads(bad)
    assert ndws.get_num_threads() == pool_size


@pytest.mark.parametrize("env, expected", [("1", 1), ("3", 3)])
def test_omp_num_threads_sets_the_starting_pool_size(env, expected):
    import subprocess
    import sys
    out = subprocess.run(
        [sys.executable, "-c", "import ndws; print(ndws.get_num_threads())"],
        env={**os.environ, "OMP_NUM_THREADS": env}, capture_output=True, text=True, check=True)
    assert int(out.stdout) == (expected if _openmp() else 1)


# ------------------------------------------------------------------------------------------------
# Reading another thread's array (docs/architecture.md, invariant 7): the values it had when the
# operation started, or an error; never a mix of two cycles


def _owner_thread(body):
    """Run body() on a thread of its own; re-raise what it raised; its workspaces go after."""
    errors = []

    def run():
        try:
            body()
        except BaseException as exc:  # re-raised in the caller
            errors.append(exc)
        finally:
            ndws.destroy_all_workspaces_for_current_thread()

    t = threading.Thread(target=run, name="ndws-owner")
    t.start()
    return t, errors


def test_a_foreign_read_pins_the_block_across_the_owner_s_cycle_end():
    # Deterministic, with Events: the reader holds a view taken while the array was valid; the
    # owner then ends the cycle and writes the next one; the view still holds the old values,
    # because the owner left the pinned block to it and went on in a fresh one.
    made, viewed, rewritten = threading.Event(), threading.Event(), threading.Event()
    box = {}
    conf = ndws.WorkspaceConfiguration(initial_size=1 << 16, policy_learning="NONE")

    def owner():
        ws = ndws.workspace("PINNED_OWNER", conf)
        with ws:
            box["a"] = ndws.full(1000, 1.0)
            made.set()
            assert viewed.wait(60)
        with ws:
            b = ndws.full(1000, 2.0)
            box["b_kind"] = b.memory_kind
        box["left"] = ws.blocks_left_to_exports
        rewritten.set()

    t, errors = _owner_thread(owner)
    assert made.wait(60)
    view = ndws._core._np_view(box["a"])    # what every NumPy-path operation works on
    viewed.set()
    assert rewritten.wait(60)
    t.join(60)
    assert not t.is_alive() and not errors, errors
    np.testing.assert_array_equal(view, np.ones(1000))
    assert (box["left"], box["b_kind"]) == (1, "main")
    with pytest.raises(WorkspaceError) as info:   # the array itself is stale now
        box["a"].sum()
    assert info.value.kind in ("leaked", "destroyed")


def test_a_foreign_read_of_a_ring_array_lets_the_ring_go_around_it():
    # In a circular workspace only the pinned array's place matters: the owner keeps writing
    # the ring without a new block until it would overwrite the pinned array.
    conf = ndws.WorkspaceConfiguration(initial_size=256, overallocation_limit=2.0,
                                       policy_reset="ENDOFBUFFER_REACHED",
                                       policy_learning="NONE")   # a 768-byte ring
    steps = [threading.Event() for _ in range(4)]
    box = {}

    def owner():
        ws = ndws.workspace("RING_OWNER", conf)
        assert ws.current_size == 768          # 12 slots of 64 bytes
        with ws:
            box["a"] = ndws.full(8, 5.0)      # slot 0
            steps[0].set()
            assert steps[1].wait(60)
            for k in range(11):               # slots 1..11: the ring is full, not yet around
                ndws.full(8, float(k))
            box["left_before"] = ws.blocks_left_to_exports
            box["stale_before"] = box["a"].stale
            ndws.full(8, 99.0)                # wraps: slot 0 would overwrite the pinned array
            box["left_after"] = ws.blocks_left_to_exports
            steps[2].set()
            assert steps[3].wait(60)

    t, errors = _owner_thread(owner)
    assert steps[0].wait(60)
    view = ndws._core._np_view(box["a"])
    steps[1].set()
    assert steps[2].wait(60)
    np.testing.assert_array_equal(view, np.full(8, 5.0))
    steps[3].set()
    t.join(60)
    assert not t.is_alive() and not errors, errors
    assert (box["left_before"], box["stale_before"], box["left_after"]) == (0, None, 1)


def _read_sum(a):
    return a.sum().item()


_ONES = {}


def _read_matmul(a):
    # (1, n) @ (n, 1): the native GEMM's matrix-vector path, without the GIL (the ones are
    # made once, so the product starts right after the read is announced)
    ones = _ONES.get(a.size)
    if ones is None:
        ones = _ONES[a.size] = ndws.ones((a.size, 1), detached=True)
    return ndws.matmul(a.reshape(1, -1), ones).item()


def _read_relu(a):
    import ndws.nn.functional as F
    return float(np.asarray(F.relu(a)).sum())


@pytest.mark.slow
@pytest.mark.parametrize("read", [_read_sum, _read_matmul, _read_relu],
                         ids=["sum", "matmul", "nn-relu"])
def test_reading_another_thread_s_array_while_it_cycles_is_never_torn(read):
    # A reader reduces the owner's 4M-element array (a NumPy reduction, the native GEMM, an
    # nn.functional kernel) while the owner closes the cycle and writes the next one into the
    # same memory. Each round the reader announces its read, the owner then races it; every
    # result must be the whole old array (k * N) or a WorkspaceError.
    n, rounds = 4_000_000, 20
    conf = ndws.WorkspaceConfiguration(initial_size=n * 8 * 2, policy_learning="NONE")
    published, reading = threading.Event(), threading.Event()
    box, results = {}, []

    def owner():
        ws = ndws.workspace("TORN_OWNER", conf)
        for k in range(1, rounds + 1):
            ws.notify_scope_entered()
            box["a"] = (ndws.full(n, float(k)), k)
            published.set()
            assert reading.wait(60)
            reading.clear()
            ws.close()
            with ws:
                ndws.full(n, -1.0)

    t, errors = _owner_thread(owner)
    for _ in range(rounds):
        assert published.wait(60)
        published.clear()
        a, k = box["a"]
        reading.set()
        try:
            results.append((read(a), k))
        except WorkspaceError as exc:
            results.append((exc.kind, k))
    t.join(120)
    assert not t.is_alive() and not errors, errors
    torn = [(s, k) for s, k in results
            if s != k * n and s not in ("leaked", "outdated", "destroyed")]
    assert not torn, torn[:5]
    assert len(results) == rounds


def test_a_manager_wraps_its_threads_core_state_and_nothing_else():
    from ndws.workspace import WorkspaceManager
    with pytest.raises(TypeError, match=r"^state: expected a ThreadState, got str$"):
        WorkspaceManager("not a state")
    mgr = ndws.get_workspace_manager()
    assert mgr.thread_ident == threading.get_ident()
    ws = ndws.workspace("WRAPPED_STATE")
    try:
        # the map the manager shows is the core's per-thread map itself
        assert mgr.get_workspace_for_current_thread("WRAPPED_STATE") is ws
        assert mgr.check_if_workspace_exists("WRAPPED_STATE")
    finally:
        mgr.destroy_workspace(ws)
    assert not mgr.check_if_workspace_exists("WRAPPED_STATE")


@pytest.mark.parametrize("ntasks, nthreads", [(0, 2), (1, 2), (7, 1), (8, 2), (64, 2), (1000, 3),
                                              (5, 64)])
@pytest.mark.parametrize("items", [False, True])
def test_the_kernel_pool_runs_every_task_exactly_once(ntasks, nthreads, items):
    # (items: run_items, the small items claimed in blocks of them)
    from ndws._threads import _run_tasks_census
    for _ in range(50):        # many jobs, so helpers join some of them mid-way
        counts = _run_tasks_census(ntasks, nthreads, items)
        assert counts.tolist() == [1] * ntasks


@pytest.mark.parametrize("nlanes, nsteps, nthreads", [(0, 5, 2), (3, 0, 2), (1, 9, 2), (8, 50, 2),
                                                       (8, 50, 1), (3, 200, 4), (64, 3, 2),
                                                       (65, 4, 2)])
def test_run_lanes_runs_each_lanes_steps_once_in_order(nlanes, nsteps, nthreads):
    # (65 lanes: more than LANES_MAX, run step by step on the caller)
    from ndws._threads import _run_lanes_census
    for _ in range(30):        # many runs, so helpers join some of them mid-way
        ret, order, count = _run_lanes_census(nlanes, nsteps, nthreads)
        assert ret == 0
        assert count.tolist() == [nsteps] * nlanes       # (negative: two steps of a lane at once)
        assert order.tolist() == [list(range(nsteps))] * nlanes


@pytest.mark.parametrize("nthreads", [1, 2])
def test_run_lanes_stops_at_a_failing_step(nthreads):
    # the failing step's value comes back and its lane runs no later step; no lane starts a
    # step after the failure was seen, so none runs all of them past it on one thread
    from ndws._threads import _run_lanes_census
    for _ in range(30):
        ret, order, count = _run_lanes_census(6, 40, nthreads, fail_at=(2, 5))
        assert ret == 7
        assert count[2] == 5 and order[2].tolist() == list(range(5)) + [-1] * 35
        for lane in range(6):
            k = int(count[lane])
            assert order[lane, :k].tolist() == list(range(k))
        if nthreads == 1:
            # step by step: the lanes before it ran step 5, those after it stopped at 5
            assert count.tolist() == [6, 6, 5, 5, 5, 5]


def test_the_kernel_pool_is_shared_by_every_kernel_module():
    # one pool for the GEMM and the nn kernels: only ndws._threads compiles the pool's code
    # (a second copy would be a second pool, whose spinning helpers take the cores from the
    # first one's); the others reach it through _threads.pxd
    import pathlib
    root = pathlib.Path(ndws.__file__).parent
    text = {str(p.relative_to(root)): p.read_text(encoding="utf-8")
            for pattern in ("**/*.pyx", "**/*.pxi") for p in root.glob(pattern)}
    assert {name for name, src in text.items() if '"_pool.h"' in src} == {"_threads.pyx"}
    users = {name for name, src in text.items() if "run_tasks(" in src or "pool_run(" in src}
    assert {"_gemm_kernel.pxi", os.path.join("nn", "_updaters.pyx"),
            os.path.join("nn", "_activations.pyx"), os.path.join("nn", "_losses.pyx")} <= users


# ------------------------------------------------------------------------------------------------
# The ufuncs' loops on the kernel pool: the same bits at every thread count, and the
# floating-point flags of every task (each is raised on the thread that ran it)

@pytest.fixture
def two_threads_small_grains(pool_size):
    # grains of 1024 elements, so sizes of a few thousand already split into several tasks
    from ndws import _threads
    if not _openmp():
        pytest.skip("a build without OpenMP runs every kernel on one thread")
    ndws.set_num_threads(2)
    saved = _threads._set_grains(elementwise=1024, reduce=1024)
    yield
    _threads._set_grains(**saved)


def _bits(fn, threads):
    with ndws.num_threads(threads):
        r = fn()
    return np.asarray(r.numpy()).tobytes(), r.numpy()


_UFUNCS = {
    "add": lambda x, y, s, r: ndws.add(x, y),
    "divide": lambda x, y, s, r: x / y,
    "scalar multiply": lambda x, y, s, r: x * 1.1,
    "row-broadcast subtract": lambda x, y, s, r: s - r,
    "maximum": lambda x, y, s, r: ndws.maximum(x, y),
    "exp": lambda x, y, s, r: ndws.exp(x),
    "tanh": lambda x, y, s, r: ndws.tanh(x),
    "sqrt": lambda x, y, s, r: ndws.sqrt(ndws.abs(x)),
    "sum": lambda x, y, s, r: ndws.sum(x),
    "mean": lambda x, y, s, r: ndws.mean(x),
    "var": lambda x, y, s, r: ndws.var(x),
    "std rows": lambda x, y, s, r: ndws.std(s, axis=1),
    "sum axis 0": lambda x, y, s, r: ndws.sum(s, axis=0),
    "var axis 0": lambda x, y, s, r: ndws.var(s, axis=0),
    "max": lambda x, y, s, r: ndws.max(x),
    "min axis 0": lambda x, y, s, r: ndws.min(s, axis=0),
    "argmax": lambda x, y, s, r: ndws.argmax(x),
    "argmin rows": lambda x, y, s, r: ndws.argmin(s, axis=1),
    # one unit of work (8 columns, one chunk): fewer blocks than threads
    "mean axis 0 of 8 columns": lambda x, y, s, r: ndws.mean(
        x[:x.shape[0] // 8 * 8].reshape(-1, 8), axis=0),
}
_ORACLE = {
    "add": lambda a, b, sa, ra: a + b, "divide": lambda a, b, sa, ra: a / b,
    "scalar multiply": lambda a, b, sa, ra: a * a.dtype.type(1.1),
    "row-broadcast subtract": lambda a, b, sa, ra: sa - ra,
    "maximum": lambda a, b, sa, ra: np.maximum(a, b), "exp": lambda a, b, sa, ra: np.exp(a),
    "tanh": lambda a, b, sa, ra: np.tanh(a), "sqrt": lambda a, b, sa, ra: np.sqrt(np.abs(a)),
    "sum": lambda a, b, sa, ra: a.sum(), "mean": lambda a, b, sa, ra: a.mean(),
    "var": lambda a, b, sa, ra: a.var(), "std rows": lambda a, b, sa, ra: sa.std(axis=1),
    "sum axis 0": lambda a, b, sa, ra: sa.sum(axis=0),
    "var axis 0": lambda a, b, sa, ra: sa.var(axis=0), "max": lambda a, b, sa, ra: a.max(),
    "min axis 0": lambda a, b, sa, ra: sa.min(axis=0), "argmax": lambda a, b, sa, ra: a.argmax(),
    "argmin rows": lambda a, b, sa, ra: sa.argmin(axis=1),
    "mean axis 0 of 8 columns": lambda a, b, sa, ra: a[:a.size // 8 * 8].reshape(-1, 8).mean(
        axis=0),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [3000, 4096 + 13, 40000, 1 << 17])
@pytest.mark.parametrize("name", sorted(_UFUNCS))
def test_ufuncs_and_reductions_give_the_same_bits_on_two_threads_as_on_one(
        two_threads_small_grains, name, n, dtype):
    # sizes from under one leaf of the parallel sum tree to many chunks, odd ones included;
    # 2-D operands of (n // 600, 600) rows (several 512-column chunks per row)
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n).astype(dtype)
    b = (rng.random(n) + 0.5).astype(dtype)
    sa = rng.standard_normal((n // 600, 600)).astype(dtype)
    ra = rng.standard_normal(600).astype(dtype)
    x, y, s, r = ndws.asarray(a), ndws.asarray(b), ndws.asarray(sa), ndws.asarray(ra)
    one, got1 = _bits(lambda: _UFUNCS[name](x, y, s, r), 1)
    two, got2 = _bits(lambda: _UFUNCS[name](x, y, s, r), 2)
    assert two == one
    want = _ORACLE[name](a, b, sa, ra)
    assert got2.dtype == np.asarray(want).dtype
    # (ndws sums along an axis pairwise, NumPy row after row: a few ulps of the sum apart)
    tol = 1e-4 if dtype == np.float32 else 1e-11
    np.testing.assert_allclose(got2, want, rtol=tol, atol=tol)


_OVERFLOWS = {
    # (ndws call, NumPy's warning); the operand's overflowing values sit in its last chunk only
    "multiply": (lambda x: x * x, "overflow encountered in multiply"),
    "exp": (lambda x: ndws.exp(x), "overflow encountered in exp"),
    "sum": (lambda x: ndws.sum(x), "overflow encountered in reduce"),
    "sum rows": (lambda x: ndws.sum(x.reshape(512, 512), axis=1),
                 "overflow encountered in reduce"),
    # (128, 2048) over axis 0: four 512-column chunks, the last two in the second task
    "sum axis 0": (lambda x: ndws.sum(x.reshape(128, 2048), axis=0),
                   "overflow encountered in reduce"),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", sorted(_OVERFLOWS))
def test_overflow_in_the_last_chunk_only_still_warns_and_raises(two_threads_small_grains,
                                                                name, threads):
    # floating-point flags are per thread: the chunk that overflows runs on whichever thread
    # claimed it, and its flags must still reach NumPy's errstate handling
    call, message = _OVERFLOWS[name]
    a = np.ones(1 << 18, dtype=np.float32)
    a[-700:] = 3e38
    a[-2048 - 700:-2048] = 3e38    # the same columns of the row before, for "sum axis 0"
    x = ndws.asarray(a)
    with ndws.num_threads(threads):
        with pytest.warns(RuntimeWarning, match=message):
            got = call(x).numpy()
        with np.errstate(over="raise"), pytest.raises(FloatingPointError, match="overflow"):
            call(x)
    assert np.isinf(got).any()
    # and nothing is raised when nothing overflows
    with ndws.num_threads(threads), np.errstate(all="raise"):
        call(ndws.asarray(np.ones(1 << 18, dtype=np.float32)))


def test_the_ufunc_loops_run_on_the_kernel_pool_not_openmp():
    # one pool for every kernel (docs/architecture.md, "Kernel threads"): an OpenMP region in
    # the ufuncs would leave its spinning workers on the cores the next kernel's helpers need
    import pathlib
    root = pathlib.Path(ndws.__file__).parent
    for name in ("_loops.pxi", "_ufuncs.pyx"):
        src = (root / name).read_text(encoding="utf-8")
        assert "prange(" not in src and "cython.parallel" not in src, name
        assert "run_blocks(" in src, name
