"""Acceptance tests for workspace policies, ported from ND4J's workspace tests.

Sources: ``BasicWorkspaceTests``, ``WorkspaceProviderTests``, ``SpecialWorkspaceTests``,
``CyclicWorkspaceTests`` and ``DebugModeTests`` (nd4j-tests, ``org.nd4j.linalg.workspace``).
The Java tests used 16-byte alignment (and sometimes counted Java-only scratch buffers), so
every byte count here is re-derived from ND4J's allocation rules (docs/workspaces.md) with
``ALIGNMENT = 64`` and float64 data:

* an allocation of n bytes consumes ``ceil(n / 64) * 64`` bytes of the workspace;
* ``zeros(5)`` = 40 B -> 64, ``zeros(10)`` = 80 B -> 128, ``zeros(100)`` = 800 B -> 832,
  ``zeros(300)`` = 2400 B -> 2432, ``zeros(500)`` = 4000 B -> 4032,
  ``zeros(1000)`` = 8000 B -> 8000, ``zeros(2000)`` = 16000 B -> 16000;
* OVERALLOCATE adds ``floor(size * limit)``, once (§1, §2.2, §2.6);
* a circular block is ``b = floor(maxCycle * 1.3)`` then ``b += 8 - b % 8`` (adds 8 when
  already aligned); the ring is ``b * (floor(limit) + 1)`` with OVERALLOCATE (§2.6).

Skipped from the Java sources (Java/CUDA specifics or owned elsewhere): MMAP workspaces
(``testMmap1/2``), serialization (``testWorkspacesSerde1-3``: Java streams and cached
shape-info pointers), ``testNoShape1`` (``Shape.newShapeNoCopy``), ``testNoOpExecution_1``
(custom-op timing), ``testGc`` / ``testWorkspaceGc_1`` (JVM GC), ``testMemcpy1`` (HOST_ONLY
mirroring, ignored upstream), ``CyclicWorkspaceTests.testBasicMechanics_1`` (logs only, no
assertion; its minSize/prefetch setting is covered by the ring tests below), and the
scope-panic parts of ``testInvalidLeverageMigrateDetach`` / ``testBadGeneration...`` (stale
array validation is tested elsewhere).
"""
from __future__ import annotations

import sys

import dataclasses

import pytest

import ndws
from ndws import (
    AllocationPolicy,
    DebugMode,
    LearningPolicy,
    LocationPolicy,
    MirroringPolicy,
    ResetPolicy,
    SpillPolicy,
    WorkspaceConfiguration,
    WorkspaceType,
)

from nd4j_configs import BASIC, LOOP_FIRST, LOOP_OVER_TIME, MiB, aligned, conf, mgr


def test_alignment_is_64():
    # Every number in this file is derived with 64-byte rounding.
    assert ndws.ALIGNMENT == 64


# ------------------------------------------------------------------------------------------------
# WorkspaceConfiguration (ND4J's)


def test_configuration_defaults_match_nd4j():
    c = WorkspaceConfiguration()
    assert (c.initial_size, c.min_size, c.max_size) == (0, 0, 0)
    assert c.overallocation_limit == 0.3
    assert c.policy_allocation is AllocationPolicy.OVERALLOCATE
    assert c.policy_learning is LearningPolicy.FIRST_LOOP
    assert c.policy_spill is SpillPolicy.EXTERNAL
    assert c.policy_reset is ResetPolicy.BLOCK_LEFT
    assert c.policy_location is LocationPolicy.RAM
    assert c.policy_mirroring is MirroringPolicy.FULL
    assert c.temp_file_path is None
    assert c.cycles_before_initialization == 0
    assert c.steps_number == 2


@pytest.mark.parametrize("field,name,member", [
    ("policy_allocation", "STRICT", AllocationPolicy.STRICT),
    ("policy_learning", "OVER_TIME", LearningPolicy.OVER_TIME),
    ("policy_spill", "REALLOCATE", SpillPolicy.REALLOCATE),
    ("policy_reset", "ENDOFBUFFER_REACHED", ResetPolicy.ENDOFBUFFER_REACHED),
])
def test_configuration_accepts_enum_names(field, name, member):
    kw = {field: name}
    if field == "policy_reset":
        kw["overallocation_limit"] = 1.0   # circular + OVERALLOCATE needs a limit >= 1
    assert getattr(conf(**kw), field) is member


def test_builder_matches_keyword_construction():
    built = (WorkspaceConfiguration.builder().initial_size(81920).overallocation_limit(0.1)
             .policy_spill(SpillPolicy.EXTERNAL).policy_learning(LearningPolicy.NONE)
             .policy_allocation(AllocationPolicy.OVERALLOCATE).build())
    assert built == conf(initial_size=81920, overallocation_limit=0.1,
                         policy_learning=LearningPolicy.NONE)


def test_configuration_is_frozen_and_replace_revalidates():
    c = conf(initial_size=10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.initial_size = 20
    assert c.replace(initial_size=20).initial_size == 20
    assert c.initial_size == 10
    with pytest.raises(ndws.ConfigurationError) as ei:
        c.replace(max_size=-1)
    assert ei.value.field == "max_size"


def _check_config_error(err, field):
    assert isinstance(err, ndws.ConfigurationError)
    assert isinstance(err, ValueError) and isinstance(err, ndws.WorkspaceError)
    assert err.field == field
    assert str(err).startswith(f"{field}: ")


@pytest.mark.parametrize("catch", [ndws.ConfigurationError, ValueError, ndws.WorkspaceError])
@pytest.mark.parametrize("field", ["initial_size", "min_size", "max_size"])
def test_negative_sizes_rejected(field, catch):
    with pytest.raises(catch) as ei:
        conf(**{field: -1})
    _check_config_error(ei.value, field)


@pytest.mark.parametrize("catch", [ndws.ConfigurationError, ValueError, ndws.WorkspaceError])
def test_negative_overallocation_limit_rejected(catch):
    with pytest.raises(catch) as ei:
        conf(overallocation_limit=-0.1)
    _check_config_error(ei.value, "overallocation_limit")


@pytest.mark.parametrize("learning", [LearningPolicy.FIRST_LOOP, LearningPolicy.OVER_TIME])
def test_mmap_with_learning_rejected(learning):
    # §1 LocationPolicy.MMAP: "Workspace backed by memory-mapped file can't have LearningPolicy
    # defined" - validated on the configuration, before any file is touched.
    with pytest.raises(ValueError) as ei:
        conf(initial_size=4096, policy_location=LocationPolicy.MMAP, policy_learning=learning)
    _check_config_error(ei.value, "policy_learning")
    assert "Workspace backed by memory-mapped file can't have LearningPolicy defined" \
        in str(ei.value)


@pytest.mark.parametrize("limit", [0.0, 0.3, 0.99])
def test_circular_overallocate_needs_limit_of_at_least_one(limit):
    with pytest.raises(ndws.WorkspaceError) as ei:
        conf(policy_reset=ResetPolicy.ENDOFBUFFER_REACHED,
             policy_allocation=AllocationPolicy.OVERALLOCATE, overallocation_limit=limit)
    _check_config_error(ei.value, "overallocation_limit")
    assert "For cyclic workspace overallocation should be positive integral value." \
        in str(ei.value)


def test_circular_limits_that_are_allowed():
    # limit 1.0 is the smallest allowed OVERALLOCATE ring; STRICT ignores the limit entirely.
    ok1 = conf(policy_reset="ENDOFBUFFER_REACHED", overallocation_limit=1.0)
    ok2 = conf(policy_reset="ENDOFBUFFER_REACHED", policy_allocation="STRICT",
               overallocation_limit=0.3)
    assert ndws.workspace("CFG_CIRC_1", ok1).workspace_type is WorkspaceType.CIRCULAR
    assert ndws.workspace("CFG_CIRC_2", ok2).workspace_type is WorkspaceType.CIRCULAR
    assert ndws.workspace("CFG_SCOPED", conf()).workspace_type is WorkspaceType.SCOPED


@pytest.mark.parametrize("kw, field, message", [
    (dict(initial_size=sys.maxsize), "initial_size",
     f"initial_size: must be at most {ndws._core.MAX_BLOCK_BYTES} bytes, got {sys.maxsize}"),
    (dict(max_size=2**63), "max_size",
     f"max_size: must be at most {ndws._core.MAX_BLOCK_BYTES} bytes, got {2**63}"),
    (dict(initial_size=10**6, overallocation_limit=1e300), "overallocation_limit",
     f"overallocation_limit: initial_size=1000000 overallocated by 1e+300 is 1e+306 bytes, "
     f"more than the {ndws._core.MAX_BLOCK_BYTES} a workspace can allocate"),
    (dict(overallocation_limit=1e300), "overallocation_limit",
     f"overallocation_limit: a learned cycle=64 overallocated by 1e+300 is 6.4e+301 bytes, "
     f"more than the {ndws._core.MAX_BLOCK_BYTES} a workspace can allocate"),
    (dict(min_size=2**61, overallocation_limit=1.5), "overallocation_limit",
     f"overallocation_limit: min_size={2**61} overallocated by 1.5 is 5.765e+18 bytes, more "
     f"than the {ndws._core.MAX_BLOCK_BYTES} a workspace can allocate"),
    (dict(policy_reset="ENDOFBUFFER_REACHED", overallocation_limit=1e300),
     "overallocation_limit",
     "overallocation_limit: a ring of more than 2147483646 blocks can't be built, got 1e+300"),
])
def test_sizes_that_would_overflow_are_rejected(kw, field, message):
    # ND4J's long arithmetic wraps: a negative current size, and every allocation spills
    with pytest.raises(ndws.ConfigurationError) as ei:
        conf(**kw)
    _check_config_error(ei.value, field)
    assert str(ei.value) == message


def test_largest_allowed_sizes_do_not_overflow_at_runtime():
    # a valid configuration whose buffer the machine can't give raises MemoryError at
    # construction instead of going negative
    big = conf(initial_size=ndws._core.MAX_BLOCK_BYTES // 2, overallocation_limit=0.5)
    with pytest.raises(MemoryError):
        ndws.get_workspace_manager().create_new_workspace(big, "CFG_HUGE")
    assert not ndws.get_workspace_manager().check_if_workspace_exists("CFG_HUGE")
    # learning that would overflow raises MemoryError at the close that learns
    learner = ndws.workspace("CFG_LEARN", conf(overallocation_limit=2.0**55))
    with pytest.raises(MemoryError, match=r"^Workspace \[CFG_LEARN\]: 1024 bytes overallocated "
                                          r"by 3.6\d+e\+16 would exceed "):
        with learner:
            ndws.zeros(128)
    assert ndws.current_workspace() is None and not learner.is_scope_active


def test_unknown_enum_name_rejected():
    with pytest.raises(ndws.ConfigurationError) as ei:
        conf(policy_spill="SOMETIMES")
    _check_config_error(ei.value, "policy_spill")


# ------------------------------------------------------------------------------------------------
# AllocationPolicy at construction (§2.2): OVERALLOCATE adds floor(size * limit), once


@pytest.mark.parametrize("initial,policy,limit,expected", [
    (1024, "OVERALLOCATE", 1.0, 2048),      # testOverallocation1: 1024 + floor(1024*1.0)
    (81920, "OVERALLOCATE", 0.1, 90112),    # WorkspaceProviderTests basic: 81920 + 8192
    (1024, "OVERALLOCATE", 0.3, 1331),      # 1024 + floor(307.2)
    (999, "OVERALLOCATE", 0.5, 1498),       # 999 + floor(499.5): the added amount is floored
    (1001, "OVERALLOCATE", 0.3, 1301),      # 1001 + floor(300.3)
    (1000, "OVERALLOCATE", 0.0, 1000),      # limit 0: nothing added
    (10 * MiB, "STRICT", 0.1, 10 * MiB),    # basicConfig: STRICT ignores the limit
    (1000, "STRICT", 0.5, 1000),
])
def test_initial_size_allocation_policy(initial, policy, limit, expected):
    ws = ndws.workspace(f"ALLOC_{initial}_{policy}_{limit}",
                        conf(initial_size=initial, policy_allocation=policy,
                             overallocation_limit=limit, policy_learning="NONE"))
    assert ws.current_size == expected
    assert ws.primary_offset == 0


def test_max_size_caps_overallocated_initial_size():
    # 1000 + floor(500) = 1500, then init() caps at max_size 1200.
    ws = ndws.workspace("ALLOC_MAXCAP", conf(initial_size=1000, overallocation_limit=0.5,
                                             max_size=1200, policy_learning="NONE"))
    assert ws.current_size == 1200


def test_min_size_not_applied_at_construction():
    # §1: min_size is a lower bound applied after learning, not at construction.
    ws = ndws.workspace("ALLOC_MIN_CTOR", conf(initial_size=1000, min_size=4096,
                                               policy_allocation="STRICT"))
    assert ws.current_size == 1000


def test_learned_size_overallocation_floor():
    # FIRST_LOOP learns maxCycle = 832 (zeros(100)); OVERALLOCATE 0.3 adds floor(249.6) = 249.
    ws = ndws.workspace("ALLOC_LEARN_FLOOR", conf(overallocation_limit=0.3))
    with ws:
        ndws.zeros(100)
    assert ws.initial_block_size == 832   # §2.6: recorded before overallocation
    assert ws.current_size == 1081


def test_overallocation_happens_only_once():
    # initial 1000 -> 1300 (isOver set). A REALLOCATE regrowth to maxCycle 8000 (zeros(1000))
    # does not overallocate again (§1: "This happens once").
    ws = ndws.workspace("ALLOC_ONCE", conf(initial_size=1000, overallocation_limit=0.3,
                                           policy_spill="REALLOCATE"))
    assert ws.current_size == 1300
    with ws:
        ndws.zeros(1000)
    assert ws.current_size == 8000


# ------------------------------------------------------------------------------------------------
# LearningPolicy.FIRST_LOOP


def test_first_loop_learns_with_overallocation():
    # testOverallocation2: maxCycle 832, OVERALLOCATE 1.0 -> 832 + 832.
    ws = mgr().create_new_workspace(LOOP_FIRST.replace(
        policy_allocation=AllocationPolicy.OVERALLOCATE, overallocation_limit=1.0), "FL_OVER")
    assert ws.current_size == 0
    with ws:
        ndws.zeros(100)
    assert ws.current_size == 1664


def test_first_loop_learns_the_sum_of_the_cycle():
    # testLoops3: the cold cycle spills zeros(100) (832) and zeros(10) (128); maxCycle 960.
    ws = mgr().create_new_workspace(LOOP_FIRST, "FL_SUM")
    ws.notify_scope_entered()
    ndws.zeros(100)
    ndws.zeros(10)
    assert ws.primary_offset == 0
    assert ws.current_size == 0
    assert ws.spilled_size == 960
    assert ws.number_of_external_allocations == 2
    assert ws.this_cycle_allocations == 960
    ws.notify_scope_left()
    assert ws.primary_offset == 0
    assert ws.current_size == 960       # STRICT: exactly maxCycle
    assert ws.spilled_size == 0         # freed at close (learning != NONE, BLOCK_LEFT)
    assert ws.is_initialized


def test_first_loop_hot_cycle_uses_the_buffer():
    # testLoop4: learn 2 * 832 = 1664, then a hot cycle bumps the offset by 832.
    ws = mgr().create_new_workspace(LOOP_FIRST, "FL_HOT")
    with ws:
        ndws.zeros(100)
        ndws.zeros(100)
    assert ws.primary_offset == 0
    assert ws.current_size == 1664
    with ws:
        ndws.zeros(100)
        assert ws.primary_offset == 832
        assert ws.spilled_size == 0
    assert ws.primary_offset == 0


def test_first_loop_scope2():
    # testScope2: the cold array is in scope while its (spilled) cycle is open.
    ws = ndws.workspace("FL_SCOPE2", LOOP_FIRST)
    with ws:
        a = ndws.zeros(100)
        assert a.is_in_scope()
        assert ws.current_size == 0
    with ws:
        a = ndws.zeros(100)
        assert a.is_in_scope()
        assert ws.primary_offset == 832
    assert not a.is_in_scope()


def test_first_loop_empty_first_cycle_does_not_learn():
    # §2.5 step 7 needs maxCycle > 0: an empty cycle leaves the size at 0; the next one learns.
    ws = ndws.workspace("FL_EMPTY", LOOP_FIRST)
    with ws:
        pass
    assert ws.current_size == 0
    assert not ws.is_initialized
    with ws:
        ndws.zeros(10)
    assert ws.current_size == 128


def test_first_loop_learns_only_once_with_external_spill():
    # Learned 128 from zeros(10); a later zeros(1000) spills and EXTERNAL never grows.
    ws = ndws.workspace("FL_ONCE", LOOP_FIRST)
    with ws:
        ndws.zeros(10)
    with ws:
        ndws.zeros(1000)
        assert ws.spilled_size == 8000
    assert ws.current_size == 128
    assert ws.max_cycle_allocations == 8000


def test_first_loop_with_initial_size_never_learns():
    # §10: FIRST_LOOP with initial_size > 0 never learns unless REALLOCATE.
    ws = ndws.workspace("FL_INIT_NOLEARN", conf(initial_size=1000, policy_allocation="STRICT"))
    for _ in range(3):
        with ws:
            ndws.zeros(1000)                    # 8000 > 1000: spilled
            assert ws.spilled_size == 8000
            assert ws.primary_offset == 0
    assert ws.current_size == 1000
    assert ws.max_cycle_allocations == 8000


def test_first_loop_with_initial_size_learns_with_reallocate():
    ws = ndws.workspace("FL_INIT_REALLOC", conf(initial_size=1000, policy_allocation="STRICT",
                                                policy_spill="REALLOCATE"))
    with ws:
        ndws.zeros(1000)
    assert ws.current_size == 8000              # grown to maxCycle at close (STRICT)
    with ws:
        ndws.zeros(1000)
        assert ws.primary_offset == 8000
        assert ws.spilled_size == 0


# ------------------------------------------------------------------------------------------------
# LearningPolicy.OVER_TIME


def test_over_time_initializes_at_cycle_number():
    # delayedConfiguration (cycles_before_initialization=3, EXTERNAL, STRICT) +
    # testNestedWorkspaces9: zeros(100*x) for x = 1..9; at the close of cycle 3 the size
    # becomes maxCycle = aligned(2400) = 2432; EXTERNAL never grows afterwards, not even via a
    # manual initialize_workspace().
    c = conf(overallocation_limit=0.1, policy_learning="OVER_TIME",
             cycles_before_initialization=3, policy_allocation="STRICT")
    ws = ndws.workspace("OT_DELAYED", c)
    for x in range(1, 10):
        with ws:
            ndws.zeros(100 * x)
        assert ws.current_size == (0 if x < 3 else 2432), x
    ws.initialize_workspace()
    assert ws.current_size == 2432


def test_over_time_delayed_reallocate_follows_the_cycles():
    # testReallocate2: from cycle 3 on, REALLOCATE regrows at each close to maxCycle,
    # i.e. aligned(800 * i) bytes.
    c = conf(overallocation_limit=0.1, policy_spill="REALLOCATE", policy_learning="OVER_TIME",
             cycles_before_initialization=3, policy_allocation="STRICT")
    ws = ndws.workspace("OT_REALLOC_DELAYED", c)
    for i in range(1, 11):
        with ws:
            ndws.zeros(100 * i)
        assert ws.current_size == (aligned(800 * i) if i >= 3 else 0), i


def test_over_time_zero_cycles_never_auto_initializes():
    # testLoops2: cycles_before_initialization = 0 never initializes by itself (§10); a manual
    # initialize_workspace() sizes it to maxCycle = aligned(100 * 8) = 832.
    ws = mgr().create_new_workspace(LOOP_OVER_TIME, "OT_NEVER")
    for x in range(1, 101):
        ws.notify_scope_entered()
        ndws.zeros(x)
        assert ws.primary_offset == 0
        assert ws.current_size == 0
        ws.notify_scope_left()
    assert ws.cycles_count == 100
    ws.initialize_workspace()
    assert ws.current_size == 832
    assert ws.primary_offset == 0
    ws.notify_scope_entered()
    ndws.zeros(10)
    assert ws.primary_offset == 128
    ws.notify_scope_left()


def test_over_time_manual_initialize_counts_the_scalar_slot():
    # testLoops1: zeros(10) (128) + a full reduction's 0-d result (one 64-byte slot) = 192.
    ws = mgr().create_new_workspace(LOOP_OVER_TIME, "OT_SCALAR")
    ws.notify_scope_entered()
    a = ndws.ones(10)
    assert a.sum().item() == 10.0
    assert ws.current_size == 0
    ws.notify_scope_left()
    ws.initialize_workspace()
    assert ws.current_size == 192
    for _ in range(10):
        assert ws.primary_offset == 0
        ws.notify_scope_entered()
        a = ndws.ones(10)
        assert ws.primary_offset == 128
        assert a.sum().item() == 10.0
        assert ws.primary_offset == 192
        ws.notify_scope_left()
        assert ws.primary_offset == 0


def test_over_time_external_manual_initialize_does_not_grow():
    # testNestedWorkspaces8: learned 832 by hand; a zeros(1000) cycle spills; a second manual
    # initialize_workspace() leaves 832 (§2.6 rule 4).
    c = conf(overallocation_limit=0.1, policy_learning="OVER_TIME", policy_allocation="STRICT")
    ws = ndws.workspace("OT_EXT_MANUAL", c)
    with ws:
        ndws.zeros(100)
    ws.initialize_workspace()
    assert ws.current_size == 832
    with ws:
        ndws.zeros(1000)
        assert ws.spilled_size == 8000
    ndws.workspace("OT_EXT_MANUAL").initialize_workspace()
    assert ws.current_size == 832


def test_over_time_reallocate_grows_at_close():
    # testReallocate1: manual init to 832; a zeros(1000) cycle regrows at close (REALLOCATE,
    # current_size > 0) to 8000; then zeros(500) fits.
    c = conf(overallocation_limit=0.1, policy_spill="REALLOCATE", policy_learning="OVER_TIME",
             policy_allocation="STRICT")
    ws = ndws.workspace("OT_REALLOC", c)
    with ws:
        ndws.zeros(100)
    ws.initialize_workspace()
    assert ws.current_size == 832
    with ws:
        ndws.zeros(1000)
    assert ws.max_cycle_allocations == 8000
    assert ws.current_size == 8000
    ws.initialize_workspace()
    assert ws.current_size == 8000
    with ws:
        a = ndws.ones(500)
        assert ws.primary_offset == 4032
        assert ws.spilled_size == 0
        assert ndws.mean(a).item() == 1.0


def test_over_time_reallocate_with_zero_overallocation():
    # testReallocate3 (OVERALLOCATE with limit 0.0 adds nothing): manual init after cycle 3
    # gives aligned(2400) = 2432; REALLOCATE then follows the growing cycles up to
    # aligned(8000) = 8000 and never shrinks.
    c = conf(overallocation_limit=0.0, policy_spill="REALLOCATE", policy_learning="OVER_TIME")
    ws = ndws.workspace("OT_REALLOC_UNSPEC", c)
    for i in range(1, 11):
        with ws:
            ndws.zeros(100 * i)
        if i == 3:
            ws.initialize_workspace()
            assert ws.current_size == 2432
        if i > 3:
            assert ws.current_size == aligned(800 * i), i
    for i in range(10, 0, -1):
        with ws:
            ndws.zeros(100 * i)
    ws.initialize_workspace()
    assert ws.current_size == 8000


def test_over_time_manual_initialize_overallocates():
    # testOverallocation3: cycles zeros(10..100); maxCycle 832; OVERALLOCATE 1.0 -> 1664.
    c = LOOP_OVER_TIME.replace(policy_allocation=AllocationPolicy.OVERALLOCATE,
                               overallocation_limit=1.0)
    ws = mgr().create_new_workspace(c, "OT_OVER")
    for x in range(10, 101, 10):
        with ws:
            ndws.zeros(x)
    assert ws.current_size == 0
    ws.initialize_workspace()
    assert ws.current_size == 1664


def test_over_time_with_initial_size_never_learns():
    # Like FIRST_LOOP: initializing an already initialized workspace changes nothing (§2.6
    # rule 4), so reaching cycles_before_initialization does not grow it.
    ws = ndws.workspace("OT_INIT_NOLEARN", conf(initial_size=1000, policy_allocation="STRICT",
                                                policy_learning="OVER_TIME",
                                                cycles_before_initialization=2))
    for _ in range(3):
        with ws:
            ndws.zeros(1000)
    assert ws.current_size == 1000


# ------------------------------------------------------------------------------------------------
# LearningPolicy.NONE


def test_none_never_learns():
    ws = ndws.workspace("NONE_ZERO", conf(policy_learning="NONE"))
    for _ in range(3):
        with ws:
            ndws.zeros(100)
            assert ws.spilled_size == 832
            assert ws.primary_offset == 0
    ws.initialize_workspace()
    assert ws.current_size == 0
    assert not ws.is_initialized


def test_none_with_reallocate_never_grows():
    # §1: REALLOCATE is gated on learning != NONE.
    ws = ndws.workspace("NONE_REALLOC", conf(initial_size=1000, policy_allocation="STRICT",
                                             policy_learning="NONE", policy_spill="REALLOCATE"))
    for _ in range(2):
        with ws:
            ndws.zeros(1000)
    assert ws.current_size == 1000


def test_none_keeps_spills_until_next_entry():
    # §2.5 step 7 (freeing spills at close) only runs when learning != NONE; the next entry
    # of a BLOCK_LEFT workspace frees them (§2.4).
    ws = ndws.workspace("NONE_SPILLS", conf(initial_size=1000, policy_allocation="STRICT",
                                            policy_learning="NONE"))
    with ws:
        ndws.zeros(1000)
    assert ws.spilled_size == 8000
    assert ws.number_of_external_allocations == 1
    with ws:
        assert ws.spilled_size == 0
        assert ws.number_of_external_allocations == 0


# ------------------------------------------------------------------------------------------------
# SpillPolicy


def test_external_spill_counters():
    ws = ndws.workspace("SPILL_EXT", conf(initial_size=1000, policy_allocation="STRICT"))
    with ws:
        ndws.zeros(10)                              # fits: offset 128
        big = ndws.zeros(1000)                      # 8000 > 1000 - 128: spilled
        assert big.is_attached()
        assert big.workspace_id == "SPILL_EXT"
        assert ws.primary_offset == 128
        assert ws.spilled_size == 8000
        assert ws.number_of_external_allocations == 1
        assert ws.this_cycle_allocations == 8128    # spills are counted (§2.3 step 5)
        ndws.zeros(10)                              # still fits after the spill
        assert ws.primary_offset == 256
    # FIRST_LOOP, BLOCK_LEFT: spills are freed at close (§2.5 step 7)
    assert ws.spilled_size == 0
    assert ws.number_of_external_allocations == 0
    assert ws.current_size == 1000


def test_reallocate_with_max_size_does_not_grow_past_it():
    # §2.6 rule 1 needs maxCycle < max_size: 8000 >= 4000, so the size stays 1000.
    ws = ndws.workspace("SPILL_REALLOC_MAX", conf(initial_size=1000, max_size=4000,
                                                  policy_allocation="STRICT",
                                                  policy_spill="REALLOCATE"))
    with ws:
        ndws.zeros(1000)
    assert ws.current_size == 1000


def test_reallocate_with_max_size_grows_below_it():
    # maxCycle 2432 (zeros(300)) < max_size 4000: regrown to 2432.
    ws = ndws.workspace("SPILL_REALLOC_UNDER", conf(initial_size=1000, max_size=4000,
                                                    policy_allocation="STRICT",
                                                    policy_spill="REALLOCATE"))
    with ws:
        ndws.zeros(300)
    assert ws.current_size == 2432


FAIL_MSG = "Can't allocate memory: Workspace is full"


def test_fail_policy_raises_and_leaves_state():
    # testAllocation4: 1 MiB STRICT FAIL. zeros((1, 5)) -> 64; a 80 MB request fails and changes
    # nothing; the next small allocation continues at 64.
    c = conf(initial_size=MiB, max_size=MiB, overallocation_limit=0.1,
             policy_allocation="STRICT", policy_spill="FAIL")
    ws = mgr().create_new_workspace(c, "SPILL_FAIL")
    with ws:
        ndws.zeros((1, 5))
        assert ws.primary_offset == 64
        with pytest.raises(ndws.WorkspaceError) as ei:
            ndws.zeros(10_000_000)
        assert str(ei.value) == FAIL_MSG
        assert isinstance(ei.value, RuntimeError)
        assert ws.primary_offset == 64
        assert ws.this_cycle_allocations == 64
        assert ws.spilled_size == 0
        assert ws.number_of_external_allocations == 0
        ndws.zeros((1, 5))
        assert ws.primary_offset == 128
        assert ndws.current_workspace() is ws
    assert ws.last_cycle_allocations == 128
    assert ws.max_cycle_allocations == 128


def test_fail_policy_with_empty_workspace_fails_first_allocation():
    # Nothing fits into a 0-byte workspace; maxCycle stays 0 so nothing is learned either.
    ws = ndws.workspace("SPILL_FAIL_EMPTY", conf(policy_spill="FAIL"))
    with ws:
        with pytest.raises(ndws.WorkspaceError, match="^Can't allocate memory: Workspace is full$"):
            ndws.ones(10)
        assert ws.this_cycle_allocations == 0
        assert ws.spilled_size == 0
    assert ws.current_size == 0
    assert ws.max_cycle_allocations == 0


def test_fail_policy_in_circular_workspace_wraps_instead_of_failing():
    # A ring wraps (§2.3 step 5) before the spill policy is consulted: circular STRICT
    # initial 1000 (initial_block_size 0, so no trimming). zeros(100) = 832 fits, a second
    # one wraps to offset 0 instead of raising.
    ws = ndws.workspace("SPILL_FAIL_RING", conf(initial_size=1000, policy_allocation="STRICT",
                                                policy_reset="ENDOFBUFFER_REACHED",
                                                policy_spill="FAIL"))
    with ws:
        ndws.zeros(100)
        assert ws.primary_offset == 832
        ndws.zeros(100)
        assert ws.primary_offset == 832
        assert ws.spilled_size == 0
        with pytest.raises(ndws.WorkspaceError, match="^Can't allocate memory: Workspace is full$"):
            ndws.zeros(200)                         # 1600 > the whole ring
        assert ws.primary_offset == 832


def test_toggled_off_allocation_bypasses_the_fail_policy():
    # §2.3 step 2 comes before any policy: a toggled-off allocation never fails.
    ws = ndws.workspace("SPILL_FAIL_TOGGLE", conf(policy_spill="FAIL"))
    with ws:
        ws.toggle_workspace_use(False)
        a = ndws.ones(10)
        assert a.is_attached()
        assert ws.this_cycle_allocations == 0
        ws.toggle_workspace_use(True)
        with pytest.raises(ndws.WorkspaceError, match="^Can't allocate memory: Workspace is full$"):
            ndws.ones(10)


def test_spill_everything_with_fail_policy_raises():
    # Under SPILL_EVERYTHING nothing "fits" (§2.3 step 4), so FAIL throws even in a 10 MiB
    # workspace.
    mgr().debug_mode = DebugMode.SPILL_EVERYTHING
    ws = ndws.workspace("SPILL_FAIL_DEBUG", BASIC.replace(policy_spill=SpillPolicy.FAIL))
    with ws:
        with pytest.raises(ndws.WorkspaceError, match="^Can't allocate memory: Workspace is full$"):
            ndws.zeros(10)
        assert ws.primary_offset == 0
        assert ws.this_cycle_allocations == 0


# ------------------------------------------------------------------------------------------------
# min_size / max_size after learning


def test_min_size_after_learning():
    # testMinSize1: maxCycle 832 + 832 (OVERALLOCATE 1.0) = 1664 < min 10 MiB.
    c = conf(min_size=10 * MiB, overallocation_limit=1.0)
    with mgr().get_and_activate_workspace(c, "MIN_WT") as ws:
        ndws.zeros(100)
        assert ws.current_size == 0
    with mgr().get_and_activate_workspace(c, "MIN_WT") as ws:
        ndws.zeros(100)
        assert ws.current_size == 10 * MiB
        assert ws.primary_offset == 832


def test_min_size_strict_after_learning():
    ws = ndws.workspace("MIN_STRICT", conf(min_size=4096, policy_allocation="STRICT"))
    with ws:
        ndws.zeros(10)
    assert ws.current_size == 4096


def test_max_size_caps_learned_size():
    # min(maxCycle 8000, max 1000) = 1000 (STRICT).
    ws = ndws.workspace("MAX_STRICT", conf(max_size=1000, policy_allocation="STRICT"))
    with ws:
        ndws.zeros(1000)
    assert ws.current_size == 1000


def test_max_size_caps_after_overallocation():
    # learned 8000 (<= max) + floor(8000 * 0.5) = 12000, then init() caps at 10000.
    ws = ndws.workspace("MAX_OVER", conf(max_size=10000, overallocation_limit=0.5))
    with ws:
        ndws.zeros(1000)
    assert ws.current_size == 10000


def test_max_size_applies_after_min_size():
    # §2.6 rule 3: min_size raises 1000 to 4096, then init() caps at max_size again.
    ws = ndws.workspace("MIN_MAX_ORDER", conf(min_size=4096, max_size=1000,
                                              policy_allocation="STRICT"))
    with ws:
        ndws.zeros(1000)
    assert ws.current_size == 1000


# ------------------------------------------------------------------------------------------------
# Circular workspaces (ENDOFBUFFER_REACHED, §2.7)


CIRC_MIN = conf(min_size=10 * MiB, overallocation_limit=1.0, policy_allocation="STRICT",
                policy_reset="ENDOFBUFFER_REACHED")     # WorkspaceProviderTests.circular...


@pytest.mark.parametrize("n,block", [
    (10, 168),       # 128 -> floor(166.4) = 166 -> + (8 - 6)
    (64, 672),       # 512 -> floor(665.6) = 665 -> + (8 - 1)
    (100, 1088),     # 832 -> floor(1081.6) = 1081 -> + (8 - 1)
    (1000, 10408),   # 8000 -> 10400, already a multiple of 8: + 8 anyway
])
def test_circular_block_size_formula(n, block):
    c = conf(policy_reset="ENDOFBUFFER_REACHED", overallocation_limit=1.0)
    ws = ndws.workspace(f"CIRC_BLOCK_{n}", c)
    with ws:
        ndws.zeros(n)
        assert ws.spilled_size == aligned(8 * n)    # the cold cycle spills
    assert ws.initial_block_size == block
    assert ws.max_cycle_allocations == block        # §2.10: overwritten with the block size
    assert ws.current_size == 2 * block             # ring of floor(1.0) + 1 blocks
    assert ws.workspace_type is WorkspaceType.CIRCULAR


def test_circular_ring_of_three_blocks():
    # limit 2.0 -> stepsNumber 3; zeros(100) -> block 1088, ring 3 * 1088 = 3264. Offsets
    # after each close: 0 (cold), 1088, 2176, 3264, then a wrap: 1088. Steps move at the
    # close of cycles 4 and 7.
    ws = ndws.workspace("CIRC_3", conf(policy_reset="ENDOFBUFFER_REACHED",
                                       overallocation_limit=2.0))
    offsets, steps = [], []
    for _ in range(7):
        with ws:
            ndws.zeros(100)
        offsets.append(ws.primary_offset)
        steps.append(ws.step_number)
    assert ws.current_size == 3264
    assert offsets == [0, 1088, 2176, 3264, 1088, 2176, 3264]
    assert steps == [0, 0, 0, 1, 1, 1, 2]


def test_circular_prefetch_ring_basic_mechanics():
    # CyclicWorkspaceTests.testBasicMechanics_1: OVERALLOCATE 25 (26 blocks), REALLOCATE,
    # min 10 MiB; features (128, 784) = 802816 B and labels (128, 10) = 10240 B per cycle
    # (both multiples of 64): maxCycle 813056 -> floor(1056972.8) = 1056972 + 4 = 1056976,
    # ring 26 * 1056976 = 27481376 (above min_size). Cycle k >= 2 ends at (k - 1) blocks
    # until cycle 27 fills the ring; cycle 28 wraps. Nothing is ever pinned.
    c = conf(min_size=10 * MiB, overallocation_limit=24 + 1, policy_reset="ENDOFBUFFER_REACHED",
             policy_spill="REALLOCATE")
    block = 1056976
    for e in range(1, 61):
        with mgr().get_and_activate_workspace(c, "randomNameHere119") as ws:
            f = ndws.full((128, 784), float(e))
            lab = ndws.full((128, 10), float(e))
            assert f.is_attached() and lab.is_attached()
            assert ws.this_cycle_allocations == 813056
        if e == 1:
            assert ws.initial_block_size == block
            assert ws.current_size == 26 * block
            assert ws.primary_offset == 0
        elif e <= 27:
            assert ws.primary_offset == (e - 1) * block, e
        elif e == 28:
            assert ws.primary_offset == block
            assert ws.spilled_size == 0                 # the cold cycle's spill, freed
        assert ws.number_of_pinned_allocations == 0
    assert ws.step_number == 2                          # moved at cycles 27 and 53
    assert ws.current_size == 26 * block


def test_circular_ring_of_five_blocks_over_time():
    # testUnboundedLoop2: OVER_TIME, cycles_before_initialization 5, OVERALLOCATE 4.0.
    # zeros(100) = 832 per cycle -> block 1088, ring 5 * 1088 = 5440. Each cycle's offset jumps
    # to the next block boundary at close; cycle 11 wraps to 0.
    c = conf(policy_reset="ENDOFBUFFER_REACHED", overallocation_limit=4.0,
             policy_learning="OVER_TIME", cycles_before_initialization=5)
    ws = mgr().get_workspace_for_current_thread(c, "CIRC_ITER")
    offsets, sizes, steps = [], [], []
    for x in range(12):
        with mgr().get_workspace_for_current_thread(c, "CIRC_ITER"):
            ndws.zeros(100)
        offsets.append(ws.primary_offset)
        sizes.append(ws.current_size)
        steps.append(ws.step_number)
        if x == 4:
            # five learning cycles spilled; circular spills wait for a wrap (§2.4)
            assert ws.spilled_size == 5 * 832
            assert ws.number_of_external_allocations == 5
    assert sizes == [0] * 4 + [5440] * 8
    assert ws.initial_block_size == 1088
    assert offsets == [0, 0, 0, 0, 0, 1088, 2176, 3264, 4352, 5440, 1088, 2176]
    # 5 blocks: the step counter moves at the close of cycles 6 and 11
    assert steps == [0] * 5 + [1] * 5 + [2] * 2
    # the wrap in cycle 11 planned a reset: the old spills were freed at its close
    assert ws.spilled_size == 0
    assert ws.number_of_external_allocations == 0
    assert ndws.current_workspace() is None


def test_circular_with_initial_size_wraps_without_blocks():
    # testUnboundedLoop1: STRICT ring of 80000 bytes given up front; initial_block_size stays 0
    # (it is only set by learning), so the offset is not padded at close and grows by 832 per
    # cycle; 96 * 832 = 79872, so cycle 97 wraps.
    c = conf(initial_size=100 * 100 * 8, policy_reset="ENDOFBUFFER_REACHED",
             policy_allocation="STRICT")
    ws = ndws.workspace("CIRC_UNBOUNDED", c)
    assert ws.current_size == 80000
    for x in range(100):
        with ndws.workspace("CIRC_UNBOUNDED", c):
            ndws.zeros(100)
        expected = (x + 1) * 832 if x < 96 else (x - 95) * 832
        assert ws.primary_offset == expected, x
    assert ws.initial_block_size == 0
    assert ws.current_size == 80000
    ws.notify_scope_entered()                       # not reset by entry (§1 ResetPolicy)
    assert ws.primary_offset == 4 * 832
    ws.notify_scope_left()
    assert ndws.current_workspace() is None


def test_circular_learning_with_min_size():
    # testCircularLearning1: block 168 (from zeros(10)), raised to min 10 MiB; STRICT ring.
    # The second cycle occupies [0, 128) and its close jumps to the block boundary 168.
    for i in range(2):
        with mgr().get_and_activate_workspace(CIRC_MIN, "CIRC_WSX"):
            ndws.ones(10)
        ws = mgr().get_workspace_for_current_thread(CIRC_MIN, "CIRC_WSX")
        assert ws.current_size == 10 * MiB
        assert ws.initial_block_size == 168
        assert ws.primary_offset == (0 if i == 0 else 168)


def test_circular_step_number_with_single_step():
    # A STRICT ring keeps stepsNumber 1, so the step counter moves at every close after the
    # first (§2.5 step 4): step_number == cycles_count - 1.
    ws = ndws.workspace("CIRC_STEPS1", CIRC_MIN)
    for k in range(1, 6):
        with ws:
            ndws.zeros(10)
        assert ws.cycles_count == k
        assert ws.step_number == k - 1


def test_circular_step_number_with_four_blocks():
    # OVERALLOCATE 3.0 -> stepsNumber 4: the counter moves at the close of cycles 5, 9, 13.
    ws = ndws.workspace("CIRC_STEPS4", conf(policy_reset="ENDOFBUFFER_REACHED",
                                            overallocation_limit=3.0))
    steps = []
    for _ in range(13):
        with ws:
            ndws.zeros(10)
        steps.append(ws.step_number)
    assert steps == [0] * 4 + [1] * 4 + [2] * 4 + [3]


def test_circular_buffer_reset_frees_spills_after_wrap():
    # testCircularBufferReset1: zeros(10000) = 80000 per cycle; block floor(104000) + 8 =
    # 104008 inside a 10 MiB ring (min_size). The cold cycle's spill survives until the ring
    # wraps: loop cycle k starts at (k-1) * 104008 and fits while that + 80000 <= 10485760,
    # i.e. for k <= 101; cycle 102 wraps and its close frees the spill.
    ws = mgr().get_workspace_for_current_thread(CIRC_MIN, "CIRC_WSR_1")
    with mgr().get_and_activate_workspace("CIRC_WSR_1"):
        ndws.zeros(10000)
        assert ws.current_size == 0
        assert ws.number_of_external_allocations == 1
    assert ws.current_size == 10 * MiB
    assert ws.initial_block_size == 104008
    assert ws.primary_offset == 0
    assert ws.number_of_external_allocations == 1
    n_cycles = len(range(0, 11 * MiB, 10000 * 8))
    assert n_cycles == 145
    for k in range(1, n_cycles + 1):
        with mgr().get_and_activate_workspace("CIRC_WSR_1"):
            ndws.zeros(10000)
        if k == 101:
            assert ws.number_of_external_allocations == 1
            # rule 11: the offset still jumps to the block end, past the ring's last byte
            assert ws.primary_offset == 101 * 104008
        if k == 102:
            assert ws.number_of_external_allocations == 0
            assert ws.spilled_size == 0
            assert ws.primary_offset == 104008
    assert ws.number_of_external_allocations == 0


def test_circular_pinned_allocation_released_two_steps_later():
    # STRICT ring (stepsNumber 1), block = ring = 168 (from zeros(10), 128 B). zeros(100) = 832
    # exceeds the block: pinned with step 0. The step counter is 1, 2, 3 after cycles 2, 3, 4;
    # the entry is freed once 0 + 2 < step, at the close of cycle 4.
    c = conf(policy_reset="ENDOFBUFFER_REACHED", policy_allocation="STRICT")
    ws = ndws.workspace("CIRC_PIN_SMALL", c)
    with ws:
        ndws.zeros(10)
    assert (ws.current_size, ws.initial_block_size, ws.step_number) == (168, 168, 0)
    assert ws.spilled_size == 128
    with ws:
        ndws.zeros(100)
        assert ws.pinned_size == 832
        assert ws.number_of_pinned_allocations == 1
        assert ws.spilled_size == 128
        assert ws.primary_offset == 0
        assert ws.this_cycle_allocations == 832
    assert (ws.step_number, ws.number_of_pinned_allocations, ws.pinned_size) == (1, 1, 832)
    assert ws.max_cycle_allocations == 832
    assert ws.primary_offset == 0
    with ws:
        ndws.zeros(10)                                      # fits at 0
    assert (ws.step_number, ws.number_of_pinned_allocations) == (2, 1)
    assert ws.primary_offset == 168                         # jumped to the block end
    with ws:
        ndws.zeros(10)                                      # 168 + 128 > 168: wraps to 0
        assert ws.primary_offset == 128
    assert (ws.step_number, ws.number_of_pinned_allocations, ws.pinned_size) == (3, 0, 0)
    assert ws.spilled_size == 0                             # freed after the wrap
    assert ws.number_of_external_allocations == 0
    assert ws.primary_offset == 168


def test_circular_variable_time_series_external():
    # testVariableTimeSeries1: OVERALLOCATE 3.0 (4 blocks), EXTERNAL.
    # Cold cycle: 2 * zeros(500) = 8064 spilled -> block floor(10483.2) = 10483 + 5 = 10488,
    # ring 4 * 10488 = 41952.
    c = conf(overallocation_limit=3.0, policy_reset="ENDOFBUFFER_REACHED")
    with mgr().get_and_activate_workspace(c, "CIRC_TS1"):
        ndws.zeros(500)
        ndws.zeros(500)
    ws = mgr().get_workspace_for_current_thread("CIRC_TS1")
    ws.enable_debug(True)
    ws.enable_debug(False)
    assert ws.step_number == 0
    assert ws.spilled_size == 8064
    assert ws.initial_block_size == 10488
    assert ws.current_size == 4 * 10488

    # zeros(2000) = 16000 > one block: pinned (EXTERNAL does not enter trimmed mode)
    with mgr().get_and_activate_workspace("CIRC_TS1"):
        ndws.zeros(2000)
    assert ws.step_number == 0
    assert ws.spilled_size == 8064
    assert ws.pinned_size == 16000
    assert ws.primary_offset == 0
    assert ws.this_cycle_allocations == 0
    assert ws.number_of_pinned_allocations == 1

    # 16 cycles of 8064 bytes, one block each; the ring wraps at the fifth. The step counter
    # reaches 3 at the close of the 11th of them (cycle 13 overall): the pinned entry
    # (step 0) is released then.
    for e in range(4):
        for i in range(4):
            with mgr().get_and_activate_workspace(c, "CIRC_TS1"):
                ndws.zeros(500)
                ndws.zeros(500)
            assert ws.primary_offset == (i + 1) * 10488, (e, i)
        assert ws.number_of_pinned_allocations == (0 if e >= 2 else 1), e
    assert ws.spilled_size == 0
    assert ws.pinned_size == 0
    assert ws.number_of_pinned_allocations == 0
    assert ws.number_of_external_allocations == 0

    # 3 * 4032 = 12096 per cycle: the third array no longer fits in the block and is pinned
    for _ in range(100):
        with mgr().get_and_activate_workspace(c, "CIRC_TS1"):
            ndws.zeros(500)
            ndws.zeros(500)
            ndws.zeros(500)
            assert ws.this_cycle_allocations == 12096
    assert ws.spilled_size == 0
    assert ws.pinned_size != 0
    assert ws.number_of_pinned_allocations != 0
    assert ws.number_of_external_allocations == 0

    # clean cycles again: every pinned entry ages out
    for _ in range(100):
        with mgr().get_and_activate_workspace(c, "CIRC_TS1"):
            ndws.zeros(500)
            ndws.zeros(500)
    assert ws.spilled_size == 0
    assert ws.pinned_size == 0
    assert ws.number_of_pinned_allocations == 0
    assert ws.number_of_external_allocations == 0


def test_circular_trimmed_mode_regrows_the_ring():
    # testVariableTimeSeries2: REALLOCATE. Block 10488 / ring 41952 as above. Cycle 2 needs
    # 12096: its third array switches trimmed mode on (trimmedStep 0) and is pinned; from then
    # on every allocation is pinned. At the close of cycle 13 the step counter reaches 3
    # (0 + 2 < 3): the ring is rebuilt from maxCycle 12096 -> block floor(15724.8) = 15724
    # + 4 = 15728, ring 4 * 15728 = 62912.
    c = conf(overallocation_limit=3.0, policy_spill="REALLOCATE",
             policy_reset="ENDOFBUFFER_REACHED")
    ws = mgr().get_workspace_for_current_thread(c, "CIRC_TS2")
    with mgr().get_and_activate_workspace(c, "CIRC_TS2"):
        ndws.zeros(500)
        ndws.zeros(500)
    assert ws.step_number == 0
    assert ws.spilled_size == 8064
    assert ws.initial_block_size == 10488
    assert ws.current_size == 4 * 10488

    for cycle in range(2, 102):
        with mgr().get_and_activate_workspace(c, "CIRC_TS2"):
            ndws.zeros(500)
            ndws.zeros(500)
            ndws.zeros(500)
            if cycle == 2:
                assert ws.number_of_pinned_allocations == 1
                assert ws.primary_offset == 8064
            if cycle == 3:
                assert ws.primary_offset == 8064        # trimmed: nothing goes to the ring
                assert ws.number_of_pinned_allocations == 4
        if cycle == 12:
            assert ws.current_size == 41952
            assert ws.step_number == 2
        if cycle == 13:
            assert ws.step_number == 3
            assert ws.initial_block_size == 15728
            assert ws.max_cycle_allocations == 15728
            assert ws.current_size == 62912
            assert ws.primary_offset == 0
            # step-0 entries (cycles 2-5) are gone; cycles 6-13 keep 3 pinned arrays each
            assert ws.number_of_pinned_allocations == 24
            assert ws.pinned_size == 24 * 4032
            assert ws.spilled_size == 8064              # no wrap yet
        if cycle == 14:
            assert ws.primary_offset == 15728           # fits again, one block per cycle
            assert ws.number_of_pinned_allocations == 24
        if cycle == 18:
            assert ws.spilled_size == 0                 # the ring wrapped in cycle 18
            assert ws.number_of_external_allocations == 0

    assert ws.current_size == ws.initial_block_size * 4 == 62912
    assert ws.number_of_pinned_allocations == 0
    assert ws.number_of_external_allocations == 0
    assert ws.spilled_size == 0
    assert ws.pinned_size == 0


def test_circular_variable_input_adsi():
    # testVariableInput1 (adsiConfiguration: OVERALLOCATE 3.0, REALLOCATE, FIRST_LOOP):
    # cold zeros(1000) = 8000 -> block 10400 + 8 = 10408, ring 41632.
    c = conf(overallocation_limit=3.0, policy_spill="REALLOCATE",
             policy_reset="ENDOFBUFFER_REACHED")
    ws = mgr().get_workspace_for_current_thread(c, "CIRC_ADSI")

    def cycle(n):
        with mgr().get_and_activate_workspace(c, "CIRC_ADSI"):
            ndws.zeros(n)

    cycle(1000)
    assert ws.initial_block_size == 10408
    assert ws.current_size == 10408 * 4
    assert ws.primary_offset == ws.device_offset == 0
    assert (ws.cycles_count, ws.step_number) == (1, 0)

    cycle(1000)                                         # same shape: one block
    assert ws.primary_offset == ws.device_offset == 10408
    assert (ws.cycles_count, ws.step_number) == (2, 0)

    cycle(2000)                                         # 16000 > block: pinned, trimmed on
    assert ws.primary_offset == ws.device_offset == 10408
    assert ws.number_of_pinned_allocations == 1
    assert (ws.cycles_count, ws.step_number) == (3, 0)

    cycle(1000)
    assert ws.number_of_pinned_allocations == 2
    assert (ws.cycles_count, ws.step_number) == (4, 0)

    cycle(1000)
    assert ws.number_of_pinned_allocations == 3
    assert (ws.cycles_count, ws.step_number) == (5, 1)

    for _ in range(12):
        cycle(1000)
    # Cycle 13 rebuilt the ring from maxCycle 16000: block 20800 + 8 = 20808, ring 83232.
    # Cycles 14-17 then take one block each, so the offset ends at the end of the ring.
    assert ws.step_number == 4
    assert ws.initial_block_size == 20808
    assert ws.current_size == 83232
    assert ws.primary_offset == ws.device_offset == ws.current_size
    # step-1 entries (cycles 6-9) went at step 4; cycles 10-13 (step 2) are still pinned
    assert ws.number_of_pinned_allocations == 4
    assert ws.pinned_size == 4 * 8000


def test_circular_arrays_are_attached_and_generation_advances():
    ws = ndws.workspace("CIRC_GEN", conf(policy_reset="ENDOFBUFFER_REACHED",
                                         overallocation_limit=1.0))
    gens = []
    for _ in range(3):
        with ws:
            a = ndws.zeros(10)
            assert a.is_attached()
            assert a.workspace_id == "CIRC_GEN"
            gens.append(ws.generation)
    assert gens == [1, 2, 3]
    assert ws.this_cycle_allocations == 0
    assert ws.last_cycle_allocations == 128


# ------------------------------------------------------------------------------------------------
# DebugMode (DebugModeTests)


def test_debug_mode_property():
    m = mgr()
    assert m.debug_mode is DebugMode.DISABLED
    m.debug_mode = DebugMode.SPILL_EVERYTHING
    assert m.debug_mode is DebugMode.SPILL_EVERYTHING
    m.debug_mode = None                                 # ND4J: null means DISABLED
    assert m.debug_mode is DebugMode.DISABLED
    m.set_debug_mode(DebugMode.BYPASS_EVERYTHING)
    assert m.debug_mode is DebugMode.BYPASS_EVERYTHING
    m.set_debug_mode(None)
    assert m.debug_mode is DebugMode.DISABLED


def test_debug_mode_is_process_wide(threaded):
    mgr().debug_mode = DebugMode.SPILL_EVERYTHING
    seen = threaded(lambda i: ndws.get_workspace_manager().debug_mode, 2)
    assert seen == [DebugMode.SPILL_EVERYTHING] * 2


def test_spill_everything_spills_even_if_it_fits():
    # testSpillMode_1: 10 MiB STRICT workspace; zeros((10, 10)) = 832 would fit but spills.
    mgr().debug_mode = DebugMode.SPILL_EVERYTHING
    with mgr().get_and_activate_workspace(BASIC, "DBG_SPILL_1") as ws:
        assert ws.current_size == 10 * MiB
        assert ws.primary_offset == ws.device_offset == ws.host_offset == 0
        a = ndws.ones((10, 10))
        assert a.is_attached()
        assert a.workspace_id == "DBG_SPILL_1"
        assert ws.primary_offset == 0
        assert ws.spilled_size == 832
        assert ws.number_of_external_allocations == 1
        assert ws.this_cycle_allocations == 832
        assert a.sum().item() == 100.0


def test_spill_everything_suppresses_learning():
    # testSpillMode_2: FIRST_LOOP from 0 does not learn while spilling everything; the cycle's
    # spills are freed at close (learning != NONE, BLOCK_LEFT). Once DISABLED again, the
    # next cycle learns as usual.
    mgr().debug_mode = DebugMode.SPILL_EVERYTHING
    with mgr().get_and_activate_workspace(LOOP_FIRST, "DBG_SPILL_2") as ws:
        assert ws.current_size == 0
        a = ndws.ones((10, 10))
        assert a.is_attached()
        assert ws.primary_offset == 0
        assert ws.spilled_size == 832
    assert ws.current_size == 0
    assert ws.spilled_size == 0
    with mgr().get_and_activate_workspace(LOOP_FIRST, "DBG_SPILL_2") as ws:
        assert ws.current_size == 0
        assert ws.primary_offset == 0
        assert ws.spilled_size == 0
    mgr().debug_mode = DebugMode.DISABLED
    with ws:
        ndws.zeros((10, 10))
    assert ws.current_size == 832


def test_spill_everything_suppresses_reallocation():
    mgr().debug_mode = DebugMode.SPILL_EVERYTHING
    ws = ndws.workspace("DBG_SPILL_REALLOC", conf(initial_size=1000, policy_allocation="STRICT",
                                                  policy_spill="REALLOCATE"))
    with ws:
        ndws.zeros(1000)
    assert ws.current_size == 1000
    assert ws.max_cycle_allocations == 8000


def test_bypass_everything_hands_out_dummy_workspaces():
    # testBypassMode_1: arrays created "inside" are detached.
    mgr().debug_mode = DebugMode.BYPASS_EVERYTHING
    with mgr().get_and_activate_workspace(LOOP_FIRST, "DBG_BYPASS") as ws:
        assert isinstance(ws, ndws.DummyWorkspace)
        assert ndws.current_workspace() is None
        a = ndws.ones((10, 10))
        assert not a.is_attached()
        assert a.workspace_id is None
    assert ndws.current_workspace() is None
    assert isinstance(ndws.workspace("DBG_BYPASS_2"), ndws.DummyWorkspace)
    assert isinstance(mgr().get_workspace_for_current_thread(), ndws.DummyWorkspace)
    assert isinstance(mgr().create_new_workspace(LOOP_FIRST, "DBG_BYPASS_3"),
                      ndws.DummyWorkspace)


def test_bypass_inside_a_real_workspace_scopes_out():
    real = ndws.workspace("DBG_REAL", BASIC)
    with real:
        mgr().debug_mode = DebugMode.BYPASS_EVERYTHING
        with ndws.workspace("DBG_BYPASS_INNER"):
            assert ndws.current_workspace() is None
            assert not ndws.zeros(10).is_attached()
        assert ndws.current_workspace() is real
        mgr().debug_mode = DebugMode.DISABLED
        assert ndws.zeros(10).workspace_id == "DBG_REAL"
        assert real.primary_offset == 128


# ------------------------------------------------------------------------------------------------
# toggle_workspace_use (testToggle1)


def test_toggle_workspace_use():
    # Toggled-off allocations are not counted anywhere (§2.3 step 2), so the cold cycle
    # learns 2 * 832 = 1664, and in the hot cycle the offset skips the toggled-off array.
    ws = mgr().create_new_workspace(LOOP_FIRST, "TOGGLE_1")
    assert ws.primary_offset == 0
    with ws:
        ndws.zeros(100)
        ws.toggle_workspace_use(False)
        off = ndws.ones(100)
        assert off.is_attached()                    # still marked attached (§2.3)
        assert off.workspace_id == "TOGGLE_1"
        assert off.sum().item() == 100.0
        assert ws.this_cycle_allocations == 832
        assert ws.spilled_size == 832
        assert ws.number_of_external_allocations == 1
        ws.toggle_workspace_use(True)
        ndws.zeros(100)
        assert ws.this_cycle_allocations == 1664
    assert ws.primary_offset == 0
    assert ws.current_size == 1664
    with ws:
        ndws.zeros(100)
        ws.toggle_workspace_use(False)
        off = ndws.ones(100)
        assert off.sum().item() == 100.0
        ws.toggle_workspace_use(True)
        assert ws.primary_offset == 832
        assert ws.this_cycle_allocations == 832
        ndws.zeros(100)
        assert ws.primary_offset == 1664


def test_toggled_off_workspace_is_reenabled_at_close():
    # §2.5 step 5: a workspace left toggled off is silently switched back on at close.
    ws = ndws.workspace("TOGGLE_2", BASIC)
    with ws:
        ws.toggle_workspace_use(False)
        ndws.zeros(10)
        assert ws.primary_offset == 0
        assert ws.this_cycle_allocations == 0
    assert ws.last_cycle_allocations == 0
    with ws:
        ndws.zeros(10)
        assert ws.primary_offset == 128
        assert ws.this_cycle_allocations == 128
