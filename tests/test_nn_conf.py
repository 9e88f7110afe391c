"""ndws.nn.conf and the configuration side of ndws.nn.layers: validation naming the layer and
field, defaults and overrides, n_in inference, the exact JSON round trip."""
import json

import numpy as np
import pytest

import ndws
from ndws.nn import (Activation, ActivationLayer, Adam, DenseLayer, DropoutLayer, Layer,
                     LossFunction, LossLayer, MultiLayerConfiguration, OutputLayer, ScheduleType,
                     Sgd, StepSchedule, WeightInit)


def mlp(**kw):
    return MultiLayerConfiguration(
        [DenseLayer(n_in=784, n_out=256, activation="relu"), DenseLayer(n_out=256),
         OutputLayer(n_out=10, activation="softmax", loss_function="MCXENT")], **kw)


def test_n_in_inferred_and_defaults_fill_unset_fields():
    conf = mlp(seed=1, activation="tanh", l2=1e-4, weight_init="relu")
    dims = [(l.n_in, l.n_out) for l in conf.resolved_layers]
    assert dims == [(784, 256), (256, 256), (256, 10)]
    acts = [l.activation for l in conf.resolved_layers]
    assert acts == [Activation.RELU, Activation.TANH, Activation.SOFTMAX]   # own value wins
    assert all(l.l2 == 1e-4 and l.weight_init is WeightInit.RELU for l in conf.resolved_layers)
    assert conf.layers[1].activation is None            # the layers as given are kept
    assert [l.index for l in conf.resolved_layers] == [0, 1, 2]


def test_dl4j_defaults():
    conf = MultiLayerConfiguration([DenseLayer(n_in=3, n_out=2)], seed=5)
    assert conf.activation is Activation.SIGMOID and conf.weight_init is WeightInit.XAVIER
    assert conf.updater == Sgd(1e-3)
    assert conf.training_workspace_mode is ndws.WorkspaceMode.ENABLED
    assert conf.inference_workspace_mode is ndws.WorkspaceMode.ENABLED
    assert conf.dtype == np.float32
    drawn = MultiLayerConfiguration([DenseLayer(n_in=3, n_out=2)])
    assert isinstance(drawn.seed, int)                  # drawn once, kept for reproducibility
    assert MultiLayerConfiguration.from_json(drawn.to_json()).seed == drawn.seed


@pytest.mark.parametrize("layers, kw, exc, msg", [
    ([DenseLayer(n_in=4, n_out=8), DenseLayer(n_in=7, n_out=3)], {}, ValueError,
     r"^layers\[1\].n_in: 7 does not match the output width 8 of layers\[0\]$"),
    ([DenseLayer(n_out=8)], {}, ValueError, r"^layers\[0\].n_in: unknown"),
    ([DenseLayer(n_in=4)], {}, ValueError, r"^layers\[0\].n_out: required for DenseLayer$"),
    ([DenseLayer(n_in=4, n_out=8), OutputLayer(n_out=3, activation="relu")], {}, ValueError,
     r"^layers\[1\].loss_function: MCXENT needs activation softmax"),
    ([DenseLayer(n_in=4, n_out=8), OutputLayer(n_out=3, loss_function="xent",
                                               activation="softmax")], {}, ValueError,
     r"^layers\[1\].loss_function: XENT needs activation sigmoid"),
    ([DenseLayer(n_in=4, n_out=8), OutputLayer(n_out=3)], {}, ValueError,
     r"^layers\[1\].loss_function: MCXENT needs activation softmax.*got sigmoid$"),
    ([DenseLayer(n_in=4, n_out=8), ActivationLayer(n_out=5)], {}, ValueError,
     r"^layers\[1\].n_out: an ActivationLayer keeps its width \(8\), got 5$"),
    ([DenseLayer(n_in=4, n_out=8), "dense"], {}, TypeError, r"^layers\[1\]: expected an ndws"),
    ([], {}, ValueError, r"^layers: a network needs at least one layer$"),
    ("layers", {}, TypeError, r"^layers: expected a sequence"),
    ([DenseLayer(n_in=4, n_out=8)], {"dtype": "int32"}, ValueError, r"^dtype: expected float32"),
    ([DenseLayer(n_in=4, n_out=8)], {"dtype": "nonsense"}, ValueError, r"^dtype: expected"),
    ([DenseLayer(n_in=4, n_out=8)], {"seed": -1}, ValueError, r"^seed: expected an int"),
    ([DenseLayer(n_in=4, n_out=8)], {"seed": 1.5}, ValueError, r"^seed: expected an int"),
    ([DenseLayer(n_in=4, n_out=8)], {"updater": "adam"}, TypeError, r"^updater: expected"),
    ([DenseLayer(n_in=4, n_out=8)], {"activation": "mish"}, ValueError,
     r"^activation: unknown activation 'mish'"),
    ([DenseLayer(n_in=4, n_out=8)], {"training_workspace_mode": "FAST"}, ValueError,
     r"^training_workspace_mode: unknown workspace mode 'FAST'; expected one of NONE, ENABLED, "
     r"SINGLE, SEPARATE \(or an ndws.WorkspaceMode\)$"),
    ([DenseLayer(n_in=4, n_out=8)], {"dropout": 0.0}, ValueError,
     r"^MultiLayerConfiguration.dropout: must be in \(0, 1\]"),
    ([DenseLayer(n_in=4, n_out=8)], {"l2": float("nan")}, ValueError,
     r"^MultiLayerConfiguration.l2: must be in"),
])
def test_configuration_errors_name_layer_and_field(layers, kw, exc, msg):
    with pytest.raises(exc, match=msg):
        MultiLayerConfiguration(layers, **kw)


@pytest.mark.parametrize("make, exc, msg", [
    (lambda: DenseLayer(n_out=0), ValueError, r"^DenseLayer.n_out: expected an int in \[1, 2\*\*31\], got 0$"),
    (lambda: DenseLayer(n_out=2.0), TypeError, r"^DenseLayer.n_out: expected an int >= 1, got float"),
    (lambda: DenseLayer(n_out=True), TypeError, r"^DenseLayer.n_out: expected an int >= 1, got bool"),
    (lambda: DenseLayer(n_out=1 << 40), ValueError, r"^DenseLayer.n_out: expected an int in"),
    (lambda: DenseLayer(activation=3), ValueError, r"^DenseLayer.activation: unknown activation 3"),
    (lambda: DenseLayer(dropout=1.5), ValueError, r"^DenseLayer.dropout: must be in \(0, 1\]"),
    (lambda: DenseLayer(weight_init="he"), ValueError, r"^DenseLayer.weight_init: unknown weight_init 'he'"),
    (lambda: DenseLayer(l1=-1), ValueError, r"^DenseLayer.l1: must be in \[0, inf\]"),
    (lambda: DenseLayer(bias_init=float("inf")), ValueError, r"^DenseLayer.bias_init: expected a finite"),
    (lambda: DenseLayer(updater=Adam), TypeError, r"^DenseLayer.updater: expected an ndws.nn updater"),
    (lambda: DenseLayer(name=5), TypeError, r"^DenseLayer.name: expected a str"),
    (lambda: OutputLayer(loss_function="fmeasure"), ValueError,
     r"^OutputLayer.loss_function: unknown loss function 'fmeasure'"),
    (lambda: DenseLayer(n_in=3, n_out=2, bogus=1), TypeError, r"unexpected keyword argument 'bogus'"),
])
def test_layer_fields_are_checked_at_construction(make, exc, msg):
    with pytest.raises(exc, match=msg):
        make()


def test_names_in_any_case_and_enum_members():
    assert OutputLayer(loss_function="negativeloglikelihood").loss_function \
        is LossFunction.NEGATIVELOGLIKELIHOOD
    assert DenseLayer(activation="leaky_relu").activation is Activation.LEAKYRELU
    assert DenseLayer(activation="LeakyReLU").activation is Activation.LEAKYRELU
    assert DenseLayer(activation=Activation.GELU).activation is Activation.GELU
    assert DenseLayer(weight_init="xavier").weight_init is WeightInit.XAVIER


class Scale(Layer):
    """A custom layer with its own field (for the JSON round trip)."""
    fields = Layer.fields + ("factor",)

    def __init__(self, factor=2.0, **common):
        super().__init__(**common)
        self.factor = factor


def test_json_round_trip_is_exact():
    conf = MultiLayerConfiguration(
        [DenseLayer(n_in=5, n_out=4, activation="elu", l1=0.01, updater=Sgd(0.5),
                    weight_init="uniform", bias_init=0.1, name="hidden"),
         DropoutLayer(0.75), Scale(factor=3.0), ActivationLayer(activation="tanh"),
         OutputLayer(n_out=2, activation="sigmoid", loss_function="XENT"),
         LossLayer(loss_function="mse", activation="identity")],
        seed=7, updater=Adam(StepSchedule(ScheduleType.EPOCH, 0.01, 0.5, 2)), l2=1e-3,
        training_workspace_mode="SINGLE", inference_workspace_mode="NONE", dtype="float64")
    text = conf.to_json()
    back = MultiLayerConfiguration.from_json(text)
    assert back == conf and back.to_json() == text
    assert json.loads(text)["layers"][2] == {"@class": f"{Scale.__module__}.Scale",
                                             **{f: None for f in Layer.fields}, "factor": 3.0}
    assert [type(l).__name__ for l in back.resolved_layers] == [
        "DenseLayer", "DropoutLayer", "Scale", "ActivationLayer", "OutputLayer", "LossLayer"]


@pytest.mark.parametrize("mutate, msg", [
    (lambda d: d.update(format="other"), r"^configuration: expected a dict with format"),
    (lambda d: d.update(version=99), r"^configuration: unsupported version 99"),
    (lambda d: d.update(extra=1), r"^configuration: unknown fields \['extra'\]$"),
    (lambda d: d.update(layers="x"), r"^configuration.layers: expected a list"),
    (lambda d: d["layers"][0].update({"@class": "os.system"}),
     r"^layers\[0\]: layer: unknown layer class 'os.system'"),
    (lambda d: d["layers"][0].update(colour="red"),
     r"^layers\[0\]: DenseLayer: unknown fields \['colour'\]$"),
    (lambda d: d["layers"][0].update(n_out=-3), r"^layers\[0\]: DenseLayer.n_out: expected"),
])
def test_from_json_refuses_malformed_input(mutate, msg):
    data = mlp(seed=3).to_dict()
    mutate(data)
    with pytest.raises(ValueError, match=msg):
        MultiLayerConfiguration.from_json(json.dumps(data))


@pytest.mark.parametrize("text", ["", "[1, 2]", "null", b"\x89PNG\r\n", "{\"format\": 3"])
def test_from_json_refuses_non_configurations(text):
    with pytest.raises(ValueError, match=r"^configuration: "):
        MultiLayerConfiguration.from_json(text)


def test_configuration_is_frozen_and_copies_layers():
    layer = DenseLayer(n_in=3, n_out=2)
    conf = MultiLayerConfiguration([layer], seed=1)
    layer.n_out = 99                                     # the caller's object, not the config's
    assert conf.layers[0].n_out == 2
    with pytest.raises(AttributeError, match="frozen"):
        conf.seed = 2


@pytest.mark.parametrize("make", [
    lambda: DenseLayer(n_out="8"), lambda: DenseLayer(dropout="0.5"), lambda: DenseLayer(name=3),
    lambda: DenseLayer(updater="adam"), lambda: DenseLayer(bias_init="0"),
    lambda: MultiLayerConfiguration("layers"), lambda: MultiLayerConfiguration([3]),
    lambda: MultiLayerConfiguration([DenseLayer(n_in=2, n_out=2)], updater=Adam),
    lambda: Sgd("0.1"), lambda: StepSchedule("EPOCH", 0.1, 0.5, 1),
])
def test_every_configuration_error_is_a_value_error(make):
    # a wrong type is a TypeError as everywhere in ndws, and a ValueError like every other
    # configuration error, so one `except ValueError` catches them all
    with pytest.raises(ValueError) as info:
        make()
    assert isinstance(info.value, TypeError)
