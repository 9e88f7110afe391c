"""The vertices of a `ComputationGraph` that are not layers (DL4J's
``org.deeplearning4j.nn.conf.graph`` and ``...graph.vertex.impl``), and `GraphVertex`, the base
class of custom vertices
(docs/graphs.md, "The vertices" and "A custom vertex").

A vertex object is first a configuration (its constructor's arguments, listed in ``fields`` for
the JSON round trip); the graph clones it when it is built. At run time it gets the list of its
inputs' activations and makes every array through the `LayerWorkspaceMgr` it is handed, as a
layer does: its output in ``ArrayType.ACTIVATIONS``, the epsilons of its inputs in
``ArrayType.ACTIVATION_GRAD``, temporaries in the working memory of its pass. It keeps on
itself what its backward pass needs (the `clear` after each pass drops it).

Masks follow DL4J (docs/graphs.md, "Masks"): each vertex says what mask its output carries from
the masks of its inputs (`feed_forward_mask`); masks are made outside every workspace.

Examples
--------
>>> import numpy as np, ndws
>>> from ndws.nn import LayerWorkspaceMgr
>>> from ndws.nn.graph import ElementWiseVertex, SubsetVertex
>>> mgr = LayerWorkspaceMgr.no_workspaces()
>>> a, b = ndws.asarray(np.ones((2, 3))), ndws.asarray(np.full((2, 3), 2.0))
>>> ElementWiseVertex("product").activate([a, b], False, mgr).tolist()
[[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]
>>> SubsetVertex(1, 2).activate([ndws.asarray(np.arange(8.0).reshape(2, 4))], False, mgr).tolist()
[[1.0, 2.0], [5.0, 6.0]]
"""
from __future__ import annotations

import enum
import math
from typing import Any, ClassVar

import numpy as np

import ndws
from ndws._core import NDArray, _np_view
from ndws.nn.inputs import (CNN2DFormat, InputType, RNNFormat, config_dict, member,
                            registered)
from ndws.nn.preprocessors import InputPreProcessor
from ndws.nn.updaters import FieldTypeError
from ndws.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr
from ndws.workspace import scope_out_of_workspaces

__all__ = ["GraphVertex", "MergeVertex", "ElementWiseVertex", "SubsetVertex", "StackVertex",
           "UnstackVertex", "ScaleVertex", "ShiftVertex", "L2NormalizeVertex", "L2Vertex",
           "PreprocessorVertex", "ReshapeVertex", "LastTimeStepVertex",
           "DuplicateToTimeSeriesVertex", "ReverseTimeSeriesVertex"]

_VERTICES: dict[str, type] = {}
_A, _G = ArrayType.ACTIVATIONS, ArrayType.ACTIVATION_GRAD
_BP = ArrayType.BP_WORKING_MEM


def _class_key(cls: type) -> str:
    # "@class": the bare name for ndws' own vertices, module.qualname for a custom one
    return cls.__name__ if cls.__module__ == __name__ else f"{cls.__module__}.{cls.__qualname__}"


def _int_field(owner: str, name: str, value: Any, low: int = 0) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise FieldTypeError(f"{owner}.{name}: expected an int >= {low}, got "
                             f"{type(value).__name__} {value!r:.40}")
    if not low <= value <= 1 << 31:
        raise ValueError(f"{owner}.{name}: expected an int in [{low}, 2**31], got {value!r}")
    return int(value)


def _real_field(owner: str, name: str, value: Any, positive: bool = False) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)):
        raise FieldTypeError(f"{owner}.{name}: expected a finite real number, got "
                             f"{type(value).__name__} {value!r:.40}")
    try:
        v = float(value)
    except OverflowError:
        v = math.inf
    if not math.isfinite(v) or (positive and v <= 0):
        raise ValueError(f"{owner}.{name}: expected a {'positive' if positive else 'finite'} "
                         f"real number, got {value!r:.40}")
    return v


def _name_field(owner: str, name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise FieldTypeError(f"{owner}.{name}: expected the name of a network input (a "
                             f"non-empty str), got {type(value).__name__} {value!r:.40}")
    return value


def _nbytes(shape: tuple, itemsize: int) -> int:
    n = itemsize
    for d in shape:
        n *= d
    return n


class GraphVertex:
    """Base class of the vertices of a `ComputationGraph` that are not layers, built-in and
    custom (DL4J's ``GraphVertex``).

    A custom vertex lists its constructor's keyword arguments in ``fields`` (for `to_dict` /
    ``ComputationGraphConfiguration.from_json``), says how many inputs it takes
    (``min_inputs``, ``max_inputs``; a vertex of one input given several gets a
    ``<name>-merge`` MergeVertex before it) and what its output is (`output_type`), and
    implements `activate` and `backprop_gradient` with arrays from the manager it is given.
    Parameters are optional: declare them in `param_shapes` and fill them in `init_params`,
    as a layer does (``self.params`` / ``self.grads`` are views of the graph's flat buffers).

    The graph checks what a custom vertex returns: an NDArray of the network's dtype in the
    right workspace (its output in ACTIVATIONS, each epsilon in ACTIVATION_GRAD, or detached
    when that type is), as many epsilons as inputs, each of its input's shape; an error names
    the vertex (``vertices["name"] (Class)``).
    """

    fields: ClassVar[tuple[str, ...]] = ()
    #: how many inputs the vertex takes (max_inputs None: any number)
    min_inputs: ClassVar[int] = 1
    max_inputs: ClassVar[int | None] = None
    #: what a vertex has in common with a layer, for the graph's flat parameters and updater
    updater = None
    weight_keys: ClassVar[tuple[str, ...]] = ()
    weight_decay = None
    #: the fields that name a network input (checked when the configuration is built)
    input_name_fields: ClassVar[tuple[str, ...]] = ()
    #: attributes a pass leaves on the vertex for its backward pass; `clear` drops them
    _pass_state: ClassVar[tuple[str, ...]] = ("_inputs", "_out", "_shapes", "_index")

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        _VERTICES[_class_key(cls)] = cls

    def __init__(self) -> None:
        # set by the graph when it is built
        #: the vertex's name in its graph
        self.name: str = ""
        #: the types of its inputs (None where unknown), set when the configuration resolves it
        self.input_types: list | None = None
        #: the types of the network's inputs by name (None where unknown), set with input_types
        self.network_input_types: dict = {}
        self.params: dict[str, NDArray] = {}
        self.grads: dict[str, NDArray] = {}
        self._network: Any = None

    # -- configuration --------------------------------------------------------------------------

    def to_dict(self) -> dict:
        """The vertex's configuration: {"@class": class name, field: value} (JSON-ready)."""
        return config_dict(self, _class_key(type(self)))

    @staticmethod
    def from_dict(data: Any) -> "GraphVertex":
        """Rebuild a vertex from `to_dict`'s output (only classes already imported: a
        configuration never imports code)."""
        cls, kwargs = registered(_VERTICES, data, "vertex", "unknown vertex class")
        return cls._from_fields(kwargs)

    @classmethod
    def _from_fields(cls, kwargs: dict) -> "GraphVertex":
        return cls(**kwargs)

    def clone(self) -> "GraphVertex":
        """A fresh vertex with the same configuration (no run-time state)."""
        vertex = type(self)._from_fields({f: getattr(self, f) for f in self.fields})
        vertex.name = self.name
        vertex.input_types = self.input_types
        vertex.network_input_types = self.network_input_types
        return vertex

    def __eq__(self, other: Any) -> bool:
        return type(other) is type(self) and other.to_dict() == self.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        args = ", ".join(f"{f}={getattr(self, f)!r}" for f in self.fields)
        return f"{type(self).__name__}({args})"

    def output_type(self, input_types: list) -> InputType | None:
        """The type of the output for inputs of `input_types` (each known: the graph passes
        None on without asking); ValueError when the vertex cannot take them. The default:
        the first input's type."""
        return input_types[0]

    # -- parameters (none by default) -----------------------------------------------------------

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Parameter name -> shape, in the order they sit in the flat buffer (none by
        default)."""
        return {}

    def trainable(self, name: str) -> bool:
        return True

    def init_params(self, rng: np.random.Generator) -> None:
        """Fill `self.params` (views the graph set) with initial values."""

    def regularization_score(self) -> float:
        return 0.0

    def memory_use(self, batch: int, training: bool, itemsize: int) -> list | None:
        """The arrays one pass makes, as ``(pass, ArrayType, bytes)`` (see
        `ndws.nn.Layer.memory_use`); None when not declared (a custom vertex, by default)."""
        return None

    # -- forward and backward -------------------------------------------------------------------

    def activate(self, inputs: list, training: bool, mgr: LayerWorkspaceMgr) -> NDArray:
        """The vertex's output for the activations `inputs` (one per input, in the order the
        vertex's inputs were given), made with ``mgr.create(ArrayType.ACTIVATIONS, ...)``;
        keep on `self` what `backprop_gradient` needs."""
        raise NotImplementedError(f"{type(self).__name__}.activate")

    def backprop_gradient(self, epsilon: NDArray, mgr: LayerWorkspaceMgr
                          ) -> tuple[dict, list]:
        """Given dL/d(output), return ``(gradients, epsilons)``: gradients by parameter name
        (``{}`` without parameters) and one dL/d(input) per input, in
        ``ArrayType.ACTIVATION_GRAD``."""
        raise NotImplementedError(f"{type(self).__name__}.backprop_gradient")

    def step_runner(self, batch: int, dtype: Any) -> Any:
        """For `ComputationGraph.rnn_time_step`'s one-step path: a function
        ``run(*rows, out=None) -> rows`` taking each input for one time step as (batch, width)
        rows (a time series of one step and its rows are the same memory) and returning the
        output as rows (into `out` when given, else into a buffer it may reuse at the next
        call, or one of its inputs), computing exactly what `activate` computes on them; None
        when the vertex has no such path (the graph then takes the general one: the
        default)."""
        return None

    def param_order(self, name: str) -> str:
        """How parameter `name`'s elements sit in the flat buffer: "C" (row-major, the
        default) or "F" (column-major), as for a layer."""
        return "C"

    def feed_forward_mask(self, masks: list, batch: int) -> NDArray | None:
        """The mask of the output from the masks of the inputs (None entries: no mask); the
        default passes the first input's on."""
        return masks[0] if masks else None

    def clear(self) -> None:
        """Forget what the last pass kept (the graph calls it after every pass)."""
        for name in self._pass_state:
            self.__dict__.pop(name, None)

    # -- helpers of the built-in vertices -------------------------------------------------------

    def _keep(self, inputs: list, out: NDArray | None = None) -> None:
        self._inputs = list(inputs)
        self._shapes = [tuple(x.shape) for x in inputs]
        self._out = out

    def _network_input(self, name: str) -> Any:
        # the graph's input `name` of the pass in progress (its array, its mask)
        return self._network._pass_input(name, self)


def _identity_step(rows: NDArray, out: NDArray | None = None) -> NDArray:
    # a vertex that is the identity on one step's rows (LastTimeStepVertex,
    # DuplicateToTimeSeriesVertex, a MergeVertex of one input)
    return rows if out is None else out.assign(rows)


def _step_buffer(batch: int, width: int, dtype: Any) -> NDArray:
    # a step runner's own output rows (detached: one step has no workspace to cycle)
    return ndws.empty((batch, width), dtype=dtype, detached=True)


def _or_masks(masks: list) -> Any:
    # DL4J's merge of masks: none when any input has none, else their element-wise OR
    if not masks or any(m is None for m in masks):
        return None
    if len(masks) == 1:
        return masks[0]
    with scope_out_of_workspaces():
        out = ndws.maximum(masks[0], masks[1])
        for m in masks[2:]:
            ndws.maximum(out, m, out=out)
    return out


def _same_kind(types: list, who: str) -> None:
    kinds = {t.kind for t in types}
    if len(kinds) > 1:
        raise ValueError(f"Invalid input: {who} cannot process activations of different types: "
                         f"{', '.join(repr(t) for t in types)}")


def _reduce_to(eps: NDArray, shape: tuple, mgr: LayerWorkspaceMgr) -> NDArray:
    # dL/d(an input broadcast to eps's shape): eps summed over the axes the input was
    # broadcast along, in ACTIVATION_GRAD
    axes = tuple(i for i, (s, e) in enumerate(zip(shape, eps.shape)) if s == 1 and e != 1)
    out = mgr.create_uninitialized(_G, shape, dtype=eps.dtype)
    if not axes:
        return out.assign(eps)
    return ndws.sum(eps, axis=axes, keepdims=True, out=out)


class MergeVertex(GraphVertex):
    """Concatenates its inputs along the feature axis (DL4J's ``MergeVertex``): rows (n, a) and
    (n, b) into (n, a + b), time series along their size, images along their channels (axis 1;
    3 for NHWC, 2 for NWC, from the input types; `merge_axis` sets it). One input passes
    through. The epsilon is split back into pieces; the mask is the OR of the inputs' masks
    (none when one has none)."""

    fields = ("merge_axis",)

    def __init__(self, merge_axis: int | None = None):
        super().__init__()
        self.merge_axis = (None if merge_axis is None
                           else _int_field("MergeVertex", "merge_axis", merge_axis, 1))

    def _axis(self, types=None) -> int:
        if self.merge_axis is not None:
            return self.merge_axis
        types = self.input_types if types is None else types
        t = types[0] if types else None
        if t is not None and t.data_format is CNN2DFormat.NHWC:
            return 3
        if t is not None and t.data_format is RNNFormat.NWC:
            return 2
        return 1

    def output_type(self, input_types):
        if len(input_types) == 1:
            return input_types[0]
        kinds = {t.kind for t in input_types}
        if "CNNFlat" in kinds:
            raise ValueError("Invalid input: MergeVertex cannot currently merge CNN data in "
                             "flattened format. Got: " + ", ".join(map(repr, input_types)))
        _same_kind(input_types, "MergeVertex")
        first = input_types[0]
        # the output's dimensions: each input's, in its array layout, concatenated along the
        # merge axis (DL4J sums the feature sizes whatever `setMergeAxis` says, which builds
        # the next layer with the wrong n_in after a merge along time or space)
        axis = self._axis(input_types)
        rank = {"FF": 2, "RNN": 3}.get(first.kind, 4)
        if axis >= rank:
            raise ValueError(f"MergeVertex: merge_axis {axis} is not an axis of its {rank}-D "
                             f"inputs ({first.kind} activations, shape {first.shape()})")
        if first.kind == "RNN":
            formats = {t.data_format for t in input_types}
            if len(formats) > 1:
                raise ValueError("Invalid input: MergeVertex cannot merge time series of "
                                 "different formats: " + ", ".join(map(repr, input_types)))
        elif first.kind != "FF":
            for t in input_types[1:]:
                if t.data_format is not first.data_format or (
                        axis == (3 if first.data_format is CNN2DFormat.NHWC else 1)
                        and (t.height, t.width) != (first.height, first.width)):
                    raise ValueError(
                        f"Invalid input: MergeVertex cannot merge CNN activations of different "
                        f"width/heights: first [channels,width,height] = [{first.channels},"
                        f"{first.width},{first.height}], next = [{t.channels},{t.width},"
                        f"{t.height}]")
        dims = [list(t.shape(-1)) for t in input_types]    # -1: the batch, a free length
        for d in dims[1:]:
            for k in range(1, rank):
                if k != axis and d[k] != dims[0][k] and -1 not in (d[k], dims[0][k]):
                    raise ValueError(
                        f"MergeVertex: cannot merge along axis {axis} inputs whose other "
                        f"dimensions differ: " + ", ".join(map(repr, input_types)))
        merged = list(dims[0])
        merged[axis] = -1 if any(d[axis] == -1 for d in dims) else sum(d[axis] for d in dims)
        if first.kind == "FF":
            return InputType.feed_forward(merged[1])
        if first.kind == "RNN":
            nwc = first.data_format is RNNFormat.NWC
            size, steps = (merged[2], merged[1]) if nwc else (merged[1], merged[2])
            return InputType.recurrent(size, None if steps == -1 else steps, first.data_format)
        if first.data_format is CNN2DFormat.NHWC:
            return InputType.convolutional(merged[1], merged[2], merged[3], first.data_format)
        return InputType.convolutional(merged[2], merged[3], merged[1], first.data_format)

    def memory_use(self, batch, training, itemsize):
        types = self.input_types
        if not types or any(t is None or -1 in t.shape() for t in types):
            return None
        sizes = [_nbytes(t.shape(batch), itemsize) for t in types]
        use = [("forward", _A, sum(sizes) if len(types) > 1 else 0)]
        if training:
            use += [("backward", _G, s) for s in sizes]
        return use

    def activate(self, inputs, training, mgr):
        if len(inputs) == 1:
            self._keep(inputs)
            return mgr.leverage_to(_A, inputs[0])
        first = inputs[0]
        axis = self._axis()
        for i, x in enumerate(inputs[1:], 1):
            if x.ndim != first.ndim:
                raise ValueError(f"Cannot merge activations with different ranks - first array "
                                 f"has rank {first.ndim}, array {i} has rank {x.ndim} (shapes "
                                 f"{tuple(first.shape)} and {tuple(x.shape)})")
            if x.shape[0] != first.shape[0]:
                raise ValueError(f"Cannot merge activations with different number of examples "
                                 f"- activations[0] shape {tuple(first.shape)}, activations[{i}]"
                                 f".shape {tuple(x.shape)}")
            if any(a != b for d, (a, b) in enumerate(zip(x.shape, first.shape)) if d != axis):
                raise ValueError(f"Cannot merge activations of shapes {tuple(first.shape)} and "
                                 f"{tuple(x.shape)} along axis {axis}: the other dimensions "
                                 f"differ")
        shape = list(first.shape)
        shape[axis] = sum(x.shape[axis] for x in inputs)
        out = mgr.create_uninitialized(_A, tuple(shape), dtype=first.dtype)
        ndws.concatenate(inputs, axis=axis, out=out)
        self._keep(inputs)
        self._index = axis
        return out

    def backprop_gradient(self, epsilon, mgr):
        if len(self._shapes) == 1:
            return {}, [mgr.dup(_G, epsilon)]
        axis, lo, out = self._index, 0, []
        for shape in self._shapes:
            hi = lo + shape[axis]
            piece = mgr.create_uninitialized(_G, shape, dtype=epsilon.dtype)
            piece.assign(epsilon[(slice(None),) * axis + (slice(lo, hi),)])
            out.append(piece)
            lo = hi
        return {}, out

    def step_runner(self, batch, dtype):
        types = self.input_types
        if not types or any(t is None or t.kind not in ("FF", "RNN") for t in types):
            return None
        if len(types) == 1:
            return _identity_step
        # the feature axis of rows (1) and of time series (1 for NCW, 2 for NWC) is the rows'
        # axis 1; a merge along another axis (time) is not rows
        if self._axis() != (2 if types[0].data_format is RNNFormat.NWC else 1):
            return None
        buf = _step_buffer(batch, sum(t.size for t in types), dtype)

        def run(*rows, out=None):
            return ndws.concatenate(list(rows), axis=1, out=buf if out is None else out)
        return run

    def feed_forward_mask(self, masks, batch):
        return _or_masks(masks)


class _Op(enum.Enum):
    ADD = "ADD"
    SUBTRACT = "SUBTRACT"
    PRODUCT = "PRODUCT"
    AVERAGE = "AVERAGE"
    MAX = "MAX"


class ElementWiseVertex(GraphVertex):
    """Combines its inputs element by element (DL4J's ``ElementWiseVertex``): ``op`` one of
    ADD, SUBTRACT (exactly two inputs), PRODUCT, AVERAGE, MAX (any case, or
    ``ElementWiseVertex.Op.ADD`` / ``ElementWiseVertex.ADD``). Inputs of the same rank
    broadcast along dimensions of size 1 (a (n, 1) input against (n, 3)), as in DL4J since
    beta5. MAX routes the epsilon to the input holding the maximum (the first on a tie). The
    mask is the OR of the inputs' masks."""

    Op = _Op
    ADD, SUBTRACT, PRODUCT, AVERAGE, MAX = _Op.ADD, _Op.SUBTRACT, _Op.PRODUCT, _Op.AVERAGE, _Op.MAX
    fields = ("op",)

    def __init__(self, op: Any):
        super().__init__()
        self.op = member(_Op, op, "ElementWiseVertex.op: unknown op",
                         "(any case, or ElementWiseVertex.Op)")

    def output_type(self, input_types):
        _same_kind(input_types, "ElementWise vertex")
        shapes = [t.shape() for t in input_types]
        if any(-1 in s for s in shapes):
            # time series of varying length: the sizes must agree, the lengths come at run time
            if len({s for s in shapes}) > 1 and len({t.size for t in input_types}) > 1:
                raise ValueError(f"Invalid input: ElementWise vertex cannot process activations "
                                 f"of different types: {', '.join(map(repr, input_types))}")
            return input_types[0]
        try:
            shape = tuple(np.broadcast_shapes(*shapes))
        except ValueError:
            shape = None
        for t in input_types:
            if t.shape() == shape:
                return t
        raise ValueError(f"Invalid input: ElementWise vertex cannot process activations of "
                         f"different types: {', '.join(map(repr, input_types))}")

    def memory_use(self, batch, training, itemsize):
        types = self.input_types
        if not types or any(t is None or -1 in t.shape() for t in types):
            return None
        shapes = [t.shape(batch) for t in types]
        out = tuple(np.broadcast_shapes(*shapes))
        size = _nbytes(out, itemsize)
        use = [("forward", _A, size)]
        if training:
            several = len(shapes) > 1
            for s in shapes:
                use.append(("backward", _G, _nbytes(s, itemsize)))
                if several and self.op is not _Op.ADD:
                    use.append(("backward", _BP, size))
            if several and self.op is _Op.MAX:
                use += [("backward", _BP, _nbytes(out, 1))] * 3
        return use

    def activate(self, inputs, training, mgr):
        op = self.op
        if op is _Op.SUBTRACT and len(inputs) != 2:
            raise ValueError(f"ElementWise subtraction only supports 2 inputs, got "
                             f"{len(inputs)}")
        first = inputs[0]
        for i, x in enumerate(inputs[1:], 1):
            if x.ndim != first.ndim:
                raise ValueError(f"ElementWiseVertex ({op.name}): input {i} has rank {x.ndim}, "
                                 f"input 0 rank {first.ndim} (shapes {tuple(first.shape)} and "
                                 f"{tuple(x.shape)})")
        try:
            shape = tuple(np.broadcast_shapes(*[tuple(x.shape) for x in inputs]))
        except ValueError:
            raise ValueError(f"ElementWiseVertex ({op.name}): the shapes "
                             f"{[tuple(x.shape) for x in inputs]} do not broadcast") from None
        out = self._combine(inputs, mgr.create_uninitialized(_A, shape, dtype=first.dtype))
        self._keep(inputs, out)
        return out

    def _combine(self, inputs: list, out: NDArray) -> NDArray:
        # the op over `inputs` into `out` (activate's and the one-step path's)
        op = self.op
        if len(inputs) == 1:
            out.assign(inputs[0])
        elif op is _Op.SUBTRACT:
            ndws.subtract(inputs[0], inputs[1], out=out)
        else:
            fn = {_Op.ADD: ndws.add, _Op.AVERAGE: ndws.add, _Op.PRODUCT: ndws.multiply,
                  _Op.MAX: ndws.maximum}[op]
            fn(inputs[0], inputs[1], out=out)
            for x in inputs[2:]:
                fn(out, x, out=out)
            if op is _Op.AVERAGE:
                ndws.multiply(out, 1.0 / len(inputs), out=out)
        return out

    def step_runner(self, batch, dtype):
        types = self.input_types
        if (not types or any(t is None or t.kind not in ("FF", "RNN") for t in types)
                or (self.op is _Op.SUBTRACT and len(types) != 2)):
            return None                   # (activate's error on the general path)
        buf = _step_buffer(batch, max(t.size for t in types), dtype)

        def run(*rows, out=None):
            return self._combine(rows, buf if out is None else out)
        return run

    def backprop_gradient(self, epsilon, mgr):
        op, inputs, shapes = self.op, self._inputs, self._shapes
        n = len(inputs)
        if n == 1 or op is _Op.ADD:
            return {}, [_reduce_to(epsilon, s, mgr) for s in shapes]
        if op is _Op.AVERAGE or op is _Op.SUBTRACT:
            out = []
            for i, s in enumerate(shapes):
                scaled = mgr.create_uninitialized(_BP, epsilon.shape, dtype=epsilon.dtype)
                factor = 1.0 / n if op is _Op.AVERAGE else (-1.0 if i == 1 else 1.0)
                ndws.multiply(epsilon, factor, out=scaled)
                out.append(_reduce_to(scaled, s, mgr))
            return {}, out
        if op is _Op.PRODUCT:
            out = []
            for i, s in enumerate(shapes):
                prod = mgr.create_uninitialized(_BP, epsilon.shape, dtype=epsilon.dtype)
                prod.assign(epsilon)
                for j, x in enumerate(inputs):
                    if j != i:
                        ndws.multiply(prod, x, out=prod)
                out.append(_reduce_to(prod, s, mgr))
            return {}, out
        # MAX: each element's epsilon goes to the first input that holds the maximum
        y = self._out
        taken = mgr.create(_BP, epsilon.shape, dtype=np.bool_)
        hit = mgr.create_uninitialized(_BP, epsilon.shape, dtype=np.bool_)
        free = mgr.create_uninitialized(_BP, epsilon.shape, dtype=np.bool_)
        out = []
        for x, s in zip(inputs, shapes):
            ndws.equal(x, y, out=hit)
            ndws.logical_not(taken, out=free)
            ndws.logical_and(hit, free, out=hit)
            ndws.logical_or(taken, hit, out=taken)
            routed = mgr.create_uninitialized(_BP, epsilon.shape, dtype=epsilon.dtype)
            ndws.multiply(epsilon, hit, out=routed)
            out.append(_reduce_to(routed, s, mgr))
        return {}, out

    def feed_forward_mask(self, masks, batch):
        return _or_masks(masks)


class SubsetVertex(GraphVertex):
    """The features `from_index` to `to_index` of its input, both **included** (DL4J's
    ``SubsetVertex``: ``SubsetVertex(0, 2)`` keeps three), along axis 1: columns of rows, the
    size of time series (NCW), the channels of images (NCHW). The epsilon is zero outside the
    range; the input's mask passes through."""

    fields = ("from_index", "to_index")
    max_inputs = 1

    def __init__(self, from_index: int, to_index: int):
        super().__init__()
        self.from_index = _int_field("SubsetVertex", "from_index", from_index)
        self.to_index = _int_field("SubsetVertex", "to_index", to_index)
        if self.to_index < self.from_index:
            raise ValueError(f"SubsetVertex: to_index ({self.to_index}) must be >= from_index "
                             f"({self.from_index}); the range is inclusive")

    def _width(self) -> int:
        return self.to_index - self.from_index + 1

    def output_type(self, input_types):
        t = input_types[0]
        n = self._width()
        size = {"FF": t.size, "RNN": t.size, "CNN": t.channels}.get(t.kind)
        if size is None or t.data_format in (CNN2DFormat.NHWC, RNNFormat.NWC):
            raise ValueError(f"SubsetVertex: takes rows, NCW time series or NCHW images, got "
                             f"{t!r}")
        if self.to_index >= size:
            raise ValueError(f"SubsetVertex: range [{self.from_index}, {self.to_index}] "
                             f"(inclusive) is outside the input's {size} features ({t!r})")
        if t.kind == "FF":
            return InputType.feed_forward(n)
        if t.kind == "RNN":
            return InputType.recurrent(n, t.time_series_length)
        return InputType.convolutional(t.height, t.width, n)

    def memory_use(self, batch, training, itemsize):
        t = self.input_types[0] if self.input_types else None
        if t is None or -1 in t.shape():
            return None
        size = _nbytes(t.shape(batch), itemsize)
        use = [("forward", _A, size // t.shape()[0] * self._width())]
        if training:
            use.append(("backward", _G, size))
        return use

    def activate(self, inputs, training, mgr):
        x = inputs[0]
        if x.ndim < 2 or x.ndim > 4 or self.to_index >= x.shape[1]:
            raise ValueError(f"SubsetVertex: range [{self.from_index}, {self.to_index}] "
                             f"(inclusive) does not fit an input of shape {tuple(x.shape)} "
                             f"(axis 1)")
        self._keep(inputs)
        return mgr.dup(_A, x[:, self.from_index:self.to_index + 1])

    def step_runner(self, batch, dtype):
        t = self.input_types[0] if self.input_types else None
        if t is None or t.kind not in ("FF", "RNN"):
            return None
        lo, hi = self.from_index, self.to_index + 1
        buf = _step_buffer(batch, hi - lo, dtype)

        def run(rows, out=None):
            return (buf if out is None else out).assign(rows[:, lo:hi])
        return run

    def backprop_gradient(self, epsilon, mgr):
        eps = mgr.create(_G, self._shapes[0], dtype=epsilon.dtype)
        eps[:, self.from_index:self.to_index + 1] = epsilon
        return {}, [eps]


def _time_masks(masks: list, shapes: list, total_t: int, dtype: Any) -> NDArray:
    # the masks of stacked time series, each example's steps beyond its own length 0, a
    # missing mask all ones over its length
    out = np.zeros((sum(s[0] for s in shapes), total_t), dtype=dtype)
    row = 0
    for m, s in zip(masks, shapes):
        n, t = s[0], s[2]
        out[row:row + n, :t] = 1.0 if m is None else np.asarray(m).reshape(n, t)
        row += n
    return ndws.asarray(out)


class StackVertex(GraphVertex):
    """Stacks its inputs along the examples (DL4J's ``StackVertex``): n inputs of (b, ...)
    make (n*b, ...), e.g. to run one layer over several inputs with shared weights. Time series
    of different lengths are padded with zeros at the end (and masked). The epsilon is cut
    back into the inputs' rows; the masks are stacked."""

    def output_type(self, input_types):
        first = input_types[0]
        for t in input_types[1:]:
            same = (t == first if t.kind != "RNN" else
                    (t.size, t.data_format) == (first.size, first.data_format))
            if not same:
                raise ValueError(f"Invalid input: StackVertex cannot stack activations of "
                                 f"different types: {', '.join(map(repr, input_types))}")
        if first.kind == "RNN" and len({t.time_series_length for t in input_types}) > 1:
            return InputType.recurrent(first.size, None, first.data_format)
        return first

    def memory_use(self, batch, training, itemsize):
        types = self.input_types
        if not types or any(t is None or -1 in t.shape() for t in types):
            return None
        sizes = [_nbytes(t.shape(batch), itemsize) for t in types]
        use = [("forward", _A, sum(sizes))]
        if training:
            use += [("backward", _G, s) for s in sizes]
        return use

    def activate(self, inputs, training, mgr):
        first = inputs[0]
        for i, x in enumerate(inputs[1:], 1):
            if x.ndim != first.ndim or (x.ndim != 3 and x.shape[1:] != first.shape[1:]) or (
                    x.ndim == 3 and x.shape[1] != first.shape[1]):
                raise ValueError(f"StackVertex: input {i} of shape {tuple(x.shape)} does not "
                                 f"stack with input 0 of shape {tuple(first.shape)}")
        self._keep(inputs)
        if first.ndim == 3 and len({x.shape[2] for x in inputs}) > 1:
            # variable-length time series: zero-padded to the longest (DL4J's)
            t = max(x.shape[2] for x in inputs)
            out = mgr.create(_A, (sum(x.shape[0] for x in inputs), first.shape[1], t),
                             dtype=first.dtype)
            row = 0
            for x in inputs:
                out[row:row + x.shape[0], :, :x.shape[2]] = x
                row += x.shape[0]
            return out
        shape = (sum(x.shape[0] for x in inputs),) + tuple(first.shape[1:])
        out = mgr.create_uninitialized(_A, shape, dtype=first.dtype)
        return ndws.concatenate(inputs, axis=0, out=out)

    def backprop_gradient(self, epsilon, mgr):
        row, out = 0, []
        for shape in self._shapes:
            piece = epsilon[row:row + shape[0]]
            if len(shape) == 3:
                piece = piece[:, :, :shape[2]]
            out.append(mgr.dup(_G, piece))
            row += shape[0]
        return {}, out

    def feed_forward_mask(self, masks, batch):
        shapes = getattr(self, "_shapes", None)
        if all(m is None for m in masks) and (shapes is None or len(shapes[0]) != 3 or len(
                {s[2] for s in shapes}) == 1):
            return None
        if shapes is not None and len(shapes[0]) == 3:
            dtype = next((m.dtype for m in masks if m is not None), np.float32)
            return _time_masks(masks, shapes, max(s[2] for s in shapes), dtype)
        like = next(m for m in masks if m is not None)
        with scope_out_of_workspaces():
            parts = [m if m is not None else ndws.ones((batch,) + tuple(like.shape[1:]),
                                                       dtype=like.dtype) for m in masks]
            return ndws.concatenate(parts, axis=0)


class UnstackVertex(GraphVertex):
    """The `from_index`-th of `stack_size` equal blocks of its input's examples (DL4J's
    ``UnstackVertex``), the inverse of `StackVertex`: rows ``[from*step, (from+1)*step)`` with
    ``step = n / stack_size``. The epsilon is zero outside those rows; the mask is cut the
    same way."""

    fields = ("from_index", "stack_size")
    max_inputs = 1

    def __init__(self, from_index: int, stack_size: int):
        super().__init__()
        self.from_index = _int_field("UnstackVertex", "from_index", from_index)
        self.stack_size = _int_field("UnstackVertex", "stack_size", stack_size, 1)
        if self.from_index >= self.stack_size:
            raise ValueError(f"UnstackVertex: from_index ({self.from_index}) must be below "
                             f"stack_size ({self.stack_size})")

    def memory_use(self, batch, training, itemsize):
        t = self.input_types[0] if self.input_types else None
        if t is None or -1 in t.shape():
            return None
        size = _nbytes(t.shape(batch), itemsize)
        use = [("forward", _A, size // self.stack_size)]
        if training:
            use.append(("backward", _G, size))
        return use

    def _rows(self, n: int) -> slice:
        if n % self.stack_size:
            raise ValueError(f"UnstackVertex: {n} examples do not split into stack_size "
                             f"{self.stack_size} equal blocks")
        step = n // self.stack_size
        return slice(self.from_index * step, (self.from_index + 1) * step)

    def activate(self, inputs, training, mgr):
        x = inputs[0]
        rows = self._rows(x.shape[0])
        self._keep(inputs)
        return mgr.dup(_A, x[rows])

    def backprop_gradient(self, epsilon, mgr):
        shape = self._shapes[0]
        eps = mgr.create(_G, shape, dtype=epsilon.dtype)
        eps[self._rows(shape[0])] = epsilon
        return {}, [eps]

    def feed_forward_mask(self, masks, batch):
        m = masks[0] if masks else None
        if m is None:
            return None
        return m[self._rows(m.shape[0])]


class _Constant(GraphVertex):
    # its input and one constant (the vertex's one field), element by element
    max_inputs = 1
    _op: Any = None

    def __init__(self, value: float):
        super().__init__()
        setattr(self, self.fields[0], _real_field(type(self).__name__, self.fields[0], value))

    def memory_use(self, batch, training, itemsize):
        return _same_size_use(self, batch, training, itemsize)

    def activate(self, inputs, training, mgr):
        x = inputs[0]
        out = mgr.create_uninitialized(_A, x.shape, dtype=x.dtype)
        return type(self)._op(x, getattr(self, self.fields[0]), out=out)

    def step_runner(self, batch, dtype):
        t = self.input_types[0] if self.input_types else None
        if t is None or t.kind not in ("FF", "RNN"):
            return None
        op, value = type(self)._op, getattr(self, self.fields[0])
        buf = _step_buffer(batch, t.size, dtype)

        def run(rows, out=None):
            return op(rows, value, out=buf if out is None else out)
        return run


class ScaleVertex(_Constant):
    """Its input times `scale_factor` (DL4J's ``ScaleVertex``); the mask passes through."""

    fields = ("scale_factor",)
    _op = ndws.multiply

    def __init__(self, scale_factor: float):
        super().__init__(scale_factor)

    def backprop_gradient(self, epsilon, mgr):
        eps = mgr.create_uninitialized(_G, epsilon.shape, dtype=epsilon.dtype)
        return {}, [ndws.multiply(epsilon, self.scale_factor, out=eps)]


class ShiftVertex(_Constant):
    """Its input plus `shift_factor` (DL4J's ``ShiftVertex``); the mask passes through."""

    fields = ("shift_factor",)
    _op = ndws.add

    def __init__(self, shift_factor: float):
        super().__init__(shift_factor)

    def backprop_gradient(self, epsilon, mgr):
        return {}, [mgr.dup(_G, epsilon)]


def _same_size_use(vertex: GraphVertex, batch: int, training: bool, itemsize: int,
                   backward_work: int = 0) -> list | None:
    # an output and an epsilon as large as the input (and `backward_work` more of that size
    # in the backward pass's working memory)
    t = vertex.input_types[0] if vertex.input_types else None
    if t is None or -1 in t.shape():
        return None
    size = _nbytes(t.shape(batch), itemsize)
    use = [("forward", _A, size)]
    if training:
        use += [("backward", _G, size)] + [("backward", _BP, size)] * backward_work
    return use


class L2NormalizeVertex(GraphVertex):
    """Each example divided by its L2 norm over `dims` (default: every dimension but the
    first), ``x / max(||x||, eps)`` (DL4J's ``L2NormalizeVertex``); the mask passes through."""

    fields = ("dims", "eps")
    max_inputs = 1

    def __init__(self, dims: Any = None, eps: float = 1e-8):
        super().__init__()
        if dims is not None:
            if isinstance(dims, (int, np.integer)) and not isinstance(dims, bool):
                dims = (dims,)
            if not isinstance(dims, (tuple, list)) or not dims:
                raise FieldTypeError(f"L2NormalizeVertex.dims: expected a tuple of axes >= 1, "
                                     f"got {dims!r:.40}")
            dims = tuple(_int_field("L2NormalizeVertex", "dims", d, 1) for d in dims)
        self.dims = dims
        self.eps = _real_field("L2NormalizeVertex", "eps", eps, positive=True)

    @classmethod
    def _from_fields(cls, kwargs):
        dims = kwargs.get("dims")
        return cls(tuple(dims) if isinstance(dims, list) else dims, kwargs.get("eps", 1e-8))

    def _axes(self, ndim: int) -> tuple:
        axes = self.dims if self.dims is not None else tuple(range(1, ndim))
        if any(a >= ndim for a in axes):
            raise ValueError(f"L2NormalizeVertex: dims {axes} do not fit an input of rank "
                             f"{ndim}")
        return axes

    def memory_use(self, batch, training, itemsize):
        use = _same_size_use(self, batch, training, itemsize)
        if use is None:
            return None
        size, norms = use[0][2], batch * itemsize * _norms(self)
        use += [("forward", ArrayType.FF_WORKING_MEM, size),
                ("forward", ArrayType.FF_WORKING_MEM, norms),
                ("forward", ArrayType.FF_WORKING_MEM, norms)]
        if training:
            use += [("backward", _BP, size)] * 3 + [("backward", _BP, norms)] * 4 + [
                ("backward", _BP, norms // itemsize)]
        return use

    def activate(self, inputs, training, mgr):
        x = inputs[0]
        axes = self._axes(x.ndim)
        out = mgr.create_uninitialized(_A, x.shape, dtype=x.dtype)
        with mgr.notify_scope_borrowed(ArrayType.FF_WORKING_MEM):
            norm = ndws.sqrt(ndws.sum(ndws.multiply(x, x), axis=axes, keepdims=True))
            ndws.maximum(norm, self.eps, out=norm)
            ndws.divide(x, norm, out=out)
        self._keep(inputs, out)
        return out

    def backprop_gradient(self, epsilon, mgr):
        # y = x / n with n = max(||x||, eps): dx = (eps - y * sum(eps * y)) / n where the
        # norm is above eps, eps / n where it is clipped (n constant there)
        x, y = self._inputs[0], self._out
        axes = self._axes(x.ndim)
        eps = mgr.create_uninitialized(_G, x.shape, dtype=x.dtype)
        with mgr.notify_scope_borrowed(_BP):
            raw = ndws.sqrt(ndws.sum(ndws.multiply(x, x), axis=axes, keepdims=True))
            norm = ndws.maximum(raw, self.eps)
            dot = ndws.sum(ndws.multiply(epsilon, y), axis=axes, keepdims=True)
            ndws.multiply(dot, ndws.greater(raw, self.eps), out=dot)
            tmp = ndws.multiply(y, dot)
            ndws.subtract(epsilon, tmp, out=tmp)
            ndws.divide(tmp, norm, out=eps)
        return {}, [eps]


def _norms(vertex: L2NormalizeVertex) -> int:
    # the norms per example of an L2NormalizeVertex (1 over every dimension but the first)
    t = vertex.input_types[0]
    if vertex.dims is None:
        return 1
    shape = (1,) + t.shape()
    return math.prod(d for i, d in enumerate(shape) if i and i not in vertex.dims)


class L2Vertex(GraphVertex):
    """The Euclidean distance between its two inputs per example, (n, 1) (DL4J's
    ``L2Vertex``, for siamese and triplet networks); `eps` guards the gradient at distance 0.
    The first input's mask passes through."""

    fields = ("eps",)
    min_inputs = max_inputs = 2

    def __init__(self, eps: float = 1e-8):
        super().__init__()
        self.eps = _real_field("L2Vertex", "eps", eps, positive=True)

    def output_type(self, input_types):
        a, b = input_types
        if a.shape() != b.shape():
            raise ValueError(f"Invalid input: L2Vertex needs two inputs of the same type, got "
                             f"{a!r} and {b!r}")
        return InputType.feed_forward(1)

    def memory_use(self, batch, training, itemsize):
        types = self.input_types
        if not types or any(t is None or -1 in t.shape() for t in types):
            return None
        size = _nbytes(types[0].shape(batch), itemsize)
        use = [("forward", _A, batch * itemsize), ("forward", ArrayType.FF_WORKING_MEM, size),
               ("forward", ArrayType.FF_WORKING_MEM, size),
               ("forward", ArrayType.FF_WORKING_MEM, batch * itemsize)]
        if training:
            use += [("backward", _G, size)] * 2 + [("backward", _BP, batch * itemsize)] * 2
        return use

    def activate(self, inputs, training, mgr):
        a, b = inputs
        if a.shape != b.shape:
            raise ValueError(f"L2Vertex: the inputs' shapes differ: {tuple(a.shape)} and "
                             f"{tuple(b.shape)}")
        axes = tuple(range(1, a.ndim))
        out = mgr.create_uninitialized(_A, (a.shape[0], 1), dtype=a.dtype)
        with mgr.notify_scope_borrowed(ArrayType.FF_WORKING_MEM):
            diff = ndws.subtract(a, b)
            ndws.sqrt(ndws.sum(ndws.multiply(diff, diff), axis=axes).reshape(a.shape[0], 1),
                      out=out)
        self._keep(inputs, out)
        return out

    def backprop_gradient(self, epsilon, mgr):
        a, b = self._inputs
        d = self._out
        shape = (a.shape[0],) + (1,) * (a.ndim - 1)
        da = mgr.create_uninitialized(_G, a.shape, dtype=a.dtype)
        db = mgr.create_uninitialized(_G, a.shape, dtype=a.dtype)
        with mgr.notify_scope_borrowed(_BP):
            scale = ndws.divide(epsilon.reshape(shape), ndws.maximum(d, self.eps).reshape(shape))
            ndws.subtract(a, b, out=da)
            ndws.multiply(da, scale, out=da)
            ndws.negative(da, out=db)
        return {}, [da, db]


class PreprocessorVertex(GraphVertex):
    """An `ndws.nn.InputPreProcessor` as a vertex of its own (DL4J's ``PreprocessorVertex``):
    its forward and backward are the preprocessor's; what a preprocessor returns as a view of
    its argument is copied into ACTIVATIONS (ACTIVATION_GRAD), where a vertex's output lives."""

    fields = ("preprocessor",)
    max_inputs = 1

    def __init__(self, preprocessor: InputPreProcessor):
        super().__init__()
        if isinstance(preprocessor, dict):
            preprocessor = InputPreProcessor.from_dict(preprocessor)
        if not isinstance(preprocessor, InputPreProcessor):
            raise FieldTypeError(f"PreprocessorVertex.preprocessor: expected an "
                                 f"ndws.nn.InputPreProcessor, got {type(preprocessor).__name__}")
        self.preprocessor = preprocessor.clone()

    def output_type(self, input_types):
        return self.preprocessor.output_type(input_types[0])

    def memory_use(self, batch, training, itemsize):
        return _same_size_use(self, batch, training, itemsize)

    def activate(self, inputs, training, mgr):
        self._keep(inputs)
        return mgr.leverage_to(_A, self.preprocessor.pre_process(inputs[0], mgr))

    def backprop_gradient(self, epsilon, mgr):
        return {}, [mgr.leverage_to(_G, self.preprocessor.backprop(epsilon, mgr))]

    def clear(self):
        super().clear()
        self.preprocessor.clear()


class ReshapeVertex(GraphVertex):
    """Its input reshaped to `new_shape` (the batch dimension included, -1 allowed once;
    DL4J's ``ReshapeVertex``), in `order` ('c' or 'f'); the epsilon goes back to the input's
    shape. With `mask_shape` the mask is reshaped to it, else it passes through."""

    fields = ("new_shape", "order", "mask_shape")
    max_inputs = 1

    def __init__(self, new_shape: Any, order: str = "c", mask_shape: Any = None):
        super().__init__()
        self.new_shape = _shape_field("new_shape", new_shape)
        if sum(1 for d in self.new_shape if d == -1) > 1:
            raise ValueError(f"ReshapeVertex.new_shape: at most one -1, got {self.new_shape}")
        if not isinstance(order, str) or order.lower() not in ("c", "f"):
            raise ValueError(f"ReshapeVertex.order: expected 'c' or 'f', got {order!r:.20}")
        self.order = order.lower()
        self.mask_shape = None if mask_shape is None else _shape_field("mask_shape",
                                                                        mask_shape)

    @classmethod
    def _from_fields(cls, kwargs):
        return cls(kwargs.get("new_shape"), kwargs.get("order", "c"), kwargs.get("mask_shape"))

    def output_type(self, input_types):
        per = self.new_shape[1:]
        if -1 in per:
            elements = input_types[0].elements_per_example()
            known = math.prod(d for d in per if d != -1)
            if elements % known:
                raise ValueError(f"ReshapeVertex: {input_types[0]!r} does not reshape to "
                                 f"{self.new_shape}")
            per = tuple(elements // known if d == -1 else d for d in per)
        elif math.prod(per) != input_types[0].elements_per_example() \
                and -1 not in input_types[0].shape():
            raise ValueError(f"ReshapeVertex: {input_types[0]!r} "
                             f"({input_types[0].elements_per_example()} values per example) "
                             f"does not reshape to {self.new_shape}")
        if len(per) == 1:
            return InputType.feed_forward(per[0])
        if len(per) == 2:
            return InputType.recurrent(per[0], per[1])
        if len(per) == 3:
            return InputType.convolutional(per[1], per[2], per[0])
        raise ValueError(f"ReshapeVertex: a shape of rank {len(self.new_shape)} has no "
                         f"InputType (2 to 4)")

    def memory_use(self, batch, training, itemsize):
        return _same_size_use(self, batch, training, itemsize)

    def activate(self, inputs, training, mgr):
        x = inputs[0]
        self._keep(inputs)
        try:
            view = np.reshape(_np_view(x), self.new_shape, order=self.order.upper())
        except ValueError:
            raise ValueError(f"ReshapeVertex: an input of shape {tuple(x.shape)} does not "
                             f"reshape to {self.new_shape}") from None
        out = mgr.create_uninitialized(_A, view.shape, dtype=x.dtype)
        np.copyto(_np_view(out), view)
        return out

    def backprop_gradient(self, epsilon, mgr):
        eps = mgr.create_uninitialized(_G, self._shapes[0], dtype=epsilon.dtype)
        np.copyto(_np_view(eps), np.reshape(_np_view(epsilon), self._shapes[0],
                                            order=self.order.upper()))
        return {}, [eps]

    def feed_forward_mask(self, masks, batch):
        m = masks[0] if masks else None
        if m is None or self.mask_shape is None:
            return m
        with scope_out_of_workspaces():
            return ndws.asarray(np.reshape(np.asarray(m), self.mask_shape,
                                           order=self.order.upper()))


def _shape_field(name: str, value: Any) -> tuple:
    if isinstance(value, (int, np.integer)) or not isinstance(value, (tuple, list)) or not value:
        raise FieldTypeError(f"ReshapeVertex.{name}: expected a tuple of sizes (the batch "
                             f"first), got {value!r:.40}")
    out = []
    for d in value:
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or not (
                d == -1 or 1 <= d <= 1 << 31):
            raise ValueError(f"ReshapeVertex.{name}: sizes must be ints in [1, 2**31] or -1, "
                             f"got {value!r:.60}")
        out.append(int(d))
    return tuple(out)


def _time_steps(who: str, t: InputType) -> None:
    if t.kind != "RNN" or t.data_format is not RNNFormat.NCW:
        raise ValueError(f"Invalid input: {who} takes NCW time series "
                         f"(InputType.recurrent(size)), got {t!r}")


class LastTimeStepVertex(GraphVertex):
    """The last step of a time series (n, size, T) as rows (n, size) (DL4J's
    ``LastTimeStepVertex``): the last step each example's mask keeps, the mask being the
    feature mask of the network input `mask_input_name` (without one, step T - 1). The
    epsilon is zero at every other step; no mask goes on (it is consumed)."""

    fields = ("mask_input_name",)
    input_name_fields = ("mask_input_name",)
    max_inputs = 1

    def __init__(self, mask_input_name: str):
        super().__init__()
        self.mask_input_name = _name_field("LastTimeStepVertex", "mask_input_name",
                                           mask_input_name)

    def output_type(self, input_types):
        t = input_types[0]
        _time_steps("LastTimeStepVertex", t)
        return InputType.feed_forward(t.size)

    def memory_use(self, batch, training, itemsize):
        t = self.input_types[0] if self.input_types else None
        if t is None or t.time_series_length is None:
            return None
        use = [("forward", _A, batch * t.size * itemsize)]
        if training:
            use.append(("backward", _G, _nbytes(t.shape(batch), itemsize)))
        return use

    def activate(self, inputs, training, mgr):
        x = inputs[0]
        if x.ndim != 3:
            raise ValueError(f"LastTimeStepVertex: expected a time series (n, size, T), got "
                             f"shape {tuple(x.shape)}")
        _, mask = self._network_input(self.mask_input_name)
        n, t = x.shape[0], x.shape[2]
        if mask is None:
            index = np.full(n, t - 1, dtype=np.intp)
        else:
            m = np.asarray(mask).reshape(n, -1) if mask.shape[0] == n else None
            if m is None or m.shape[1] != t:
                raise ValueError(f"LastTimeStepVertex: the mask of input "
                                 f"{self.mask_input_name!r} has shape {tuple(mask.shape)}, the "
                                 f"time series {tuple(x.shape)}")
            # the last kept step: argmax of mask * [0..T-1] (0 for an all-masked row, DL4J's)
            index = np.argmax(m * np.arange(t), axis=1)
        out = mgr.create_uninitialized(_A, (n, x.shape[1]), dtype=x.dtype)
        np.copyto(_np_view(out), _np_view(x)[np.arange(n), :, index])
        self._keep(inputs)
        self._index = index
        return out

    def backprop_gradient(self, epsilon, mgr):
        shape = self._shapes[0]
        eps = mgr.create(_G, shape, dtype=epsilon.dtype)
        _np_view(eps)[np.arange(shape[0]), :, self._index] = _np_view(epsilon)
        return {}, [eps]

    def step_runner(self, batch, dtype):
        # the last step of a series of one step (rnn_time_step passes no mask) is its rows
        return _identity_step

    def feed_forward_mask(self, masks, batch):
        return None


class DuplicateToTimeSeriesVertex(GraphVertex):
    """Rows (n, size) repeated over the time steps of the network input `input_name`, making
    (n, size, T) (DL4J's ``DuplicateToTimeSeriesVertex``); the epsilon is summed over time.
    The output carries that input's feature mask."""

    fields = ("input_name",)
    input_name_fields = ("input_name",)
    max_inputs = 1

    def __init__(self, input_name: str):
        super().__init__()
        self.input_name = _name_field("DuplicateToTimeSeriesVertex", "input_name", input_name)

    def output_type(self, input_types):
        t = input_types[0]
        if t.kind != "FF":
            raise ValueError(f"Invalid input: DuplicateToTimeSeriesVertex takes rows, got "
                             f"{t!r}")
        series = self.network_input_types.get(self.input_name)
        return InputType.recurrent(t.size, None if series is None else series.time_series_length)

    def memory_use(self, batch, training, itemsize):
        t = self.input_types[0] if self.input_types else None
        series = self.network_input_types.get(self.input_name)
        length = None if series is None else series.time_series_length
        if t is None or length is None:
            return None
        use = [("forward", _A, batch * t.size * length * itemsize)]
        if training:
            use.append(("backward", _G, batch * t.size * itemsize))
        return use

    def activate(self, inputs, training, mgr):
        x = inputs[0]
        series, _ = self._network_input(self.input_name)
        if x.ndim != 2 or series.ndim != 3 or series.shape[0] != x.shape[0]:
            raise ValueError(f"DuplicateToTimeSeriesVertex: expected rows (n, size) and a time "
                             f"series input {self.input_name!r} of n examples, got "
                             f"{tuple(x.shape)} and {tuple(series.shape)}")
        t = series.shape[2]
        out = mgr.create_uninitialized(_A, (x.shape[0], x.shape[1], t), dtype=x.dtype)
        out.assign(x.reshape(x.shape[0], x.shape[1], 1))
        self._keep(inputs)
        return out

    def backprop_gradient(self, epsilon, mgr):
        eps = mgr.create_uninitialized(_G, self._shapes[0], dtype=epsilon.dtype)
        return {}, [ndws.sum(epsilon, axis=2, out=eps)]

    def step_runner(self, batch, dtype):
        # rows repeated over the one step of the one-step path: the rows themselves
        return _identity_step

    def feed_forward_mask(self, masks, batch):
        return self._network_input(self.input_name)[1]


class ReverseTimeSeriesVertex(GraphVertex):
    """A time series (n, size, T) with its steps in reverse order (DL4J's
    ``ReverseTimeSeriesVertex``). With `input_name`, the feature mask of that network input
    says which steps each example has: those are reversed among themselves and the masked
    steps stay where they are, as zeros. The epsilon is reversed the same way; the mask
    passes through."""

    fields = ("input_name",)
    input_name_fields = ("input_name",)
    max_inputs = 1

    def __init__(self, input_name: str | None = None):
        super().__init__()
        self.input_name = (None if input_name is None else
                           _name_field("ReverseTimeSeriesVertex", "input_name", input_name))

    def output_type(self, input_types):
        _time_steps("ReverseTimeSeriesVertex", input_types[0])
        return input_types[0]

    def memory_use(self, batch, training, itemsize):
        return _same_size_use(self, batch, training, itemsize)

    def _order(self, x: NDArray) -> np.ndarray | None:
        # each example's source step per step (-1: a masked step, left zero), or None for a
        # plain reversal
        if self.input_name is None:
            return None
        _, mask = self._network_input(self.input_name)
        if mask is None:
            return None
        n, t = x.shape[0], x.shape[2]
        if mask.shape[0] != n or mask.size != n * t:
            raise ValueError(f"ReverseTimeSeriesVertex: the mask of input {self.input_name!r} "
                             f"has shape {tuple(mask.shape)}, the time series {tuple(x.shape)}")
        m = np.asarray(mask).reshape(n, t) != 0
        order = np.full((n, t), -1, dtype=np.intp)
        for row in range(n):
            kept = np.flatnonzero(m[row])
            order[row, kept] = kept[::-1]
        return order

    def _reverse(self, x: NDArray, t: ArrayType, mgr: LayerWorkspaceMgr) -> NDArray:
        if x.ndim != 3:
            raise ValueError(f"ReverseTimeSeriesVertex: expected a time series (n, size, T), "
                             f"got shape {tuple(x.shape)}")
        order = self._index if t is _G else self._order(x)
        if t is _A:
            self._index = order
        if order is None:
            out = mgr.create_uninitialized(t, x.shape, dtype=x.dtype)
            return out.assign(x[:, :, ::-1])
        out = mgr.create(t, x.shape, dtype=x.dtype)
        src, dst = _np_view(x), _np_view(out)
        for row in range(x.shape[0]):
            steps = np.flatnonzero(order[row] >= 0)
            dst[row][:, steps] = src[row][:, order[row, steps]]
        return out

    def activate(self, inputs, training, mgr):
        self._keep(inputs)
        return self._reverse(inputs[0], _A, mgr)

    def backprop_gradient(self, epsilon, mgr):
        return {}, [self._reverse(epsilon, _G, mgr)]
