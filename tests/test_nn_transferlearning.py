"""ndws.nn.transferlearning and the frozen layers: DL4J's TransferLearningMLNTest and
FrozenLayerTest ported where they apply (frozen parameters unchanged, n_out_replace shapes and
initialisation, removing and adding layers, the fine-tune configuration), bit-exact freezing
under every updater and regularisation, save/load, TransferLearningHelper, hostile input."""
from __future__ import annotations

import numpy as np
import pytest

from ndws.data.dataset import DataSet
from ndws.nn import (AdaGrad, Adam, AdamW, BatchNormalization, ConvolutionLayer, DenseLayer,
                     InputType, MultiLayerConfiguration, MultiLayerNetwork, Nesterovs,
                     OutputLayer, RmsProp, Sgd, SubsamplingLayer)
from ndws.nn.transferlearning import (FineTuneConfiguration, FrozenLayer,
                                      FrozenLayerWithBackprop, TransferLearning,
                                      TransferLearningHelper)


def _net(seed=1, updater=None, **conf):
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [DenseLayer(n_in=4, n_out=6, activation="tanh", name="first"),
         DenseLayer(n_out=5, activation="relu"),
         DenseLayer(n_out=4, activation="sigmoid"),
         OutputLayer(n_out=3, activation="softmax")],
        seed=seed, updater=updater or Sgd(0.1), **conf))
    net.init()
    return net


def _data(rng, n=32):
    x = rng.standard_normal((n, 4)).astype(np.float32)
    return DataSet(x, np.eye(3, dtype=np.float32)[rng.integers(0, 3, n)])


def _layer_params(net, i):
    return {k: v.numpy() for k, v in net.layers[i].params.items()}


@pytest.mark.parametrize("updater", [Sgd(0.5), Adam(0.05), AdamW(0.05), Nesterovs(0.1),
                                     RmsProp(0.05), AdaGrad(0.1)],
                         ids=lambda u: type(u).__name__)
def test_frozen_parameters_unchanged_bit_for_bit(rng, updater):
    # every updater, with l1, l2, weight decay and dropout on every layer
    net = _net(updater=updater, l1=1e-2, l2=1e-2, weight_decay=1e-2, dropout=0.8)
    new = TransferLearning.Builder(net).set_feature_extractor(1).build()
    frozen = [_layer_params(new, i) for i in (0, 1)]
    top = _layer_params(new, 2)
    data = _data(rng)
    new.fit([data] * 5, epochs=2)
    for i in (0, 1):
        assert type(new.layers[i]) is FrozenLayer
        for k, v in _layer_params(new, i).items():
            assert np.array_equal(v, frozen[i][k]) and v.tobytes() == frozen[i][k].tobytes()
    assert not np.array_equal(_layer_params(new, 2)["W"], top["W"])
    # no updater state for the frozen parameters
    n_frozen = sum(v.size for i in (0, 1) for v in frozen[i].values())
    assert new._updater_state_flat().size == updater.n_state * (new.num_params() - n_frozen)
    # their gradients were never computed: the backward pass stops at layer 2
    assert new._backward_stop == 2 and new.layers[2].input_gradient_needed is False
    grads = new.gradient().numpy()
    assert not grads[:n_frozen].any() and grads[n_frozen:].any()
    # frozen layers add nothing to the score (DL4J's)
    assert new.layers[0].regularization_score() == 0.0


def test_frozen_flag_survives_save_and_load(rng, tmp_path):
    net = _net()
    new = TransferLearning.Builder(net).set_feature_extractor("first").build()
    path = tmp_path / "frozen.zip"
    new.save(path)
    loaded = MultiLayerNetwork.load(path)
    assert [type(layer).__name__ for layer in loaded.layers] == [
        "FrozenLayer", "DenseLayer", "DenseLayer", "OutputLayer"]
    np.testing.assert_array_equal(loaded.params().numpy(), new.params().numpy())
    before = _layer_params(loaded, 0)
    loaded.fit(_data(rng), epochs=3)
    for k, v in _layer_params(loaded, 0).items():
        assert np.array_equal(v, before[k])
    assert loaded.conf == new.conf


def test_new_network_shares_nothing(rng):
    net = _net()
    original = net.params().numpy()
    new = TransferLearning.Builder(net).set_feature_extractor(0).build()
    np.testing.assert_array_equal(new.params().numpy(), original)   # every layer kept: copied
    new.fit(_data(rng), epochs=3)
    new.params()[0:3].assign(np.float32(7))
    np.testing.assert_array_equal(net.params().numpy(), original)
    assert new.conf is not net.conf and new.layers[1] is not net.layers[1]
    assert all(a is not b for a, b in zip(new.conf.layers, net.conf.layers))


def test_n_out_replace_shapes_and_init():
    net = _net()
    new = (TransferLearning.Builder(net).n_out_replace(1, 7, "ZERO")
           .n_out_replace(3, 2, "XAVIER").build())
    shapes = [{k: v.shape for k, v in layer.params.items()} for layer in new.layers]
    assert shapes == [{"W": (4, 6), "b": (6,)}, {"W": (6, 7), "b": (7,)},
                      {"W": (7, 4), "b": (4,)}, {"W": (4, 2), "b": (2,)}]
    # layer 1 and the next one initialised anew with the scheme; layer 0 copied
    assert not _layer_params(new, 1)["W"].any() and not _layer_params(new, 2)["W"].any()
    np.testing.assert_array_equal(_layer_params(new, 0)["W"], _layer_params(net, 0)["W"])
    w = _layer_params(new, 3)["W"]
    assert w.any() and abs(w.std() - np.sqrt(2.0 / 6)) < 0.5
    # a different scheme for the next layer
    new = TransferLearning.Builder(net).n_out_replace(0, 3, "ZERO", "UNIFORM").build()
    assert not _layer_params(new, 0)["W"].any()
    w1 = _layer_params(new, 1)["W"]
    assert w1.shape == (3, 5) and np.abs(w1).max() <= 1 / np.sqrt(3) and w1.any()


def test_remove_and_add_layers(rng):
    net = _net()
    new = (TransferLearning.Builder(net)
           .fine_tune_configuration(FineTuneConfiguration(updater=Adam(1e-2), seed=5))
           .set_feature_extractor(1).remove_layers_from_output(2)
           .add_layer(DenseLayer(n_out=9, activation="relu"))
           .add_layer(OutputLayer(n_out=2, activation="softmax")).build())
    assert [type(l).__name__ for l in new.layers] == ["FrozenLayer", "FrozenLayer",
                                                     "DenseLayer", "OutputLayer"]
    assert new.layers[2].n_in == 5 and new.layers[3].n_out == 2
    assert new.conf.updater == Adam(1e-2) and new.conf.seed == 5
    for i in (0, 1):
        np.testing.assert_array_equal(_layer_params(new, i)["W"], _layer_params(net, i)["W"])
    x = rng.standard_normal((16, 4)).astype(np.float32)
    new.fit(x, rng.integers(0, 2, 16), epochs=2)
    same = TransferLearning.Builder(net).remove_output_layer().add_layer(
        OutputLayer(n_out=3, activation="softmax")).build()
    assert same.num_params() == net.num_params()
    # DL4J's habit: resize the last hidden layer, replace the output layer after it
    wider = (TransferLearning.Builder(net).n_out_replace(2, 7, "XAVIER").remove_output_layer()
             .add_layer(OutputLayer(n_out=2, activation="softmax")).build())
    assert wider.layers[2].n_out == 7 and wider.layers[3].n_in == 7
    np.testing.assert_array_equal(_layer_params(wider, 1)["W"], _layer_params(net, 1)["W"])


def test_fine_tune_configuration_applies_to_trained_layers_only():
    net = _net()
    ft = FineTuneConfiguration(l2=0.5, activation="elu", dropout=0.9, updater=Nesterovs(0.01))
    new = (TransferLearning.Builder(net).fine_tune_configuration(ft).set_feature_extractor(0)
           .build())
    frozen, mid, out = new.layers[0].layer, new.layers[1], new.layers[3]
    assert frozen.activation.value == "tanh" and frozen.l2 is None
    assert mid.activation.value == "elu" and mid.l2 == 0.5 and mid.dropout == 0.9
    assert out.activation.value == "softmax" and out.l2 == 0.5    # the loss keeps its softmax
    assert new.conf.updater == Nesterovs(0.01)


def test_frozen_with_backprop_passes_the_gradient(rng):
    layers = [DenseLayer(n_in=4, n_out=6, activation="tanh"),
              DenseLayer(n_out=5, activation="relu"),
              OutputLayer(n_out=3, activation="softmax")]
    plain = MultiLayerNetwork(MultiLayerConfiguration(layers, seed=3))
    plain.init()
    frozen = MultiLayerNetwork(MultiLayerConfiguration(
        [layers[0], FrozenLayerWithBackprop(layers[1]), layers[2]], seed=3))
    frozen.init()
    np.testing.assert_array_equal(frozen.params().numpy(), plain.params().numpy())
    data = _data(rng)
    assert frozen.compute_gradient_and_score(data) == plain.compute_gradient_and_score(data)
    for name in ("W", "b"):     # the layer below gets the same epsilon
        np.testing.assert_array_equal(frozen.layers[0].grads[name].numpy(),
                                      plain.layers[0].grads[name].numpy())
    middle = _layer_params(frozen, 1)
    first = _layer_params(frozen, 0)
    frozen.fit([data] * 3)
    assert all(np.array_equal(v, middle[k]) for k, v in _layer_params(frozen, 1).items())
    assert not np.array_equal(_layer_params(frozen, 0)["W"], first["W"])


def test_frozen_batch_normalization_keeps_its_statistics(rng):
    net = MultiLayerNetwork(MultiLayerConfiguration(
        [FrozenLayer(DenseLayer(n_in=4, n_out=6)), FrozenLayer(BatchNormalization()),
         OutputLayer(n_out=3, activation="softmax")], seed=2))
    net.init()
    before = _layer_params(net, 1)
    net.fit(_data(rng), epochs=3)
    assert all(np.array_equal(v, before[k]) for k, v in _layer_params(net, 1).items())
    with pytest.raises(ValueError, match=r"layers\[1\]: FrozenLayerWithBackprop cannot wrap a "
                                         r"BatchNormalization: its training pass changes its "
                                         r"parameters \['mean', 'var'\]"):
        MultiLayerConfiguration([DenseLayer(n_in=4, n_out=6),
                                 FrozenLayerWithBackprop(BatchNormalization()),
                                 OutputLayer(n_out=3, activation="softmax")])


def test_transfer_learning_helper(rng):
    net = _net(updater=Adam(0.01))
    data = [_data(rng) for _ in range(3)]
    frozen = TransferLearning.Builder(net).set_feature_extractor(1).build()
    helper = TransferLearningHelper(frozen)
    assert helper.frozen_till == 1 and helper.network is frozen
    featurized = [helper.featurize(ds) for ds in data]
    assert featurized[0].features.shape == (32, 5)
    np.testing.assert_array_equal(helper.output_from_featurized(featurized[0].features).numpy(),
                                  frozen.output(data[0].features).numpy())
    # training the top on the features trains the whole network's parameters in place, as
    # fitting the frozen network would
    twin = TransferLearning.Builder(net).set_feature_extractor(1).build()
    helper.fit_featurized(featurized, epochs=2)
    twin.fit(data, epochs=2)
    np.testing.assert_allclose(frozen.params().numpy(), twin.params().numpy(), rtol=1e-5,
                               atol=1e-6)
    assert helper.unfrozen_mln().num_params() == 5 * 4 + 4 + 4 * 3 + 3
    # frozen_till freezes a copy; the given network is left as it is
    other = TransferLearningHelper(net, frozen_till=0)
    assert type(net.layers[0]) is DenseLayer and other.frozen_till == 0
    assert TransferLearningHelper(net, 0).frozen_till == 0          # DL4J's (net, frozenTill)
    with pytest.raises(TypeError, match="a MultiLayerNetwork takes one frozen_till, got 2"):
        TransferLearningHelper(net, 0, 1)
    with pytest.raises(TypeError, match="unfrozen_graph: this helper splits a "
                                        "MultiLayerNetwork"):
        other.unfrozen_graph()
    with pytest.raises(TypeError, match="output_from_featurized: a network takes one features "
                                        "array, got 2"):
        other.output_from_featurized(featurized[0].features, featurized[0].features)
    with pytest.raises(ValueError, match="the network's first layer is not frozen"):
        TransferLearningHelper(net)
    with pytest.raises(TypeError, match="featurize: expected a DataSet"):
        helper.featurize(data[0].features)


def test_lenet_head_fine_tuning_builds(rng):
    lenet = MultiLayerNetwork(MultiLayerConfiguration(
        [ConvolutionLayer(kernel_size=3, n_out=4, activation="relu"),
         SubsamplingLayer(pooling_type="max", kernel_size=2, stride=2),
         DenseLayer(n_out=16, activation="relu"),
         OutputLayer(n_out=10, activation="softmax")],
        input_type=InputType.convolutional(8, 8, 1), seed=4, updater=Adam(1e-2)))
    lenet.init()
    head = TransferLearning.Builder(lenet).set_feature_extractor(2).build()
    assert head._backward_stop == 3
    x = rng.standard_normal((20, 1, 8, 8)).astype(np.float32)
    before = head.params().numpy()
    head.fit(x, rng.integers(0, 10, 20), epochs=2)
    after = head.params().numpy()
    n_head = 16 * 10 + 10
    np.testing.assert_array_equal(after[:-n_head], before[:-n_head])
    assert not np.array_equal(after[-n_head:], before[-n_head:])
    helper = TransferLearningHelper(head)
    feats = helper.featurize(DataSet(x, np.eye(10, dtype=np.float32)[rng.integers(0, 10, 20)]))
    assert feats.features.shape == (20, 16)


def test_hostile_input():
    net = _net()
    b = TransferLearning.Builder(net)
    with pytest.raises(ValueError, match=r"set_feature_extractor: layer 7 does not exist "
                                         r"\(the network has 4 layers: 0 to 3\)"):
        b.set_feature_extractor(7)
    with pytest.raises(ValueError, match="set_feature_extractor: no layer is named 'nope'"):
        b.set_feature_extractor("nope")
    with pytest.raises(TypeError, match="set_feature_extractor: expected a layer index or "
                                        "name"):
        b.set_feature_extractor(1.0)
    with pytest.raises(ValueError, match="OutputLayer is an output layer.*cannot be frozen"):
        TransferLearning.Builder(net).set_feature_extractor(3).build()
    with pytest.raises(ValueError, match=r"the builder removes every layer of the network "
                                         r"\(4\) and adds none"):
        TransferLearning.Builder(net).remove_layers_from_output(4).build()
    with pytest.raises(ValueError, match="cannot remove 5 layers, the network has 4"):
        TransferLearning.Builder(net).remove_layers_from_output(5)
    with pytest.raises(ValueError, match="set_feature_extractor: layer 2 is removed"):
        TransferLearning.Builder(net).set_feature_extractor(2).remove_layers_from_output(2) \
            .build()
    with pytest.raises(ValueError, match=r"n_out_replace: layer 3 is removed "
                                         r"\(remove_layers_from_output keeps layers 0 to 2\)"):
        TransferLearning.Builder(net).n_out_replace(3, 2).remove_output_layer().build()
    with pytest.raises(ValueError, match="n_out_replace: layer 1 is frozen"):
        TransferLearning.Builder(net).set_feature_extractor(1).n_out_replace(1, 3).build()
    with pytest.raises(ValueError, match="n_out_replace: n_out expected an int"):
        TransferLearning.Builder(net).n_out_replace(1, 0)
    with pytest.raises(TypeError, match="TransferLearning.Builder: expected an initialised"):
        TransferLearning.Builder("net")
    with pytest.raises(RuntimeError, match="call init"):
        TransferLearning.Builder(MultiLayerNetwork(net.conf))
    with pytest.raises(TypeError, match="add_layer: expected an ndws.nn layer"):
        TransferLearning.Builder(net).add_layer("dense")
    with pytest.raises(ValueError, match="FineTuneConfiguration.l2"):
        FineTuneConfiguration(l2=-1.0)
    with pytest.raises(ValueError, match="FineTuneConfiguration.activation: unknown"):
        FineTuneConfiguration(activation="bogus")
    with pytest.raises(TypeError, match="FineTuneConfiguration.updater"):
        FineTuneConfiguration(updater="adam")
    # a FrozenLayer above a trainable layer would hand it no gradient
    with pytest.raises(ValueError, match=r"layers\[1\] \(FrozenLayer\) passes no gradient "
                                         r"down, but layers\[0\] \(DenseLayer\) below it "
                                         r"trains: wrap layers\[1\] in FrozenLayerWithBackprop"):
        MultiLayerNetwork(MultiLayerConfiguration(
            [DenseLayer(n_in=4, n_out=6), FrozenLayer(DenseLayer(n_out=5)),
             OutputLayer(n_out=3, activation="softmax")])).init()
    with pytest.raises(TypeError, match="FrozenLayer.layer: expected an ndws.nn layer"):
        FrozenLayer("dense")
