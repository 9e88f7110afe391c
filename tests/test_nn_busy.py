"""A network's busy state (ndws/nn/_busy.py, docs/networks.md "Threads, listeners and
snapshots"): what a listener may call back into its network from each hook, in every workspace
mode, on the compiled and the general path; what another thread gets while the network trains;
copies taken at an iteration boundary. NumPy is the oracle of every value; interleavings are
arranged with Events, never timing."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import ndws
from ndws.data.dataset import DataSet
from ndws.evaluation import Evaluation
from ndws.nn import DenseLayer, MultiLayerConfiguration, MultiLayerNetwork, OutputLayer, Sgd
from ndws.nn import _busy
from ndws.nn.listeners import TrainingListener

from busy_helpers import WAIT, Hold, clone_during, copy_while_held, start_fit

MODES = ["NONE", "SINGLE", "SEPARATE"]
HOOKS = ["on_epoch_start", "on_forward_pass", "on_backward_pass", "on_gradient_calculation",
         "iteration_done", "on_epoch_end"]
BOUNDARY = {"on_epoch_start", "iteration_done", "on_epoch_end"}


def make_net(train="SEPARATE", infer="SINGLE", general=False, seed=3):
    # general: l2 takes the network off the compiled iteration (docs/networks.md)
    extra = {"l2": 1e-3} if general else {}
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=5, n_out=12, activation="tanh"),
         OutputLayer(n_out=4, activation="softmax", loss_function="MCXENT")],
        seed=seed, updater=Sgd(0.1), training_workspace_mode=train,
        inference_workspace_mode=infer, **extra))
    net.init()
    return net


@pytest.fixture
def batches():
    rng = np.random.default_rng(9)
    x = rng.normal(size=(24, 5)).astype(np.float32)
    y = np.eye(4, dtype=np.float32)[rng.integers(0, 4, 24)]
    return [DataSet(ndws.from_numpy(x[i:i + 8]), ndws.from_numpy(y[i:i + 8]))
            for i in range(0, 24, 8)]


def numpy_output(net, flat, x):
    """The network's output for `x` from the flat parameters `flat`, in float64 NumPy."""
    a = np.asarray(x, np.float64)
    views = {}
    for layer, name, shape, start, size in net._layout:
        views[(layer.index, name)] = flat[start:start + size].reshape(shape)
    for i, layer in enumerate(net.layers):
        z = a @ views[(i, "W")] + views[(i, "b")]
        if i < len(net.layers) - 1:
            a = np.tanh(z)
        else:
            e = np.exp(z - z.max(axis=1, keepdims=True))
            a = e / e.sum(axis=1, keepdims=True)
    return a


class CallBack(TrainingListener):
    """Calls back into the model from the hooks in `hooks` (in the first epoch's second
    iteration, or the epoch hooks of the first epoch) and records what each call gave, with
    the parameters at that moment."""

    def __init__(self, ds, tmp_path):
        self.ds = ds
        self.tmp_path = tmp_path
        self.seen: dict = {}

    def _try(self, model, hook):
        if hook in self.seen or (hook not in ("on_epoch_start", "on_epoch_end")
                                 and model.iteration != 1):
            return
        flat = model.params().numpy().copy()
        path = self.tmp_path / f"{hook}.zip"
        calls = {
            "output": lambda: model.output(self.ds.features).numpy(),
            "score": lambda: model.score(self.ds),
            "do_evaluation": lambda: model.do_evaluation(
                [self.ds], Evaluation(num_classes=4)).accuracy(),
            "save": lambda: model.save(path),
            "clone": lambda: model.clone().params().numpy(),
            "set_params": lambda: model.set_params(flat),      # the same values
            "fit": lambda: model.fit(self.ds),
        }
        got = {}
        for op, call in calls.items():
            try:
                got[op] = ("ok", call())
            except RuntimeError as exc:
                got[op] = ("refused", str(exc))
        assert ndws.current_workspace() is None or hook == "on_forward_pass"
        self.seen[hook] = (flat, path, got)


def listener_for(hooks, ds, tmp_path):
    # a CallBack overriding only `hooks`: a listener that overrides on_forward_pass takes the
    # general path, one that does not leaves the compiled iteration on
    body = {}
    for hook in hooks:
        if hook == "on_forward_pass":
            body[hook] = lambda self, model, acts, _h=hook: self._try(model, _h)
        elif hook == "iteration_done":
            body[hook] = lambda self, model, it, ep, _h=hook: self._try(model, _h)
        else:
            body[hook] = lambda self, model, _h=hook: self._try(model, _h)
    return type("Listener", (CallBack,), body)(ds, tmp_path)


def check_call_backs(listener, net, batches, hooks):
    ds = batches[0]
    for hook in hooks:
        assert hook in listener.seen, f"{hook} was not called"
        flat, path, got = listener.seen[hook]
        assert got["fit"][0] == "refused"
        assert got["fit"][1].startswith("MultiLayerNetwork.fit: called from inside "
                                        "MultiLayerNetwork.fit on the same thread")
        if hook == "on_forward_pass":
            for op in ("output", "score", "do_evaluation", "save", "clone", "set_params"):
                assert got[op][0] == "refused", (hook, op)
                assert "called inside the forward and backward pass of a training iteration" \
                    in got[op][1], got[op][1]
            continue
        expected = numpy_output(net, flat.astype(np.float64), ds.features.numpy())
        np.testing.assert_allclose(got["output"][1], expected, rtol=1e-5, atol=1e-6)
        labels = ds.labels.numpy()
        l2 = net.conf.l2 or 0.0
        reg = sum(0.5 * l2 * float(np.sum(flat[s:s + n].astype(np.float64) ** 2))
                  for _, name, _, s, n in net._layout if name == "W")
        np.testing.assert_allclose(got["score"][1], -np.mean(
            np.sum(labels * np.log(expected), axis=1)) + reg, rtol=1e-4)
        assert got["do_evaluation"][1] == np.mean(expected.argmax(1) == labels.argmax(1))
        if hook in BOUNDARY:
            assert got["save"] == ("ok", None) and got["set_params"] == ("ok", None)
            np.testing.assert_array_equal(MultiLayerNetwork.load(path).params().numpy(), flat)
            np.testing.assert_array_equal(got["clone"][1], flat)
        else:
            for op in ("save", "clone", "set_params"):
                assert got[op][0] == "refused", (hook, op)
                assert got[op][1].startswith(f"MultiLayerNetwork.{op}: called inside a training "
                                             f"iteration of MultiLayerNetwork.fit"), got[op][1]
            assert not path.exists()


@pytest.mark.parametrize("infer", MODES)
@pytest.mark.parametrize("train", MODES)
@pytest.mark.parametrize("path", ["compiled", "general"])
def test_listeners_call_back_what_is_safe_from_every_hook(path, train, infer, batches,
                                                          tmp_path):
    hooks = [h for h in HOOKS if h != "on_forward_pass"]
    net = make_net(train, infer, general=path == "general")
    ref = make_net(train, infer, general=path == "general")
    listener = listener_for(hooks, batches[0], tmp_path)
    net.set_listeners(listener)
    assert (net._compiled(batches[0]) is None) == (path == "general")
    net.fit(batches, epochs=2, progress=False)
    ref.fit(batches, epochs=2, progress=False)
    if path == "compiled" and "on_backward_pass" not in listener.seen:
        hooks.remove("on_backward_pass")       # the compiled iteration does not call it yet
    check_call_backs(listener, net, batches, hooks)
    # nothing the listener did moved the training: the same parameters as without it
    np.testing.assert_array_equal(net.params().numpy(), ref.params().numpy())
    assert (net.iteration, net.epoch) == (6, 2)


@pytest.mark.parametrize("infer", MODES)
@pytest.mark.parametrize("train", MODES)
def test_inside_on_forward_pass_every_call_back_is_refused(train, infer, batches, tmp_path):
    net, ref = make_net(train, infer), make_net(train, infer)
    listener = listener_for(["on_forward_pass"], batches[0], tmp_path)
    net.set_listeners(listener)
    net.fit(batches, epochs=2, progress=False)
    ref.fit(batches, epochs=2, progress=False)
    check_call_backs(listener, net, batches, ["on_forward_pass"])
    np.testing.assert_array_equal(net.params().numpy(), ref.params().numpy())


def test_the_other_training_calls_are_refused_inside_fit_and_the_counters_are_free(batches):
    x = batches[0].features
    seen = {}

    class Inside(TrainingListener):
        def iteration_done(self, model, iteration, epoch):
            if iteration:
                return
            for op, call in [("compute_gradient_and_score",
                              lambda: model.compute_gradient_and_score(batches[0])),
                             ("init", lambda: model.init())]:
                with pytest.raises(RuntimeError) as info:
                    call()
                seen[op] = str(info.value)
            seen["feed_forward"] = model.feed_forward(x)[-1].numpy()
            seen["score_examples"] = model.score_examples(batches[0]).numpy()
            model.iteration = model.iteration        # the counters: anywhere
            model.epoch = model.epoch

    net = make_net()
    net.set_listeners(Inside())
    net.fit(batches, progress=False)
    for op in ("compute_gradient_and_score", "init"):
        assert seen[op] == (f"MultiLayerNetwork.{op}: called from inside MultiLayerNetwork.fit "
                            f"on the same thread (from a listener, a data iterator or a layer); "
                            f"a network runs one training call at a time: call it after "
                            f"MultiLayerNetwork.fit returns, or train a copy (clone())")
    assert seen["feed_forward"].shape == (8, 4) and seen["score_examples"].shape == (8,)
    assert net.iteration == 3


def test_a_layer_calling_its_network_inside_a_forward_pass_is_refused(batches):
    net = make_net(general=True)
    errors = []

    class Calling(DenseLayer):
        def activate(self, x, training, mgr):
            try:
                owner.output(batches[0].features)
            except RuntimeError as exc:
                errors.append(str(exc))
            return super().activate(x, training, mgr)

    owner = MultiLayerNetwork(MultiLayerConfiguration(
        [Calling(n_in=5, n_out=12, activation="tanh"),
         OutputLayer(n_out=4, activation="softmax", loss_function="MCXENT")], seed=3))
    owner.init(net.params())
    expected = net.output(batches[0].features).numpy()
    np.testing.assert_allclose(owner.output(batches[0].features).numpy(), expected,
                               rtol=1e-6)
    owner.fit(batches[0])
    tail = (" of this network (from on_forward_pass or a layer): until that pass ends its "
            "layers hold its state and read the parameters, and a nested pass would overwrite "
            "that state; call it after the pass (from a listener's on_backward_pass, "
            "on_gradient_calculation, iteration_done or on_epoch_end)")
    assert errors == [
        "MultiLayerNetwork.output: called inside a forward pass" + tail,
        "MultiLayerNetwork.output: called inside the forward and backward pass of a training "
        "iteration" + tail]
    assert ndws.current_workspace() is None


# -- other threads -----------------------------------------------------------------------------

@pytest.mark.parametrize("at", [1, 2], ids=["mid-fit", "last-iteration"])
def test_clone_from_another_thread_waits_for_the_iteration_boundary(at, batches):
    net = make_net()
    hold = Hold("on_gradient_calculation", at)
    net.set_listeners(hold)
    clone = clone_during(net, hold, lambda: net.fit(batches, progress=False))
    # the state at the end of iteration `at`: never the half-written 7.0s
    np.testing.assert_array_equal(clone.params().numpy(), hold.boundaries[at + 1])
    assert (clone.iteration, clone.epoch) == (at + 1, 0)
    other = make_net()
    other.fit(batches[:at + 1], progress=False)
    np.testing.assert_array_equal(clone._updater_state_flat(), other._updater_state_flat())


def test_a_copy_waiting_when_fit_raises_inside_the_iteration_fails_with_the_reason(batches):
    net = make_net(general=True)                 # on_backward_pass runs on the general path
    hold = Hold("on_backward_pass", 1, raise_=ValueError("listener trouble"))
    net.set_listeners(hold)
    fit, errors = start_fit(net, batches)
    assert hold.inside.wait(WAIT)
    waited, box = copy_while_held(net, hold, net.clone)
    fit.join(WAIT)
    assert waited
    assert [type(e) for e in errors] == [ValueError]
    assert str(box["error"]) == (
        "MultiLayerNetwork.clone: MultiLayerNetwork.fit raised ValueError inside a training "
        "iteration while this waited for the iteration's end; its parameters may be partly "
        "updated, so nothing was copied (the network is free again)")
    assert net._busy.owner is None and not net._busy.writing
    np.testing.assert_array_equal(net.clone().params().numpy(), net.params().numpy())


def test_a_copy_of_an_idle_network_is_immediate_and_a_boundary_copy_does_not_wait(batches):
    net = make_net()
    np.testing.assert_array_equal(net.clone().params().numpy(), net.params().numpy())
    hold = Hold("iteration_done", 2)          # holds fit at a boundary, not inside
    net.set_listeners(hold)
    fit, errors = start_fit(net, batches)
    assert hold.inside.wait(WAIT)
    clone = net.clone()                       # fit is held: this cannot be waiting for it
    np.testing.assert_array_equal(clone.params().numpy(), hold.boundaries[2])
    hold.go.set()
    fit.join(WAIT)
    assert not errors


@pytest.mark.parametrize("hook", ["on_gradient_calculation", "iteration_done"])
def test_writes_from_another_thread_during_fit_get_the_busy_error(hook, batches, tmp_path):
    net = make_net()
    hold = Hold(hook, 1)
    net.set_listeners(hold)
    fit, errors = start_fit(net, batches)
    assert hold.inside.wait(WAIT)
    try:
        flat = np.zeros(net.num_params(), np.float32)
        for op, call in [("set_params", lambda: net.set_params(flat)),
                         ("init", lambda: net.init()),
                         ("iteration", lambda: setattr(net, "iteration", 0)),
                         ("epoch", lambda: setattr(net, "epoch", 5)),
                         ("save", lambda: net.save(tmp_path / "x.zip")),
                         ("output", lambda: net.output(batches[0].features))]:
            with pytest.raises(RuntimeError, match=rf"^MultiLayerNetwork\.{op}: the network is "
                                                   rf"in use by another thread "
                                                   rf"\(MultiLayerNetwork\.fit\)"):
                call()
    finally:
        hold.go.set()
        fit.join(WAIT)
    assert not errors and net.iteration == 3 and net.epoch == 1
    assert not (tmp_path / "x.zip").exists()
    assert not np.array_equal(net.params().numpy(), flat)


def test_an_interrupted_copier_leaves_no_request_behind(batches, monkeypatch):
    net = make_net()
    hold = Hold("on_gradient_calculation", 1)
    net.set_listeners(hold)

    class Interrupted(threading.Event):
        def wait(self, timeout=None):
            raise KeyboardInterrupt

    fit, errors = start_fit(net, batches)
    assert hold.inside.wait(WAIT)
    monkeypatch.setattr(_busy.threading, "Event", Interrupted)
    with pytest.raises(KeyboardInterrupt):
        net.clone()
    monkeypatch.undo()
    assert net._busy.waiting == []
    hold.go.set()
    fit.join(WAIT)
    assert not errors and net.iteration == 3


def test_set_params_refuses_bad_input_before_taking_the_network(batches):
    net = make_net()
    n = net.num_params()
    before = net.params().numpy().copy()
    with pytest.raises(ValueError, match=rf"params: expected shape \({n},\), got \(3,\)"):
        net.set_params(np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="params: expected a float array, got dtype int64"):
        net.set_params(np.zeros(n, np.int64))
    np.testing.assert_array_equal(net.params().numpy(), before)
    assert net._busy.owner is None
    net.set_params(net.params())                       # its own live array: unchanged
    np.testing.assert_array_equal(net.params().numpy(), before)
    net.set_params(np.ascontiguousarray(before[::-1])[::-1])     # a negative-stride view
    np.testing.assert_array_equal(net.params().numpy(), before)
    with_nan = before.copy()
    with_nan[0] = np.nan
    net.set_params(with_nan[::1])
    assert np.isnan(net.params().numpy()[0]) and net._busy.writing == 0
