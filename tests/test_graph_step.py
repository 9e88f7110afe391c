"""rnn_time_step's one-step path (ndws/nn/_model.py `_one_step_path`, the graph's plan in
ndws/nn/graph/network.py, the vertices' step runners): stepping a graph one step at a time
through it equals the general path bit for bit and `output` on the whole sequence; the carried
state is the general path's; what the plan does not cover, and every hostile input, goes to the
general path and gets its answer or its error, for both network types."""
import numpy as np
import pytest

import ndws
from ndws.nn import (LSTM, ComputationGraph, ComputationGraphConfiguration, DenseLayer,
                     DuplicateToTimeSeriesVertex, ElementWiseVertex, GraphVertex, InputType,
                     L2NormalizeVertex, LastTimeStepVertex, MergeVertex, MultiLayerConfiguration,
                     MultiLayerNetwork, OutputLayer, RnnOutputLayer, ScaleVertex, ShiftVertex,
                     SimpleRnn, SubsetVertex)

T = 5


@pytest.fixture(autouse=True)
def _clean():
    yield
    ndws.destroy_all_workspaces_for_current_thread()


def build(conf):
    g = ComputationGraph(conf)
    g.init()
    return g


def two_input(seed=1, dtype="float32"):
    # bench/bench_graph.py's two-input graph, small: an LSTM over "seq" read at its last step,
    # a dense layer over "side", merged (the automatic out-merge) into a softmax
    return build(ComputationGraphConfiguration.builder(seed=seed, dtype=dtype)
                 .add_inputs("seq", "side")
                 .add_layer("lstm", LSTM(n_out=6, activation="tanh"), "seq")
                 .add_vertex("last", LastTimeStepVertex("seq"), "lstm")
                 .add_layer("dense", DenseLayer(n_out=4, activation="relu"), "side")
                 .add_layer("out", OutputLayer(n_out=3, activation="softmax"), "last", "dense")
                 .set_outputs("out")
                 .set_input_types(InputType.recurrent(3), InputType.feed_forward(4))
                 .build())


def every_vertex(seed=2, fmt="NCW"):
    # every vertex the one-step path runs, on time series and on rows; outputs: a softmax at
    # every step, one over the last step, and a vertex of rows
    b = (ComputationGraphConfiguration.builder(seed=seed)
         .add_inputs("side", "seq")
         .add_layer("l1", LSTM(n_out=5, activation="tanh", data_format=fmt), "seq")
         .add_layer("l2", SimpleRnn(n_out=5, activation="tanh", data_format=fmt), "seq")
         .add_vertex("sum", ElementWiseVertex("ADD"), "l1", "l2")
         .add_vertex("avg", ElementWiseVertex("AVERAGE"), "l1", "l2", "sum")
         .add_vertex("max", ElementWiseVertex("MAX"), "avg", "l2")
         .add_vertex("sub", ElementWiseVertex("SUBTRACT"), "max", "l1")
         .add_vertex("scaled", ScaleVertex(0.5), "sub")
         .add_vertex("shifted", ShiftVertex(0.1), "scaled")
         .add_layer("d", DenseLayer(n_out=4, activation="tanh"), "side")
         .add_layer("l3", LSTM(n_out=4, activation="tanh", data_format=fmt),
                    "shifted", "l1")                                      # (merge of two)
         .add_layer("out", RnnOutputLayer(n_out=3, activation="softmax", data_format=fmt),
                    "l3")
         .set_outputs("out"))
    if fmt == "NCW":
        # the vertices that take NCW series only
        b.add_vertex("part", SubsetVertex(1, 3), "l3")
        b.add_vertex("dup", DuplicateToTimeSeriesVertex("seq"), "d")
        b.add_vertex("m", MergeVertex(), "part", "dup")
        b.add_layer("l4", SimpleRnn(n_out=4, activation="tanh"), "m")
        b.add_vertex("last", LastTimeStepVertex("seq"), "l4")
        b.add_vertex("prod", ElementWiseVertex("PRODUCT"), "last", "d")
        b.add_layer("out2", OutputLayer(n_out=2, activation="softmax"), "prod", "d")
        b.set_outputs("out", "out2", "prod")
    else:
        b.add_layer("out2", OutputLayer(n_out=2, activation="softmax"), "d")
        b.set_outputs("out", "out2")
    b.set_input_types(InputType.feed_forward(4), InputType.recurrent(3, data_format=fmt))
    return build(b.build())


def general(g):
    # the same graph with the one-step path turned off
    other = ComputationGraph(g.conf)
    other.init(g.params())
    other._one_step_path = lambda xs: None
    return other


def step_of(x, t, fmt="NCW"):
    return x[:, :, t] if fmt == "NCW" else x[:, t, :]


def series(rng, n, fmt="NCW"):
    x = rng.standard_normal((n, 3, T)).astype(np.float32)
    return np.ascontiguousarray(x.transpose(0, 2, 1)) if fmt == "NWC" else x


def inputs_of(g, seq, side):
    # in the graph's add_inputs order
    return (seq, side) if g.conf.network_inputs[0] == "seq" else (side, seq)


# -- the same bits as the general path, and output on the whole sequence --------------------------

@pytest.mark.parametrize("make,fmt", [(two_input, "NCW"), (two_input, "float64"),
                                      (every_vertex, "NCW"), (every_vertex, "NWC")],
                         ids=["two-input", "two-input-float64", "every-vertex",
                              "every-vertex-NWC"])
@pytest.mark.parametrize("n", [1, 3])
def test_stepping_equals_the_general_path_and_the_whole_sequence(make, fmt, n, rng):
    if make is two_input:
        g = make(dtype="float64" if fmt == "float64" else "float32")
        fmt = "NCW"
    else:
        g = make(fmt=fmt)
    ref = general(g)
    dt = g.conf.dtype
    x, side = series(rng, n, fmt).astype(dt), rng.standard_normal((n, 4)).astype(dt)
    outs, refs = [], []
    for t in range(T):
        outs.append([o.numpy() for o in g.rnn_time_step(*inputs_of(g, step_of(x, t, fmt),
                                                                   side))])
        refs.append([o.numpy() for o in ref.rnn_time_step(*inputs_of(g, step_of(x, t, fmt),
                                                                     side))])
        assert g._step_plan[0] == n and g._step_plan[2] is not None       # the fast path ran
        assert ref._step_plan is None
    for got, want in zip(outs, refs):
        assert [a.shape for a in got] == [b.shape for b in want]
        assert all(a.dtype == dt for a in got)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    # the state carried: the general path's, and each recurrent layer's last output
    for name in ("lstm", "l1", "l2", "l3", "l4"):
        if name not in g.conf.topological_order:
            continue
        mine, theirs = g.rnn_get_previous_state(name), ref.rnn_get_previous_state(name)
        assert set(mine) == set(theirs)
        for key in mine:
            np.testing.assert_array_equal(mine[key].numpy(), theirs[key].numpy())
    acts = g.feed_forward(*inputs_of(g, x, side))
    layer = "lstm" if "lstm" in acts else "l3"
    last = acts[layer].numpy()[:, :, -1] if fmt == "NCW" else acts[layer].numpy()[:, -1, :]
    np.testing.assert_allclose(g.rnn_get_previous_state(layer)["prevAct"].numpy(), last,
                               atol=1e-6)
    # each step's outputs: output() of the sequence up to that step, at its last step
    axis = 2 if fmt == "NCW" else 1
    for t in range(T):
        prefix = x[:, :, :t + 1] if fmt == "NCW" else x[:, :t + 1]
        whole = g.output(*inputs_of(g, prefix, side))
        for k, (a, w) in enumerate(zip(outs[t], whole)):
            w = w.numpy()
            if w.ndim == 3:
                w = np.take(w, -1, axis=axis)
            np.testing.assert_allclose(a, w, atol=1e-6, err_msg=f"output {k}, step {t}")


def test_the_general_path_by_output_workspace_gives_the_same_bits(rng):
    g = two_input()
    ref = two_input()
    x, side = series(rng, 2), rng.standard_normal((2, 4)).astype(np.float32)
    for t in range(T):
        fast = g.rnn_time_step(x[:, :, t], side)[0]
        assert not fast.is_attached()
        with ndws.workspace("USER") as ws:
            slow = ref.rnn_time_step(x[:, :, t], side, output_workspace=ws)[0]
            assert slow.workspace_id == "USER"
            np.testing.assert_array_equal(fast.numpy(), slow.numpy())
    assert ref._step_plan is None
    # several steps at once continue the same sequences on the general path
    g.rnn_clear_previous_state()
    first = g.rnn_time_step(x[:, :, :3], side)[0].numpy()
    rest = [g.rnn_time_step(x[:, :, t], side)[0].numpy() for t in (3, 4)]
    ref.rnn_clear_previous_state()
    whole = [ref.rnn_time_step(x[:, :, t], side)[0].numpy() for t in range(T)]
    np.testing.assert_allclose(first, whole[2], atol=1e-6)
    np.testing.assert_array_equal(np.stack(rest), np.stack(whole[3:]))


def test_each_call_returns_a_new_array_and_outputs_are_not_aliased(rng):
    g = every_vertex()
    x, side = series(rng, 2), rng.standard_normal((2, 4)).astype(np.float32)
    a = g.rnn_time_step(side, x[:, :, 0])
    kept = [o.numpy().copy() for o in a]
    g.rnn_time_step(side, x[:, :, 1])
    for o, k in zip(a, kept):
        np.testing.assert_array_equal(o.numpy(), k)          # not overwritten by the next step
        assert not o.is_attached()


def test_the_state_set_between_steps_is_what_the_next_step_starts_from(rng):
    g, ref = two_input(), two_input()
    x, side = series(rng, 2), rng.standard_normal((2, 4)).astype(np.float32)
    g.rnn_time_step(x[:, :, 0], side)
    state = {"prevAct": np.full((2, 6), 0.25, np.float32),
             "prevMem": np.full((2, 6), -0.5, np.float32)}
    g.rnn_set_previous_state("lstm", state)
    ref.rnn_set_previous_state("lstm", state)
    ref._one_step_path = lambda xs: None
    np.testing.assert_array_equal(g.rnn_time_step(x[:, :, 1], side)[0].numpy(),
                                  ref.rnn_time_step(x[:, :, 1], side)[0].numpy())


# -- what goes to the general path ------------------------------------------------------------

class Doubler(GraphVertex):
    def activate(self, inputs, training, mgr):
        from ndws.nn.workspace_mgr import ArrayType
        out = mgr.create_uninitialized(ArrayType.ACTIVATIONS, inputs[0].shape,
                                       dtype=inputs[0].dtype)
        return ndws.multiply(inputs[0], 2.0, out=out)

    def backprop_gradient(self, epsilon, mgr):
        return {}, [epsilon]


def uncovered(name):
    # graphs the plan does not cover: a custom vertex; a vertex without a step runner; an
    # output vertex that the general path gives as a series
    b = ComputationGraphConfiguration.builder(seed=1).add_inputs("seq")
    b.add_layer("lstm", LSTM(n_out=4), "seq")
    if name == "custom vertex":
        b.add_vertex("v", Doubler(), "lstm")
    elif name == "vertex without a step runner":
        b.add_vertex("v", L2NormalizeVertex(), "lstm")
    else:
        b.add_vertex("v", ScaleVertex(2.0), "lstm")
    if name == "series vertex output":
        b.set_outputs("v")
    else:
        b.add_layer("out", RnnOutputLayer(n_out=2, activation="softmax"), "v")
        b.set_outputs("out")
    return b.set_input_types(InputType.recurrent(3)).build()


@pytest.mark.parametrize("name", ["custom vertex", "vertex without a step runner",
                                  "series vertex output"])
def test_what_the_plan_does_not_cover_takes_the_general_path(name, rng):
    g = build(uncovered(name))
    x = series(rng, 2)
    out = g.rnn_time_step(x[:, :, 0])
    assert g._step_plan == (2, None, None)                 # refused once, for the batch size
    ref = general(g)
    np.testing.assert_array_equal(out[0].numpy(), ref.rnn_time_step(x[:, :, 0])[0].numpy())
    np.testing.assert_array_equal(g.rnn_time_step(x[:, :, 1])[0].numpy(),
                                  ref.rnn_time_step(x[:, :, 1])[0].numpy())


# -- hostile input: the general path's answer or error, nothing moved -----------------------------

def outcome(fn):
    try:
        result = fn()
    except Exception as exc:  # noqa: BLE001 - compared between the two paths
        return type(exc), str(exc)
    return [o.numpy().copy() for o in (result if isinstance(result, list) else [result])]


def same(a, b):
    if isinstance(a, tuple) or isinstance(b, tuple):
        assert a == b
    else:
        assert len(a) == len(b)
        for u, v in zip(a, b):
            np.testing.assert_array_equal(u, v)


def states(model, names):
    # every carried state array of the layers `names`, in a fixed order
    return [v.numpy().copy() for n in names
            for _, v in sorted(model.rnn_get_previous_state(n).items())]


def networks():
    # both network types with a plan for batches of 2 (a step taken); the second of each pair
    # on the general path; the names of their recurrent layers; how to call them with
    # (seq, side)
    g = two_input()
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [LSTM(n_out=5, activation="tanh"), DenseLayer(n_out=4, activation="tanh"),
         RnnOutputLayer(n_out=3, activation="softmax")],
        input_type=InputType.recurrent(3), seed=1))
    net.init()
    ref = MultiLayerNetwork(net.conf)
    ref.init(net.params())
    ref._one_step_path = lambda xs: None
    return {"graph": (g, general(g), ["lstm"], lambda m, s, d: m.rnn_time_step(s, d)),
            "network": (net, ref, [0], lambda m, s, d: m.rnn_time_step(s))}


def step_data(rng, n):
    # one step of n sequences of 3 features, and n rows of 4 side features
    return (rng.standard_normal((n, 3)).astype(np.float32),
            rng.standard_normal((n, 4)).astype(np.float32))


def hostile(rng):
    x, side = step_data(rng, 2)
    nan = x.copy()
    nan[1, 2] = np.nan
    with ndws.workspace("GONE"):
        stale, stale_side = ndws.asarray(x), ndws.asarray(side)
    held = ndws.from_numpy(np.concatenate([x, x], axis=1))
    wide = np.zeros((2, 6), np.float32)
    return {
        "wrong width": (np.zeros((2, 4), np.float32), side),
        "side too wide": (x, np.zeros((2, 5), np.float32)),
        "float64": (x.astype(np.float64), side),
        "int32": (np.arange(6, dtype=np.int32).reshape(2, 3), side),
        "object": (np.array([[None] * 3] * 2), side),
        "3-D": (x[:, :, None], side),
        "4-D": (x[:, :, None, None], side),
        "1-D": (x[0], side),
        "NaN": (nan, side),
        "inf": (np.full((2, 3), np.inf, np.float32), side),
        "closed workspace": (stale, side),
        "closed workspace side": (x, stale_side),        # read by a dense layer first
        "strided view": (wide[:, ::2], side),
        "NDArray strided view": (ndws.from_numpy(wide)[:, ::2], side),
        "negative strides": (x[::-1, ::-1], side),
        "NDArray negative strides": (held[::-1, ::-2], side),
        "rows differ": (x, side[:1]),
        "zero rows": (x[:0], side[:0]),
        "a list": (x.tolist(), side),
        "a string": ("abc", side),
    }


@pytest.mark.parametrize("kind", ["graph", "network"])
@pytest.mark.parametrize("case", ["wrong width", "side too wide", "float64", "int32",
                                  "object", "3-D", "4-D", "1-D", "NaN", "inf",
                                  "closed workspace", "closed workspace side", "strided view",
                                  "NDArray strided view", "negative strides",
                                  "NDArray negative strides", "rows differ", "zero rows",
                                  "a list", "a string"])
def test_hostile_input_gets_the_general_paths_answer(kind, case, rng):
    fast, ref, names, call = networks()[kind]
    x0, side0 = step_data(rng, 2)
    call(fast, x0, side0)                    # a plan for batches of 2, and a state
    call(ref, x0, side0)
    assert fast._step_plan[2] is not None
    seq, side = hostile(rng)[case]
    before = states(fast, names)
    got, want = outcome(lambda: call(fast, seq, side)), outcome(lambda: call(ref, seq, side))
    same(got, want)
    if isinstance(got, tuple):
        same(states(fast, names), before)        # an error moved nothing
        assert got[0] in (TypeError, ValueError, ndws.WorkspaceError)
    same(states(fast, names), states(ref, names))
    # and the next ordinary step agrees
    same(outcome(lambda: call(fast, x0, side0)), outcome(lambda: call(ref, x0, side0)))


@pytest.mark.parametrize("kind", ["graph", "network"])
def test_a_new_batch_size_without_clearing_is_the_general_paths_error(kind, rng):
    fast, ref, names, call = networks()[kind]
    x, side = step_data(rng, 3)
    call(fast, x, side)
    call(ref, x, side)
    got = outcome(lambda: call(fast, x[:2], side[:2]))
    assert got == outcome(lambda: call(ref, x[:2], side[:2]))
    assert got[0] is ValueError and "Invalid RNN previous state (last time step " \
        "activations/initialization): rnnTimeStep with different minibatch size" in got[1]
    assert "the stored state is for 3 examples, the input has 2" in got[1]
    fast.rnn_clear_previous_state()
    ref.rnn_clear_previous_state()
    same(outcome(lambda: call(fast, x[:2], side[:2])), outcome(lambda: call(ref, x[:2],
                                                                            side[:2])))
    assert fast._step_plan[0] == 2 and fast._step_plan[2] is not None


@pytest.mark.parametrize("kind", ["graph", "network"])
def test_a_plan_is_dropped_when_the_parameters_are_rebuilt(kind, rng):
    fast, ref, names, call = networks()[kind]
    x, side = step_data(rng, 2)
    call(fast, x, side)
    assert fast._step_plan is not None
    fast.init()                               # new views of new buffers: the old plan goes
    assert fast._step_plan is None
    ref.init(fast.params())
    same(outcome(lambda: call(fast, x, side)), outcome(lambda: call(ref, x, side)))


@pytest.mark.parametrize("kind", ["graph", "network"])
def test_a_series_of_a_fixed_length_is_refused_one_step_as_on_the_general_path(kind, rng):
    # InputType.recurrent(3, 5): the general path refuses a step of one, in the caller's
    # terms; the one-step path leaves it to it (no plan), and a series of the length is served
    if kind == "graph":
        b = (ComputationGraphConfiguration.builder(seed=1).add_inputs("seq", "side")
             .add_layer("lstm", LSTM(n_out=4), "seq")
             .add_vertex("last", LastTimeStepVertex("seq"), "lstm")
             .add_layer("out", OutputLayer(n_out=2, activation="softmax"), "last", "side")
             .set_outputs("out")
             .set_input_types(InputType.recurrent(3, T), InputType.feed_forward(4)))
        fast = build(b.build())
        call = fast.rnn_time_step
        where = r'inputs\[0\] \(input "seq"\)'
    else:
        fast = MultiLayerNetwork(MultiLayerConfiguration(
            [LSTM(n_out=4), RnnOutputLayer(n_out=2, activation="softmax")],
            input_type=InputType.recurrent(3, T), seed=1))
        fast.init()
        call = lambda s, d: fast.rnn_time_step(s)         # noqa: E731
        where = r"x"
    x, side = step_data(rng, 2)
    with pytest.raises(ValueError, match=rf"^{where}: the input type InputType.recurrent\(3, "
                                         rf"{T}\) fixes the series at {T} steps, so "
                                         rf"rnn_time_step takes all {T} at once, not one step of "
                                         rf"shape \(2, 3\)$"):
        call(x, side)
    assert fast._step_plan == (2, None, None)
    assert not any(fast.rnn_get_previous_state(n) for n in (["lstm"] if kind == "graph"
                                                              else [0]))
    whole = series(rng, 2)
    assert call(whole, side)[0].shape[0] == 2


@pytest.mark.parametrize("call", ["output train", "fit", "rnn_time_step"])
def test_a_stale_input_is_refused_before_any_vertex_moves_its_state(call, rng):
    # the second input from a closed workspace: refused by name before the first vertex runs
    # (the pass used to fail at the vertex reading it, after BatchNormalization had moved its
    # running statistics and the LSTM its stored state)
    from ndws.nn import BatchNormalization
    g = build(ComputationGraphConfiguration.builder(seed=1)
              .add_inputs("seq", "side")
              .add_layer("lstm", LSTM(n_out=4), "seq")
              .add_vertex("last", LastTimeStepVertex("seq"), "lstm")
              .add_layer("bn", BatchNormalization(), "last")
              .add_layer("out", OutputLayer(n_out=2, activation="softmax"), "bn", "side")
              .set_outputs("out")
              .set_input_types(InputType.recurrent(3), InputType.feed_forward(4)).build())
    x, side = series(rng, 2), rng.standard_normal((2, 4)).astype(np.float32)
    g.rnn_time_step(x[:, :, 0], side)
    with ndws.workspace("GONE"):
        stale = ndws.asarray(side)
    params, state = g.params().numpy().copy(), states(g, ["lstm"])
    y = np.eye(2, dtype=np.float32)[[0, 1]]
    run = {"output train": lambda: g.output(x, stale, train=True),
           "fit": lambda: g.fit([x, stale], [y], progress=False),
           "rnn_time_step": lambda: g.rnn_time_step(x[:, :, 1], stale)}[call]
    with pytest.raises(ndws.WorkspaceError, match=r'^Op \[input\] (inputs|data)\[1\] '
                                                   r'\(input "side"\) argument uses leaked '
                                                   r'workspace pointer from workspace \[GONE\]'):
        run()
    np.testing.assert_array_equal(g.params().numpy(), params)
    same(states(g, ["lstm"]), state)
    assert g.iteration == 0
