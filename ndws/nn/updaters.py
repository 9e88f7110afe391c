"""Updaters and learning-rate schedules for networks (DL4J's ``IUpdater`` configurations and
``ISchedule``), each a frozen, validated description that a network applies with the fused
in-place kernels of `ndws.nn.functional` over its one flat parameter buffer.

The learning rate comes first: ``Sgd(0.1)``, ``Adam(1e-3)``; it may be a number or a schedule.

Examples
--------
>>> from ndws.nn import Adam, StepSchedule, ScheduleType
>>> adam = Adam(StepSchedule(ScheduleType.ITERATION, 1e-2, decay_rate=0.5, step=100))
>>> adam.learning_rate_at(iteration=250, epoch=0)
0.0025
>>> Adam.from_dict(adam.to_dict()) == adam
True
"""
from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any, ClassVar

import numpy as np

from ndws.nn import functional as F

__all__ = ["FieldTypeError", "ScheduleType", "Schedule", "StepSchedule", "ExponentialSchedule", "CycleSchedule",
           "Updater", "Sgd", "Nesterovs", "Adam", "AdamW", "RmsProp", "AdaGrad"]


class FieldTypeError(TypeError, ValueError):
    """A configuration field of the wrong type. A TypeError, as bad types are everywhere in
    ndws, and a ValueError, as every configuration error of a network is (so one
    ``except ValueError`` catches them all)."""


class ScheduleType(enum.Enum):
    """What a schedule counts (DL4J's ``ScheduleType``)."""

    ITERATION = "ITERATION"
    EPOCH = "EPOCH"


def real_field(owner: str, name: str, value: Any, lo: float = 0.0, hi: float = math.inf,
               lo_open: bool = False, hi_open: bool = False) -> float:
    """A configuration field that is a finite real in [lo, hi] (each end open when asked),
    named in the error as owner.name (layers and updaters alike)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise FieldTypeError(f"{owner}.{name}: expected a real number, got {type(value).__name__} "
                             f"{value!r:.40}")
    try:
        v = float(value)
    except OverflowError:                # a Python int beyond any double: out of range
        v = math.inf
    if (not math.isfinite(v) or (v <= lo if lo_open else v < lo)
            or (v >= hi if hi_open else v > hi)):
        upper = "inf" if hi == math.inf else f"{hi:g}"
        raise ValueError(f"{owner}.{name}: must be in {'(' if lo_open else '['}{lo:g}, {upper}"
                         f"{')' if hi_open else ']'}, got {value!r:.40}")
    return v


def _count(owner: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise FieldTypeError(f"{owner}.{name}: expected an int >= 1, got {type(value).__name__} "
                        f"{value!r:.40}")
    if value < 1:
        raise ValueError(f"{owner}.{name}: expected an int >= 1, got {value!r}")
    return int(value)


_REGISTRY: dict[str, type] = {}


class _Serial:
    """to_dict / from_dict for the frozen dataclasses of this module: {"@class": name, fields}."""

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        _REGISTRY[cls.__name__] = cls

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"@class": type(self).__name__}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = (v.to_dict() if isinstance(v, _Serial)
                           else v.value if isinstance(v, enum.Enum) else v)
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("@class"), str):
            raise ValueError(f"{cls.__name__}.from_dict: expected a dict with an '@class' entry, "
                             f"got {data!r:.60}")
        target = _REGISTRY.get(data["@class"])
        if target is None or not issubclass(target, cls):
            raise ValueError(f"{cls.__name__}.from_dict: unknown class {data['@class']!r}")
        names = {f.name: f for f in dataclasses.fields(target)}
        unknown = set(data) - set(names) - {"@class"}
        if unknown:
            raise ValueError(f"{target.__name__}.from_dict: unknown fields {sorted(unknown)}")
        kwargs = {}
        for k, v in data.items():
            if k == "@class":
                continue
            if isinstance(v, dict):
                # only schedules nest (a learning rate): one level, so a file's nesting can't
                # recurse without bound
                v = Schedule.from_dict(v)
            elif k == "schedule_type":
                v = ScheduleType(v)
            kwargs[k] = v
        return target(**kwargs)


# ------------------------------------------------------------------------------------------------
# Schedules

class Schedule(_Serial):
    """A value that changes with the iteration or the epoch (DL4J's ``ISchedule``)."""

    schedule_type: ScheduleType

    def value_at(self, iteration: int, epoch: int) -> float:
        """The value at `iteration` / `epoch` (both count from 0)."""
        raise NotImplementedError

    def _check_type(self) -> None:
        if not isinstance(self.schedule_type, ScheduleType):
            raise FieldTypeError(f"{type(self).__name__}.schedule_type: expected a ScheduleType, "
                                 f"got "
                            f"{self.schedule_type!r:.40}")

    def _count_of(self, iteration: int, epoch: int) -> int:
        return iteration if self.schedule_type is ScheduleType.ITERATION else epoch


@dataclasses.dataclass(frozen=True)
class StepSchedule(Schedule):
    """``initial_value * decay_rate ** floor(t / step)`` (DL4J's ``StepSchedule``)."""

    schedule_type: ScheduleType
    initial_value: float
    decay_rate: float
    step: int

    def __post_init__(self) -> None:
        self._check_type()
        real_field("StepSchedule", "initial_value", self.initial_value)
        real_field("StepSchedule", "decay_rate", self.decay_rate)
        _count("StepSchedule", "step", self.step)

    def value_at(self, iteration: int, epoch: int) -> float:
        return self.initial_value * self.decay_rate ** (self._count_of(iteration, epoch)
                                                        // self.step)


@dataclasses.dataclass(frozen=True)
class ExponentialSchedule(Schedule):
    """``initial_value * gamma ** t`` (DL4J's ``ExponentialSchedule``)."""

    schedule_type: ScheduleType
    initial_value: float
    gamma: float

    def __post_init__(self) -> None:
        self._check_type()
        real_field("ExponentialSchedule", "initial_value", self.initial_value)
        real_field("ExponentialSchedule", "gamma", self.gamma)

    def value_at(self, iteration: int, epoch: int) -> float:
        return self.initial_value * self.gamma ** self._count_of(iteration, epoch)


@dataclasses.dataclass(frozen=True)
class CycleSchedule(Schedule):
    """One-cycle learning rate (DL4J's ``CycleSchedule``): up linearly from `initial_value` to
    `max_value` over half of ``cycle_length - annealing_length``, down again over the other half,
    then ``initial_value * annealing_decay ** k`` for the k-th count of the last
    `annealing_length`; repeating every `cycle_length` counts."""

    schedule_type: ScheduleType
    initial_value: float
    max_value: float
    cycle_length: int
    annealing_length: int
    annealing_decay: float

    def __post_init__(self) -> None:
        self._check_type()
        real_field("CycleSchedule", "initial_value", self.initial_value)
        real_field("CycleSchedule", "max_value", self.max_value)
        _count("CycleSchedule", "cycle_length", self.cycle_length)
        if (isinstance(self.annealing_length, bool)
                or not isinstance(self.annealing_length, (int, np.integer))
                or not 0 <= self.annealing_length < self.cycle_length - 1):
            raise ValueError(f"CycleSchedule.annealing_length: expected an int in [0, "
                             f"cycle_length - 1), got {self.annealing_length!r:.40}")
        real_field("CycleSchedule", "annealing_decay", self.annealing_decay, 0.0, 1.0)

    def value_at(self, iteration: int, epoch: int) -> float:
        t = self._count_of(iteration, epoch) % self.cycle_length
        half = (self.cycle_length - self.annealing_length) // 2
        step = (self.max_value - self.initial_value) / half
        if t < half:
            return self.initial_value + t * step
        if t < 2 * half:
            return self.max_value - (t - half) * step
        # DL4J's annealing: initial * decay ** (t - (cycle_length - annealing_length)), its
        # exponent clamped at 0 (DL4J's goes to -1 when cycle - annealing length is odd)
        into = max(0, self.annealing_length - (self.cycle_length - t))
        return self.initial_value * self.annealing_decay ** into


# ------------------------------------------------------------------------------------------------
# Updaters

def _lr(owner: str, value: Any) -> None:
    if isinstance(value, Schedule):
        return
    real_field(owner, "learning_rate", value)


class Updater(_Serial):
    """Base of the updater configurations. A network keeps `n_state` flat state arrays per
    parameter buffer (zeros at the start) and calls `apply` once per iteration on the whole
    flat buffer."""

    #: state arrays per parameter array (velocity, moments, ...)
    n_state: ClassVar[int] = 0
    learning_rate: Any

    def learning_rate_at(self, iteration: int, epoch: int) -> float:
        """The learning rate of an update (a schedule evaluated, or the fixed value)."""
        lr = self.learning_rate
        return lr.value_at(iteration, epoch) if isinstance(lr, Schedule) else float(lr)

    def apply(self, params: Any, grads: Any, state: list, iteration: int, epoch: int) -> None:
        """Update `params` in place from `grads`, with `state` (`n_state` arrays shaped like
        `params`); `iteration` and `epoch` count from 0."""
        self._step(params, grads, state, self.learning_rate_at(iteration, epoch), iteration)

    def _step(self, params: Any, grads: Any, state: list, lr: float, iteration: int) -> None:
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class Sgd(Updater):
    """Plain SGD: ``p -= lr * g``."""

    learning_rate: Any = 1e-3

    def __post_init__(self) -> None:
        _lr("Sgd", self.learning_rate)

    def _step(self, params, grads, state, lr, iteration):
        F.sgd_update(params, grads, lr)


@dataclasses.dataclass(frozen=True)
class Nesterovs(Updater):
    """SGD with Nesterov momentum (torch's formulation of DL4J's ``Nesterovs``)."""

    learning_rate: Any = 0.1
    momentum: float = 0.9
    n_state: ClassVar[int] = 1

    def __post_init__(self) -> None:
        _lr("Nesterovs", self.learning_rate)
        real_field("Nesterovs", "momentum", self.momentum, 0.0, 1.0)

    def _step(self, params, grads, state, lr, iteration):
        F.momentum_update(params, grads, state[0], lr, self.momentum, nesterov=True)


@dataclasses.dataclass(frozen=True)
class Adam(Updater):
    """Adam (DL4J's defaults: learning rate 1e-3, beta1 0.9, beta2 0.999, epsilon 1e-8)."""

    learning_rate: Any = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    n_state: ClassVar[int] = 2

    def __post_init__(self) -> None:
        _lr(type(self).__name__, self.learning_rate)
        real_field(type(self).__name__, "beta1", self.beta1, 0.0, 1.0, hi_open=True)
        real_field(type(self).__name__, "beta2", self.beta2, 0.0, 1.0, hi_open=True)
        real_field(type(self).__name__, "epsilon", self.epsilon)

    def _step(self, params, grads, state, lr, iteration):
        F.adam_update(params, grads, state[0], state[1], iteration + 1, lr, self.beta1,
                      self.beta2, self.epsilon)


@dataclasses.dataclass(frozen=True)
class AdamW(Adam):
    """Adam with decoupled weight decay (``p *= 1 - lr * weight_decay`` before the Adam step)."""

    weight_decay: float = 1e-2

    def __post_init__(self) -> None:
        super().__post_init__()
        real_field("AdamW", "weight_decay", self.weight_decay)

    def _step(self, params, grads, state, lr, iteration):
        F.adamw_update(params, grads, state[0], state[1], iteration + 1, lr, self.beta1,
                       self.beta2, self.epsilon, self.weight_decay)


@dataclasses.dataclass(frozen=True)
class RmsProp(Updater):
    """RMSProp (DL4J's defaults: learning rate 0.1, rms_decay 0.95, epsilon 1e-8)."""

    learning_rate: Any = 0.1
    rms_decay: float = 0.95
    epsilon: float = 1e-8
    n_state: ClassVar[int] = 1

    def __post_init__(self) -> None:
        _lr("RmsProp", self.learning_rate)
        real_field("RmsProp", "rms_decay", self.rms_decay, 0.0, 1.0)
        real_field("RmsProp", "epsilon", self.epsilon)

    def _step(self, params, grads, state, lr, iteration):
        F.rmsprop_update(params, grads, state[0], lr, self.rms_decay, self.epsilon)


@dataclasses.dataclass(frozen=True)
class AdaGrad(Updater):
    """AdaGrad (DL4J's defaults: learning rate 0.1, epsilon 1e-6)."""

    learning_rate: Any = 0.1
    epsilon: float = 1e-6
    n_state: ClassVar[int] = 1

    def __post_init__(self) -> None:
        _lr("AdaGrad", self.learning_rate)
        real_field("AdaGrad", "epsilon", self.epsilon)

    def _step(self, params, grads, state, lr, iteration):
        F.adagrad_update(params, grads, state[0], lr, self.epsilon)
