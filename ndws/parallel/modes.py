"""The option enums of `ndws.parallel` (DL4J's names) and the checks its constructors share:
every bad option is a ``TypeError`` / ``ValueError`` naming it, at construction."""
from __future__ import annotations

import enum
import numbers
from typing import Any

from ndws.nn.layers.base import member

__all__ = ["TrainingMode", "InferenceMode", "LoadBalanceMode"]


class TrainingMode(enum.Enum):
    """How `ParallelWrapper`'s workers combine their work (DL4J's ``TrainingMode``)."""

    #: each worker trains its own replica; every `averaging_frequency` rounds the parameters
    #: (and, with `average_updaters`, the updater state) are averaged
    AVERAGING = "AVERAGING"
    #: every round the workers' gradients are combined and one update is applied to one shared
    #: parameter set (what DL4J's gradient sharing approximates, exactly)
    SHARED_GRADIENTS = "SHARED_GRADIENTS"


class InferenceMode(enum.Enum):
    """How `ParallelInference` runs requests (DL4J's ``InferenceMode``)."""

    #: one request at a time per worker
    SEQUENTIAL = "SEQUENTIAL"
    #: requests of the same feature shape are merged, up to `batch_limit` rows, into one pass
    BATCHED = "BATCHED"
    #: no worker threads: the calling thread runs a replica picked by `load_balance_mode`
    INPLACE = "INPLACE"


class LoadBalanceMode(enum.Enum):
    """How INPLACE inference picks a replica (DL4J's ``LoadBalanceMode``)."""

    #: the first free replica (a caller waits while all are busy)
    FIFO = "FIFO"
    #: a counter modulo the number of replicas (a caller waits for that replica when busy)
    ROUND_ROBIN = "ROUND_ROBIN"


def option_enum(cls: type, value: Any, name: str) -> Any:
    """`value` as a member of `cls` (the member or its name in any case), else ValueError
    naming the option."""
    return member(cls, value, f"{name}: unknown {cls.__name__}", f"(or an ndws.parallel."
                  f"{cls.__name__})" if cls.__module__.startswith("ndws.parallel") else "")


def option_int(value: Any, name: str, low: int, why: str = "", message: str = "") -> int:
    """`value` as an int >= `low`, else TypeError / ValueError naming the option (with DL4J's
    `message` for a value below `low` where DL4J has one)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):   # NumPy's too
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    value = int(value)
    if value < low:
        if message:
            raise ValueError(f"{name}: {message} (at least {low}), got {value}")
        raise ValueError(f"{name}: must be at least {low}{why}, got {value}")
    if value > 1 << 20:
        raise ValueError(f"{name}: must be at most {1 << 20}, got {value}")
    return value


def option_bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected True or False, got {value!r:.40}")
    return value


def check_model(model: Any, owner: str) -> Any:
    """An initialised MultiLayerNetwork or ComputationGraph, else TypeError / ValueError
    saying so."""
    from ndws.nn._model import Model
    if not isinstance(model, Model):
        raise TypeError(f"{owner}: model must be an ndws.nn.MultiLayerNetwork or "
                        f"ComputationGraph, got {type(model).__name__}")
    if model._params is None:
        raise ValueError(f"{owner}: model is not initialised; call model.init() first")
    return model


class Builder:
    """DL4J's builders (``ParallelWrapper.Builder``, ``ParallelInference.Builder``): one method
    per option of `cls` (its ``_OPTIONS``), each returning the builder, then `build()`."""

    def __init__(self, cls: type, model: Any):
        self._cls = cls
        self._model = model
        self._options: dict = {}

    def __getattr__(self, name: str) -> Any:
        options = self.__dict__["_cls"]._OPTIONS
        if name not in options:
            raise AttributeError(f"{self._cls.__name__}.builder has no option {name!r}; "
                                 f"options: {', '.join(options)}")

        def set_(value: Any) -> "Builder":
            self._options[name] = value
            return self
        return set_

    def build(self) -> Any:
        return self._cls(self._model, **self._options)


class Stoppable:
    """`close()` and the ``with`` statement for an engine whose `shutdown()` stops it."""

    def shutdown(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """The same as `shutdown`."""
        self.shutdown()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.shutdown()
