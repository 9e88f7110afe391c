"""ndws.nn.graph.vertices: each vertex's forward against NumPy, its backward against central
differences in float64, its mask rule, where it puts its arrays (ACTIVATIONS, ACTIVATION_GRAD),
its configuration's checks and JSON round trip."""
import numpy as np
import pytest

import ndws
from ndws.nn import ArrayType, CnnToFeedForwardPreProcessor, LayerWorkspaceMgr
from ndws.nn.graph import (DuplicateToTimeSeriesVertex, ElementWiseVertex, GraphVertex,
                           L2NormalizeVertex, L2Vertex, LastTimeStepVertex, MergeVertex,
                           PreprocessorVertex, ReshapeVertex, ReverseTimeSeriesVertex,
                           ScaleVertex, ShiftVertex, StackVertex, SubsetVertex, UnstackVertex)

MGR = LayerWorkspaceMgr.no_workspaces()


class Inputs:
    """Stands for the graph during a pass: the network inputs a vertex reads by name."""

    def __init__(self, **inputs):
        self.inputs = inputs

    def _pass_input(self, name, vertex):
        return self.inputs[name]


def run(vertex, xs, training=True):
    return vertex.activate([ndws.asarray(x) for x in xs], training, MGR).numpy()


def check_gradient(vertex, xs, rng, h=1e-6):
    """dL/d(inputs) of L = sum(out * eps) from backprop_gradient against central differences."""
    out = run(vertex, xs)
    eps = rng.standard_normal(out.shape)
    grads, es = vertex.backprop_gradient(ndws.asarray(eps), MGR)
    assert grads == {} and len(es) == len(xs)
    for j, x in enumerate(xs):
        num = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            for sign in (1, -1):
                moved = [a.copy() for a in xs]
                moved[j][idx] += sign * h
                num[idx] += sign * float((run(vertex, moved) * eps).sum()) / (2 * h)
        np.testing.assert_allclose(es[j].numpy(), num, rtol=1e-6, atol=1e-8)
        assert es[j].shape == x.shape and es[j].dtype == np.float64


# -- forward against NumPy, backward against central differences --------------------------------

def test_merge(rng):
    a, b = rng.standard_normal((3, 2)), rng.standard_normal((3, 4))
    np.testing.assert_array_equal(run(MergeVertex(), [a, b]), np.concatenate([a, b], 1))
    check_gradient(MergeVertex(), [a, b], rng)
    c, d = rng.standard_normal((2, 1, 3, 3)), rng.standard_normal((2, 2, 3, 3))
    np.testing.assert_array_equal(run(MergeVertex(), [c, d]), np.concatenate([c, d], 1))
    check_gradient(MergeVertex(), [c, d], rng)
    t = rng.standard_normal((2, 3, 4))
    np.testing.assert_array_equal(run(MergeVertex(merge_axis=2), [t, t]),
                                  np.concatenate([t, t], 2))
    with pytest.raises(ValueError, match=r"Cannot merge activations with different ranks - "
                                         r"first array has rank 2, array 1 has rank 4"):
        run(MergeVertex(), [a, c])
    with pytest.raises(ValueError, match="Cannot merge activations with different number of "
                                         "examples"):
        run(MergeVertex(), [a, rng.standard_normal((4, 2))])


@pytest.mark.parametrize("op, fn", [
    ("ADD", lambda xs: sum(xs)), ("PRODUCT", lambda xs: np.prod(xs, axis=0)),
    ("AVERAGE", lambda xs: sum(xs) / len(xs)), ("MAX", lambda xs: np.max(xs, axis=0)),
])
def test_elementwise_of_three(op, fn, rng):
    xs = [rng.standard_normal((4, 3)) for _ in range(3)]
    np.testing.assert_allclose(run(ElementWiseVertex(op), xs), fn(np.array(xs)), rtol=1e-14)
    check_gradient(ElementWiseVertex(op), xs, rng)


def test_elementwise_subtract_needs_two(rng):
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    np.testing.assert_array_equal(run(ElementWiseVertex("subtract"), [a, b]), a - b)
    check_gradient(ElementWiseVertex(ElementWiseVertex.SUBTRACT), [a, b], rng)
    with pytest.raises(ValueError, match="^ElementWise subtraction only supports 2 inputs, "
                                         "got 3$"):
        run(ElementWiseVertex("subtract"), [a, b, a])


@pytest.mark.parametrize("op", list(ElementWiseVertex.Op))
def test_elementwise_broadcasts_a_column(op, rng):
    # DL4J's testElementWiseVertexBroadcast: (n, 1) against (n, 3), either order
    a, b = rng.standard_normal((5, 1)), rng.standard_normal((5, 3))
    for xs in ([a, b], [b, a]):
        out = run(ElementWiseVertex(op), xs)
        assert out.shape == (5, 3)
        check_gradient(ElementWiseVertex(op), xs, rng)


def test_elementwise_max_routes_a_tie_to_the_first(rng):
    a = np.array([[1.0, 2.0]])
    v = ElementWiseVertex("max")
    v.activate([ndws.asarray(a), ndws.asarray(a.copy())], True, MGR)
    _, (e0, e1) = v.backprop_gradient(ndws.asarray(np.array([[3.0, 4.0]])), MGR)
    assert e0.tolist() == [[3.0, 4.0]] and e1.tolist() == [[0.0, 0.0]]


def test_elementwise_single_input_is_a_copy(rng):
    a = rng.standard_normal((2, 2))
    v = ElementWiseVertex("product")
    out = v.activate([ndws.asarray(a)], False, MGR)
    np.testing.assert_array_equal(out.numpy(), a)


def test_subset_is_inclusive(rng):
    x = rng.standard_normal((3, 6))
    np.testing.assert_array_equal(run(SubsetVertex(1, 3), [x]), x[:, 1:4])
    check_gradient(SubsetVertex(1, 3), [x], rng)
    t = rng.standard_normal((2, 5, 4))
    np.testing.assert_array_equal(run(SubsetVertex(0, 2), [t]), t[:, 0:3])
    check_gradient(SubsetVertex(0, 2), [t], rng)
    with pytest.raises(ValueError, match=r"SubsetVertex: range \[4, 6\] \(inclusive\) does not "
                                         r"fit an input of shape \(3, 6\)"):
        run(SubsetVertex(4, 6), [x])


def test_stack_and_unstack(rng):
    a, b, c = (rng.standard_normal((2, 3)) for _ in range(3))
    np.testing.assert_array_equal(run(StackVertex(), [a, b, c]), np.concatenate([a, b, c]))
    check_gradient(StackVertex(), [a, b, c], rng)
    x = rng.standard_normal((6, 3))
    np.testing.assert_array_equal(run(UnstackVertex(1, 3), [x]), x[2:4])
    check_gradient(UnstackVertex(1, 3), [x], rng)
    with pytest.raises(ValueError, match="UnstackVertex: 5 examples do not split into "
                                         "stack_size 3 equal blocks"):
        run(UnstackVertex(0, 3), [rng.standard_normal((5, 3))])


def test_stack_pads_time_series_of_different_lengths(rng):
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((1, 3, 6))
    v = StackVertex()
    out = run(v, [a, b])
    expect = np.zeros((3, 3, 6))
    expect[:2, :, :4], expect[2:] = a, b
    np.testing.assert_array_equal(out, expect)
    mask = v.feed_forward_mask([None, None], 3).numpy()
    np.testing.assert_array_equal(mask, [[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 0, 0], [1] * 6])
    check_gradient(StackVertex(), [a, b], rng)


def test_scale_shift(rng):
    x = rng.standard_normal((3, 4))
    np.testing.assert_allclose(run(ScaleVertex(2.5), [x]), x * 2.5, rtol=1e-15)
    np.testing.assert_allclose(run(ShiftVertex(-1.5), [x]), x - 1.5, rtol=1e-15)
    check_gradient(ScaleVertex(2.5), [x], rng)
    check_gradient(ShiftVertex(-1.5), [x], rng)


def test_l2_normalize(rng):
    x = rng.standard_normal((3, 4))
    np.testing.assert_allclose(run(L2NormalizeVertex(), [x]),
                               x / np.linalg.norm(x, axis=1, keepdims=True), rtol=1e-14)
    check_gradient(L2NormalizeVertex(), [x], rng)
    img = rng.standard_normal((2, 3, 2, 2))
    np.testing.assert_allclose(run(L2NormalizeVertex(dims=(1,)), [img]),
                               img / np.linalg.norm(img, axis=1, keepdims=True), rtol=1e-14)
    check_gradient(L2NormalizeVertex(dims=1), [img], rng)
    check_gradient(L2NormalizeVertex(), [img], rng)
    # a zero example: divided by eps, its gradient eps / eps (no NaN)
    z = np.zeros((1, 3))
    assert np.array_equal(run(L2NormalizeVertex(), [z]), z)
    v = L2NormalizeVertex()
    v.activate([ndws.asarray(z)], True, MGR)
    _, (e,) = v.backprop_gradient(ndws.asarray(np.ones((1, 3))), MGR)
    assert np.isfinite(e.numpy()).all()


def test_l2_distance(rng):
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    np.testing.assert_allclose(run(L2Vertex(), [a, b]),
                               np.linalg.norm(a - b, axis=1, keepdims=True), rtol=1e-14)
    check_gradient(L2Vertex(), [a, b], rng)
    with pytest.raises(ValueError, match=r"L2Vertex: the inputs' shapes differ"):
        run(L2Vertex(), [a, b[:, :2]])


def test_preprocessor_and_reshape(rng):
    img = rng.standard_normal((2, 3, 2, 2))
    v = PreprocessorVertex(CnnToFeedForwardPreProcessor(2, 2, 3))
    np.testing.assert_array_equal(run(v, [img]), img.reshape(2, 12))
    check_gradient(PreprocessorVertex(CnnToFeedForwardPreProcessor(2, 2, 3)), [img], rng)
    x = rng.standard_normal((2, 6))
    np.testing.assert_array_equal(run(ReshapeVertex((-1, 2, 3)), [x]), x.reshape(2, 2, 3))
    np.testing.assert_array_equal(run(ReshapeVertex((2, 3, 2), order="f"), [x]),
                                  x.reshape((2, 3, 2), order="F"))
    check_gradient(ReshapeVertex((2, 3, 2), order="f"), [x], rng)
    with pytest.raises(ValueError, match=r"ReshapeVertex: an input of shape \(2, 6\) does not "
                                         r"reshape to \(2, 5\)"):
        run(ReshapeVertex((2, 5)), [x])


def test_last_time_step_with_and_without_mask(rng):
    x = rng.standard_normal((3, 2, 4))
    v = LastTimeStepVertex("in")
    v._network = Inputs(**{"in": (ndws.asarray(x), None)})
    np.testing.assert_array_equal(run(v, [x]), x[:, :, 3])
    check_gradient(v, [x], rng)
    mask = np.array([[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=np.float64)
    v._network = Inputs(**{"in": (ndws.asarray(x), ndws.asarray(mask))})
    np.testing.assert_array_equal(run(v, [x]), x[np.arange(3), :, [1, 2, 3]])
    check_gradient(v, [x], rng)
    assert v.feed_forward_mask([ndws.asarray(mask)], 3) is None       # consumed
    v._network = Inputs(**{"in": (ndws.asarray(x), ndws.asarray(mask[:2]))})
    with pytest.raises(ValueError, match=r"LastTimeStepVertex: the mask of input 'in' has shape "
                                         r"\(2, 4\), the time series \(3, 2, 4\)"):
        run(v, [x])


def test_duplicate_to_time_series(rng):
    rows, series = rng.standard_normal((2, 3)), rng.standard_normal((2, 5, 4))
    mask = ndws.asarray(np.ones((2, 4)))
    v = DuplicateToTimeSeriesVertex("seq")
    v._network = Inputs(seq=(ndws.asarray(series), mask))
    np.testing.assert_array_equal(run(v, [rows]), np.repeat(rows[:, :, None], 4, axis=2))
    check_gradient(v, [rows], rng)
    assert v.feed_forward_mask([None], 2) is mask


def test_reverse_time_series_with_and_without_mask(rng):
    x = rng.standard_normal((2, 3, 5))
    v = ReverseTimeSeriesVertex()
    np.testing.assert_array_equal(run(v, [x]), x[:, :, ::-1])
    check_gradient(v, [x], rng)
    # ALIGN_END-style padding first: the kept steps reversed among themselves, padding zero
    mask = np.array([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]], dtype=np.float64)
    v = ReverseTimeSeriesVertex("in")
    v._network = Inputs(**{"in": (ndws.asarray(x), ndws.asarray(mask))})
    out = run(v, [x])
    np.testing.assert_array_equal(out[0, :, :2], 0.0)
    np.testing.assert_array_equal(out[0, :, 2:], x[0, :, 2:][:, ::-1])
    np.testing.assert_array_equal(out[1], x[1, :, ::-1])
    check_gradient(v, [x], rng)


# -- masks ----------------------------------------------------------------------------------------

def test_merge_and_elementwise_masks_are_or_or_none():
    m1 = ndws.asarray(np.array([[1, 1, 0], [1, 0, 0]], dtype=np.float32))
    m2 = ndws.asarray(np.array([[1, 0, 0], [1, 1, 1]], dtype=np.float32))
    for v in (MergeVertex(), ElementWiseVertex("add")):
        assert v.feed_forward_mask([m1, None], 2) is None
        assert v.feed_forward_mask([m1, m2], 2).tolist() == [[1, 1, 0], [1, 1, 1]]
    assert SubsetVertex(0, 0).feed_forward_mask([m1], 2) is m1
    u = UnstackVertex(1, 2)
    assert u.feed_forward_mask([m1], 2).tolist() == [[1, 0, 0]]
    assert ReshapeVertex((2, 3), mask_shape=(3, 2)).feed_forward_mask([m1], 2).shape == (3, 2)


# -- workspaces: where each vertex puts its arrays --------------------------------------------

VERTICES = [
    (MergeVertex(), [(2, 3), (2, 2)]), (ElementWiseVertex("max"), [(2, 3), (2, 3)]),
    (ElementWiseVertex("add"), [(2, 1), (2, 3)]), (SubsetVertex(0, 1), [(2, 3)]),
    (StackVertex(), [(2, 3), (2, 3)]), (UnstackVertex(0, 2), [(4, 3)]),
    (ScaleVertex(2.0), [(2, 3)]), (ShiftVertex(2.0), [(2, 3)]),
    (L2NormalizeVertex(), [(2, 3)]), (L2Vertex(), [(2, 3), (2, 3)]),
    (PreprocessorVertex(CnnToFeedForwardPreProcessor(1, 3, 1)), [(2, 1, 1, 3)]),
    (ReshapeVertex((2, 3, 1)), [(2, 3)]), (ReverseTimeSeriesVertex(), [(2, 3, 2)]),
]


@pytest.mark.parametrize("vertex, shapes", VERTICES, ids=lambda v: type(v).__name__)
def test_each_vertex_puts_its_output_and_epsilons_where_their_types_say(vertex, shapes, rng):
    conf = ndws.WorkspaceConfiguration()
    mgr = (LayerWorkspaceMgr.builder().with_(ArrayType.ACTIVATIONS, "A", conf)
           .with_(ArrayType.ACTIVATION_GRAD, "G", conf)
           .default_workspace("W", conf).build())
    # the inputs in a workspace of their own (a producer's): a view of one is not the output
    with ndws.workspace("IN"):
        xs = [ndws.asarray(rng.standard_normal(s)) for s in shapes]
        _in_workspaces(mgr, vertex, xs, shapes)


def _in_workspaces(mgr, vertex, xs, shapes):
    assert {x.workspace_id for x in xs} == {"IN"}
    with mgr.notify_scope_entered(ArrayType.ACTIVATIONS, ArrayType.ACTIVATION_GRAD):
        with mgr.notify_scope_entered(ArrayType.FF_WORKING_MEM):
            out = vertex.activate(xs, True, mgr)
        assert out.workspace_id == "A"
        with mgr.notify_scope_entered(ArrayType.BP_WORKING_MEM):
            _, es = vertex.backprop_gradient(ndws.asarray(np.ones(out.shape)), mgr)
        assert [e.workspace_id for e in es] == ["G"] * len(xs)
        assert [tuple(e.shape) for e in es] == [tuple(s) for s in shapes]


# -- configuration ------------------------------------------------------------------------------

@pytest.mark.parametrize("make, exc, msg", [
    (lambda: SubsetVertex(3, 1), ValueError, r"SubsetVertex: to_index \(1\) must be >= "
                                             r"from_index \(3\); the range is inclusive"),
    (lambda: SubsetVertex(-1, 1), ValueError, r"SubsetVertex.from_index: expected an int in"),
    (lambda: SubsetVertex(0.5, 1), TypeError, "SubsetVertex.from_index: expected an int"),
    (lambda: UnstackVertex(2, 2), ValueError, r"from_index \(2\) must be below stack_size"),
    (lambda: UnstackVertex(0, 0), ValueError, "UnstackVertex.stack_size"),
    (lambda: ElementWiseVertex("divide"), ValueError, "ElementWiseVertex.op: unknown op"),
    (lambda: ScaleVertex(float("nan")), ValueError, "ScaleVertex.scale_factor: expected a "
                                                    "finite"),
    (lambda: ShiftVertex("1"), TypeError, "ShiftVertex.shift_factor: expected a finite"),
    (lambda: L2Vertex(eps=0.0), ValueError, "L2Vertex.eps: expected a positive"),
    (lambda: L2NormalizeVertex(dims=(0,)), ValueError, r"L2NormalizeVertex.dims: expected an "
                                                       r"int in \[1"),
    (lambda: ReshapeVertex((2, -1, -1)), ValueError, "at most one -1"),
    (lambda: ReshapeVertex(6), TypeError, "ReshapeVertex.new_shape: expected a tuple"),
    (lambda: ReshapeVertex((2, 3), order="x"), ValueError, "ReshapeVertex.order"),
    (lambda: PreprocessorVertex("p"), TypeError, "PreprocessorVertex.preprocessor: expected"),
    (lambda: LastTimeStepVertex(""), TypeError, "LastTimeStepVertex.mask_input_name"),
    (lambda: MergeVertex(merge_axis=0), ValueError, "MergeVertex.merge_axis"),
])
def test_vertex_fields_are_checked(make, exc, msg):
    with pytest.raises(exc, match=msg):
        make()


@pytest.mark.parametrize("vertex", [v for v, _ in VERTICES] + [
    LastTimeStepVertex("in"), DuplicateToTimeSeriesVertex("in"),
    ReverseTimeSeriesVertex("in"), L2NormalizeVertex(dims=(1, 2), eps=1e-6),
    ReshapeVertex((-1, 3), order="f", mask_shape=(4, 1))], ids=lambda v: type(v).__name__)
def test_vertex_json_round_trip(vertex):
    again = GraphVertex.from_dict(vertex.to_dict())
    assert again == vertex and type(again) is type(vertex)
    assert again.to_dict() == vertex.to_dict()


def test_from_dict_refuses_unknown_fields_and_classes():
    with pytest.raises(ValueError, match=r"ScaleVertex: unknown fields \['x'\]"):
        GraphVertex.from_dict({"@class": "ScaleVertex", "scale_factor": 1.0, "x": 1})
    with pytest.raises(ValueError, match="vertex: expected a dict with an '@class' entry"):
        GraphVertex.from_dict([1])
