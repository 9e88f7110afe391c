"""`TransferLearningHelper` (DL4J's): compute the frozen layers' output once ("featurize"), then
train the unfrozen layers on it, so every epoch after the first costs only the unfrozen layers'
passes (docs/training-tools.md)."""
from __future__ import annotations

from typing import Any

from ndws.data.dataset import DataSet
from ndws.nn.conf import MultiLayerConfiguration
from ndws.nn.layers.wrappers import FrozenLayer
from ndws.nn.transferlearning.builder import TransferLearning, settings

__all__ = ["TransferLearningHelper"]


class TransferLearningHelper:
    """The frozen bottom and the trainable top of a network, as two networks.

    Parameters
    ----------
    net : MultiLayerNetwork
        Initialised; its lowest layers frozen (`FrozenLayer`), or see `frozen_till`.
    frozen_till : int or str, optional
        Freeze layers 0 to `frozen_till` first: the helper then works on a new network,
        ``TransferLearning.Builder(net).set_feature_extractor(frozen_till).build()`` (DL4J
        freezes the given network in place; ndws leaves it as it is).

    Attributes
    ----------
    network : MultiLayerNetwork
        The whole network (`net`, or the frozen copy). Training the unfrozen part trains its
        parameters in place: the unfrozen network's parameters are views of its buffer.
    """

    def __init__(self, net: Any, frozen_till: Any = None):
        from ndws.nn.network import MultiLayerNetwork
        if not isinstance(net, MultiLayerNetwork):
            raise TypeError(f"TransferLearningHelper: expected an initialised "
                            f"ndws.nn.MultiLayerNetwork, got {type(net).__name__}")
        net._check_init()
        if frozen_till is not None:
            net = TransferLearning.Builder(net).set_feature_extractor(frozen_till).build()
        layers = net.layers
        frozen = [isinstance(layer, FrozenLayer) for layer in layers]
        if not frozen[0]:
            raise ValueError("TransferLearningHelper: the network's first layer is not frozen "
                             "(give frozen_till, or freeze its lowest layers with "
                             "TransferLearning.Builder.set_feature_extractor)")
        k = frozen.index(False) - 1 if False in frozen else len(frozen) - 1
        if any(frozen[k + 1:]):
            j = frozen.index(True, k + 1)
            raise ValueError(f"TransferLearningHelper: layer {j} is frozen above the "
                             f"trainable layer {k + 1}: the frozen layers must be the lowest")
        self.network = net
        self.frozen_till = k
        conf = net.conf
        split = sum(size for layer, _, _, _, size in net._layout if layer.index <= k)
        pres = conf.resolved_preprocessors
        head = MultiLayerConfiguration(
            conf.resolved_layers[:k + 1],
            input_preprocessors={i: p for i, p in enumerate(pres[:k + 1]) if p is not None},
            **settings(conf))
        self._frozen = MultiLayerNetwork(head)
        self._frozen._build(net.params()[:split], share=True)
        last = conf.resolved_layers[k]
        tail = MultiLayerConfiguration(
            conf.resolved_layers[k + 1:],
            input_preprocessors={i: p for i, p in enumerate(pres[k + 1:]) if p is not None},
            **settings(conf, input_type=last.output_type(last.input_type)))
        self._unfrozen = MultiLayerNetwork(tail)
        self._unfrozen._build(net.params()[split:], share=False, sample=False, adopt=True)

    def featurize(self, ds: DataSet) -> DataSet:
        """`ds` with its features replaced by the frozen layers' output (detached; its labels
        and masks as they are)."""
        if not isinstance(ds, DataSet):
            raise TypeError(f"featurize: expected a DataSet, got {type(ds).__name__}")
        out = self._frozen.output(ds.features, features_mask=ds.features_mask)
        return DataSet(out, ds.labels, ds.features_mask, ds.labels_mask)

    def fit_featurized(self, data: Any, labels: Any = None, **fit_options: Any) -> Any:
        """Train the unfrozen layers on featurized data (what `MultiLayerNetwork.fit` takes,
        with its options); returns the History."""
        return self._unfrozen.fit(data, labels, **fit_options)

    def output_from_featurized(self, features: Any) -> Any:
        """The network's output for featurized input."""
        return self._unfrozen.output(features)

    def unfrozen_mln(self) -> Any:
        """The network of the unfrozen layers (its parameters are views of `network`'s)."""
        return self._unfrozen
