"""What a `MultiLayerNetwork` checks of what its layers hand back, built-in or custom (a custom
layer is user code: docs/networks.md, "A custom layer").

A network trusts its layers' answers with memory: a parameter shape places the next layer's
weights in the flat buffer, a gradient is copied into its parameter's view, an activation is the
next layer's input. Each answer is checked where the network receives it, and a wrong one gets a
``ValueError`` / ``TypeError`` naming ``layers[i]``, its class, the method and the parameter or
shape, before it is used: never a silent broadcast, an overlap of two layers' parameters, or an
error from a kernel that names no layer. What a layer returns from a pass is checked for the
layers defined outside ndws (`user_code`): ndws' own layers are tested to return the right
arrays, and the checks cost about a microsecond a layer, 5% of serving one row of a small MLP.
"""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ndws._core import NDArray
from ndws.nn.workspace_mgr import ArrayType

__all__ = ["where", "user_code", "param_shapes", "memory_use", "returned", "backprop_result",
           "output_result", "gradients", "real", "params_kept"]

#: the most elements one parameter, or one array a layer declares, may have (2**31 per
#: dimension as for layer sizes; no machine holds more than this many bytes)
MAX_BYTES = 1 << 48


def where(layer: Any) -> str:
    """``layers[i] (Class)``: how every error names a layer (a graph's vertices say
    ``vertices["name"] (Class)``, their ``_where``)."""
    named = getattr(layer, "_where", None)
    if named is not None:
        return named
    return f"layers[{layer.index}] ({type(layer).__name__})"


def user_code(layer: Any) -> bool:
    """Whether `layer`'s class is defined outside ndws (a custom layer, or a subclass of a
    built-in one): what its passes return is checked."""
    return not type(layer).__module__.startswith("ndws.")


def param_shapes(layer: Any, itemsize: int) -> dict[str, tuple[int, ...]]:
    """`layer.param_shapes()`, checked: a dict of non-empty names to non-empty tuples of ints
    in [1, 2**31] whose elements fit in MAX_BYTES (a negative or zero size would make the next
    parameter overlap this one in the flat buffer)."""
    shapes = layer.param_shapes()
    if not isinstance(shapes, dict):
        raise TypeError(f"{where(layer)}.param_shapes() must return a dict of parameter name "
                        f"-> shape tuple, got {type(shapes).__name__}")
    out = {}
    for name, shape in shapes.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"{where(layer)}.param_shapes(): parameter names must be non-empty "
                            f"strings, got {name!r:.40}")
        what = f"{where(layer)}.param_shapes()[{name!r}]"
        if not isinstance(shape, tuple) or not shape:
            raise TypeError(f"{what}: expected a non-empty tuple of ints >= 1 (a scalar is "
                            f"(1,)), got {type(shape).__name__} {shape!r:.40}")
        size = 1
        for d in shape:
            if isinstance(d, bool) or not isinstance(d, numbers.Integral):
                raise TypeError(f"{what}: expected a tuple of ints >= 1, got {shape!r:.60}")
            if not 1 <= d <= 1 << 31:
                raise ValueError(f"{what}: every size must be in [1, 2**31], got {shape!r:.60}")
            size *= int(d)
        if size * itemsize > MAX_BYTES:
            raise ValueError(f"{what}: {shape!r:.60} is {size * itemsize:,} bytes, more than "
                             f"any machine holds")
        out[name] = tuple(int(d) for d in shape)
    return out


def memory_use(layer: Any, batch: int, training: bool, itemsize: int) -> list | None:
    """`layer.memory_use(...)`, checked: None, or a list of ``(pass, ArrayType, bytes)``
    with pass "forward" or "backward" and bytes an int in [0, MAX_BYTES]."""
    use = layer.memory_use(batch, training, itemsize)
    if use is None:
        return None
    what = f"{where(layer)}.memory_use({batch}, {training}, {itemsize})"
    if not isinstance(use, (list, tuple)):
        raise TypeError(f"{what} must return a list of (pass, ArrayType, bytes) or None, got "
                        f"{type(use).__name__}")
    for k, entry in enumerate(use):
        if not isinstance(entry, tuple) or len(entry) != 3:
            raise TypeError(f"{what}[{k}]: expected a (pass, ArrayType, bytes) tuple, got "
                            f"{entry!r:.60}")
        phase, t, nbytes = entry
        if phase not in ("forward", "backward"):
            raise ValueError(f"{what}[{k}]: pass must be 'forward' or 'backward', got "
                             f"{phase!r:.40}")
        if not isinstance(t, ArrayType):
            raise TypeError(f"{what}[{k}]: expected an ndws.nn.ArrayType, got "
                            f"{type(t).__name__} {t!r:.40}")
        if isinstance(nbytes, bool) or not isinstance(nbytes, numbers.Integral):
            raise TypeError(f"{what}[{k}]: bytes must be an int, got {type(nbytes).__name__} "
                            f"{nbytes!r:.40}")
        if not 0 <= nbytes <= MAX_BYTES:
            raise ValueError(f"{what}[{k}]: bytes must be in [0, 2**48], got {nbytes}")
    return [(p, t, int(b)) for p, t, b in use]


def returned(layer: Any, op: str, array: Any, shape: tuple, dtype: Any) -> None:
    """What `op` ("activate", "backprop_gradient", ...) returned must be an NDArray of exactly
    `shape` (a None entry: any size there) and `dtype`."""
    if type(array) is NDArray and array.dtype == dtype:
        got = array.shape
        if len(got) == len(shape) and all(e is None or g == e for g, e in zip(got, shape)):
            return                                              # the common case
    if not isinstance(array, NDArray):
        raise TypeError(f"{where(layer)}.{op} returned {type(array).__name__}, expected an "
                        f"ndws.NDArray")
    if array.dtype != dtype:
        raise TypeError(f"{where(layer)}.{op} returned dtype {array.dtype}, expected {dtype} "
                        f"(the network's dtype)")
    want = "(" + ", ".join("?" if e is None else str(e) for e in shape) + \
        ("," if len(shape) == 1 else "") + ")"
    raise ValueError(f"{where(layer)}.{op} returned shape {tuple(array.shape)}, expected {want}"
                     + (" (its declared output width)" if op == "activate" else
                        " (its input's shape)"))


def backprop_result(layer: Any, result: Any) -> tuple[Any, Any]:
    """``(gradients, epsilon)`` of `layer.backprop_gradient`, unpacked only when it is a pair
    (an epsilon alone of two rows would unpack silently)."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise TypeError(f"{where(layer)}.backprop_gradient must return (gradients dict, "
                        f"epsilon), got {_kind(result)}")
    return result


def output_result(layer: Any, result: Any) -> tuple[float, Any, Any]:
    """``(score, gradients, epsilon)`` of an output layer's `compute_score_and_gradient`."""
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        raise TypeError(f"{where(layer)}.compute_score_and_gradient must return (score, "
                        f"gradients dict, epsilon), got {_kind(result)}")
    score, grads, eps = result
    return real(layer, "compute_score_and_gradient", score), grads, eps


def gradients(layer: Any, grads: Any, checked: bool = True) -> None:
    """Copy a layer's returned gradients into its views in the flat gradient buffer (those it
    wrote in place are its views already). `checked` (user code): one per trainable parameter
    (a missing one would leave the last iteration's gradient to be applied again), each
    exactly its parameter's shape and dtype (a (1,) gradient would be broadcast into a (5,)
    parameter)."""
    if not checked:
        for name, g in grads.items():
            if g is not layer.grads[name]:
                layer.grads[name].assign(g)
        return
    if not isinstance(grads, dict):
        raise TypeError(f"{where(layer)}.backprop_gradient must return (gradients dict, "
                        f"epsilon), got {type(grads).__name__} for the gradients")
    views = layer.grads
    for name, g in grads.items():
        view = views.get(name)
        if view is None:
            raise ValueError(f"{where(layer)}: gradient {name!r:.40} is not one of its "
                             f"parameters {sorted(views)}")
        if g is view:
            continue                               # written in place (the built-in layers)
        if not isinstance(g, (NDArray, np.ndarray)):
            raise TypeError(f"{where(layer)}: gradient {name!r} must be an array, got "
                            f"{type(g).__name__}")
        if tuple(g.shape) != view.shape:
            raise ValueError(f"{where(layer)}: gradient {name!r} has shape {tuple(g.shape)}, "
                             f"its parameter has shape {view.shape}")
        if g.dtype != view.dtype:
            raise TypeError(f"{where(layer)}: gradient {name!r} has dtype {g.dtype}, its "
                            f"parameter has dtype {view.dtype}")
    missing = [name for name in views if name not in grads and layer.trainable(name)]
    if missing:
        raise ValueError(f"{where(layer)}: no gradient for {missing[0]!r} (return every "
                         f"trainable parameter's gradient: layer.grads[{missing[0]!r}] itself "
                         f"when written in place)")
    for name, g in grads.items():
        if g is not views[name]:
            views[name].assign(g)


def real(layer: Any, op: str, value: Any) -> float:
    """A score or regularisation term `op` returned, as a float (NaN and inf are values: a
    diverging network's)."""
    if isinstance(value, (NDArray, np.ndarray)) and value.size == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{where(layer)}.{op} returned {type(value).__name__} {value!r:.40} "
                        f"for the score, expected a real number")
    return float(value)


def params_kept(layer: Any, views: dict) -> None:
    """After `init_params`: the layer's parameters are still the network's views (a new array
    put in their place would never be trained, saved or seen by the flat buffer)."""
    for name, view in views.items():
        if layer.params.get(name) is not view:
            raise ValueError(f"{where(layer)}.init_params replaced params[{name!r}] instead of "
                             f"filling it (write into the view: params[{name!r}].assign(...))")


def _kind(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    shape = getattr(value, "shape", None)
    return type(value).__name__ + (f" of shape {tuple(shape)}" if shape is not None else "")
