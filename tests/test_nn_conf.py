"""ndws.nn.conf and the configuration side of ndws.nn.layers: validation naming the layer and
field, defaults and overrides, n_in inference, the exact JSON round trip."""
import json

import numpy as np
import pytest

import ndws
from ndws.nn import (Activation, ActivationLayer, Adam, CnnToFeedForwardPreProcessor,
                     ConvolutionMode, DenseLayer, DropoutLayer, FeedForwardToCnnPreProcessor,
                     InputType, Layer, LossFunction, LossLayer, MultiLayerConfiguration,
                     OutputLayer, ScheduleType, Sgd, StepSchedule, WeightInit)


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


# -- input types and preprocessors ------------------------------------------------------------

def test_dense_only_json_is_unchanged_by_the_input_type_fields():
    conf = mlp(seed=3)
    assert set(conf.to_dict()) == {"format", "version", "seed", "updater", "activation",
                                   "weight_init", "dropout", "l1", "l2", "weight_decay",
                                   "bias_init", "training_workspace_mode",
                                   "inference_workspace_mode", "dtype", "layers"}
    assert conf.resolved_preprocessors == (None, None, None)
    assert [l.input_type for l in conf.resolved_layers] == [
        InputType.feed_forward(784), InputType.feed_forward(256), InputType.feed_forward(256)]


def test_input_type_sets_n_in_and_inserts_dl4j_preprocessors():
    conf = MultiLayerConfiguration(
        [DenseLayer(n_out=5), ActivationLayer(activation="relu"), OutputLayer(n_out=2,
                                                                             activation="softmax")],
        input_type=InputType.convolutional(3, 4, 2), seed=1)
    assert conf.resolved_preprocessors[0] == CnnToFeedForwardPreProcessor(3, 4, 2)
    assert conf.resolved_preprocessors[1:] == (None, None)
    assert [l.n_in for l in conf.resolved_layers] == [24, 5, 5]
    assert conf.resolved_layers[0].input_type == InputType.feed_forward(24)
    assert conf.input_preprocessors == {}                # only what was given by hand
    # convolutional_flat is rows already: nothing inserted before a dense layer
    flat = MultiLayerConfiguration([DenseLayer(n_out=5), OutputLayer(n_out=2,
                                                                     activation="softmax")],
                                   input_type=InputType.convolutional_flat(3, 4, 2), seed=1)
    assert flat.resolved_preprocessors == (None, None) and flat.resolved_layers[0].n_in == 24
    # NHWC images are flattened in (h, w, c) order by an NHWC preprocessor
    nhwc = MultiLayerConfiguration([OutputLayer(n_out=2, activation="softmax")],
                                   input_type=InputType.convolutional(3, 4, 2, "NHWC"), seed=1)
    assert nhwc.resolved_preprocessors[0] == CnnToFeedForwardPreProcessor(3, 4, 2, "NHWC")


def test_hand_set_preprocessors_win_and_round_trip():
    conf = MultiLayerConfiguration(
        [ActivationLayer(activation="relu"), DenseLayer(n_out=8),
         OutputLayer(n_out=2, activation="softmax")],
        input_preprocessors={0: FeedForwardToCnnPreProcessor(2, 3, 1),
                             1: CnnToFeedForwardPreProcessor(2, 3, 1)}, seed=2,
        convolution_mode="same")
    assert conf.resolved_layers[0].input_type == InputType.convolutional(2, 3, 1)
    assert conf.resolved_layers[0].n_in == 1             # images: n_in is their channels
    assert conf.resolved_layers[1].n_in == 6
    assert conf.resolved_preprocessors[:2] == (FeedForwardToCnnPreProcessor(2, 3, 1),
                                               CnnToFeedForwardPreProcessor(2, 3, 1))
    text = conf.to_json()
    back = MultiLayerConfiguration.from_json(text)
    assert back == conf and back.to_json() == text
    assert back.convolution_mode is ConvolutionMode.SAME
    assert json.loads(text)["input_preprocessors"]["1"]["@class"] == \
        "CnnToFeedForwardPreProcessor"
    typed = MultiLayerConfiguration([DenseLayer(n_out=3)], input_type=InputType.feed_forward(4),
                                    seed=1)
    assert MultiLayerConfiguration.from_json(typed.to_json()) == typed


@pytest.mark.parametrize("layers, kw, exc, msg", [
    ([DenseLayer(n_in=7, n_out=2)], {"input_type": InputType.feed_forward(8)}, ValueError,
     r"^layers\[0\].n_in: 7 does not match the width 8 of the network's input "
     r"\(InputType.feed_forward\(8\)\)$"),
    ([DenseLayer(n_in=7, n_out=2)], {"input_type": InputType.convolutional(2, 2, 2)},
     ValueError, r"^layers\[0\].n_in: 7 does not match the width 8 of its input after "
                 r"CnnToFeedForwardPreProcessor\(2, 2, 2, NCHW\) \(InputType.feed_forward\(8\)\)$"),
    ([DenseLayer(n_in=4, n_out=8), DenseLayer(n_in=9, n_out=2)],
     {"input_preprocessors": {1: FeedForwardToCnnPreProcessor(2, 2, 2)}}, ValueError,
     r"^layers\[1\].n_in: 9 does not match the channels 2 of the output of layers\[0\] after "
     r"FeedForwardToCnnPreProcessor\(2, 2, 2, NCHW\) \(InputType.convolutional\(2, 2, 2\)\)$"),
    ([DenseLayer(n_in=4, n_out=8), DenseLayer(n_out=2)],
     {"input_preprocessors": {1: FeedForwardToCnnPreProcessor(2, 2, 2)}}, ValueError,
     r"^layers\[1\]: DenseLayer takes rows, got InputType.convolutional\(2, 2, 2\)"),
    ([DenseLayer(n_in=4, n_out=2)], {"input_type": "FF"}, TypeError,
     r"^input_type: expected an ndws.nn.InputType"),
    ([DenseLayer(n_in=4, n_out=2)], {"input_preprocessors": [1]}, TypeError,
     r"^input_preprocessors: expected a dict"),
    ([DenseLayer(n_in=4, n_out=2)], {"input_preprocessors": {1: None}}, ValueError,
     r"^input_preprocessors: 1 is not a layer index \(0 to 0\)$"),
    ([DenseLayer(n_in=4, n_out=2)], {"input_preprocessors": {True: None}}, ValueError,
     r"^input_preprocessors: True is not a layer index"),
    ([DenseLayer(n_in=4, n_out=2)], {"input_preprocessors": {0: "flatten"}}, TypeError,
     r"^input_preprocessors\[0\]: expected an ndws.nn.InputPreProcessor, got str$"),
    ([DenseLayer(n_in=4, n_out=2)], {"input_type": InputType.feed_forward(4),
                                      "input_preprocessors": {
                                          0: CnnToFeedForwardPreProcessor(2, 2, 1)}}, ValueError,
     r"^layers\[0\]: CnnToFeedForwardPreProcessor: expected convolutional input"),
    ([DenseLayer(n_in=4, n_out=2)], {"convolution_mode": "valid"}, ValueError,
     r"^convolution_mode: unknown ConvolutionMode 'valid'"),
])
def test_input_type_errors_name_the_layer(layers, kw, exc, msg):
    with pytest.raises(exc, match=msg):
        MultiLayerConfiguration(layers, seed=1, **kw)


@pytest.mark.parametrize("mutate, msg", [
    (lambda d: d.update(input_type={"kind": "CNN", "height": 0, "width": 2, "channels": 1}),
     r"height must be an int in"),
    (lambda d: d.update(input_preprocessors=[1]), r"input_preprocessors: expected a dict"),
    (lambda d: d.update(input_preprocessors={"a": {}}), r"expected layer indices as keys"),
    (lambda d: d.update(input_preprocessors={"0": {"@class": "Evil"}}),
     r"^input_preprocessors\[0\]: preprocessor: unknown class 'Evil'"),
])
def test_from_json_refuses_malformed_input_types(mutate, msg):
    data = mlp(seed=3).to_dict()
    mutate(data)
    with pytest.raises(ValueError, match=msg):
        MultiLayerConfiguration.from_json(json.dumps(data))
