"""Helpers and configurations shared by the ND4J-derived workspace tests (the configurations
ND4J's own workspace tests use, by their Java names)."""
from __future__ import annotations

import ndws
from ndws import AllocationPolicy, LearningPolicy, SpillPolicy, WorkspaceConfiguration

MiB = 1024 * 1024


def aligned(nbytes: int) -> int:
    """Bytes an allocation of `nbytes` consumes in a workspace (rounded up to ALIGNMENT)."""
    return -(-nbytes // ndws.ALIGNMENT) * ndws.ALIGNMENT


def mgr() -> ndws.WorkspaceManager:
    return ndws.get_workspace_manager()


def conf(**kw) -> WorkspaceConfiguration:
    return WorkspaceConfiguration(**kw)


# BasicWorkspaceTests.basicConfig / loopFirstConfig / loopOverTimeConfig
BASIC = conf(initial_size=10 * MiB, max_size=10 * MiB, overallocation_limit=0.1,
             policy_allocation=AllocationPolicy.STRICT, policy_learning=LearningPolicy.FIRST_LOOP,
             policy_spill=SpillPolicy.EXTERNAL)
LOOP_FIRST = BASIC.replace(initial_size=0)
LOOP_OVER_TIME = LOOP_FIRST.replace(policy_learning=LearningPolicy.OVER_TIME)
