"""`FineTuneConfiguration` and `TransferLearning.Builder` (DL4J's
``org.deeplearning4j.nn.transferlearning``): a new network from a trained one, with its lower
layers frozen, its output layers removed or resized, new layers added and new training settings.

The new network shares nothing mutable with the original: its configuration and layers are new
objects and the parameters of every layer it keeps are copied (the updater state starts fresh,
as in DL4J). Layers whose shape changes (`n_out_replace`) and added layers are initialised from
the new configuration's seed.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ndws.nn.conf import MultiLayerConfiguration
from ndws.nn.layers.base import Activation, Layer, WeightInit, _finite, _nonneg
from ndws.nn.layers.wrappers import FrozenLayer
from ndws.nn.preprocessors import InputPreProcessor
from ndws.nn.updaters import Updater
from ndws.workspace import WorkspaceMode

__all__ = ["FineTuneConfiguration", "TransferLearning"]

_MODES = ("training_workspace_mode", "inference_workspace_mode")


def settings(conf: MultiLayerConfiguration, **changes: Any) -> dict:
    """A configuration's network-wide settings as keyword arguments of
    `MultiLayerConfiguration` (everything but the layers and preprocessors), with `changes`."""
    out = {name: getattr(conf, name) for name in (
        "seed", "updater", "activation", "weight_init", "dropout", "l1", "l2", "weight_decay",
        "bias_init", "training_workspace_mode", "inference_workspace_mode", "dtype",
        "convolution_mode", "input_type", "backprop_type", "tbptt_fwd_length",
        "tbptt_back_length")}
    out.update(changes)
    return out


def is_output(layer: Layer) -> bool:
    """Whether `layer` is an output layer (the network's score comes from it)."""
    return hasattr(layer, "compute_score_and_gradient")


def n_out_checked(n_out: Any) -> int:
    """n_out_replace's width, checked (both builders)."""
    if isinstance(n_out, (bool, np.bool_)) or not isinstance(n_out, (int, np.integer)) \
            or not 1 <= n_out <= 1 << 31:
        raise ValueError(f"n_out_replace: n_out expected an int in [1, 2**31], got "
                         f"{n_out!r:.40}")
    return int(n_out)


def changed(layer: Layer, **fields: Any) -> Layer:
    """A copy of `layer` (a configuration) with `fields` set."""
    kwargs = {f: getattr(layer, f) for f in layer.fields}
    kwargs.update(fields)
    return type(layer)(**kwargs)


class FineTuneConfiguration:
    """Settings that replace the original network's in the new one (DL4J's
    ``FineTuneConfiguration``): each one given (not None) is set on every layer that is not
    frozen and has the field, and `updater`, `seed` and the workspace modes become the new
    configuration's. `activation` is not set on output layers (their loss needs theirs: DL4J
    sets it there too, and a softmax output would become, say, a relu).

    Parameters
    ----------
    updater : Updater, optional
        Every trained layer's updater (a layer's own updater is replaced too).
    seed : int, optional
        Seeds the initialisation of new and resized layers, and dropout.
    l1, l2, weight_decay, dropout, bias_init : float, optional
    activation, weight_init : str, optional
    training_workspace_mode, inference_workspace_mode : WorkspaceMode or str, optional
    """

    _LAYER_FIELDS = ("l1", "l2", "weight_decay", "dropout", "activation", "weight_init",
                     "bias_init", "updater")

    def __init__(self, *, updater: Updater | None = None, seed: int | None = None,
                 l1: float | None = None, l2: float | None = None,
                 weight_decay: float | None = None, dropout: float | None = None,
                 activation: Any = None, weight_init: Any = None,
                 bias_init: float | None = None, training_workspace_mode: Any = None,
                 inference_workspace_mode: Any = None):
        owner = "FineTuneConfiguration"
        if updater is not None and not isinstance(updater, Updater):
            raise TypeError(f"{owner}.updater: expected an ndws.nn updater (Sgd, Adam, ...), "
                            f"got {type(updater).__name__}")
        if seed is not None and (isinstance(seed, (bool, np.bool_))
                                 or not isinstance(seed, (int, np.integer))
                                 or not 0 <= seed < 1 << 63):
            raise ValueError(f"{owner}.seed: expected an int in [0, 2**63), got {seed!r:.40}")
        self.updater, self.seed = updater, None if seed is None else int(seed)
        self.l1 = _nonneg(owner, "l1", l1)
        self.l2 = _nonneg(owner, "l2", l2)
        self.weight_decay = _nonneg(owner, "weight_decay", weight_decay)
        self.dropout = _nonneg(owner, "dropout", dropout, 1.0, open_lo=True)
        self.activation = (None if activation is None
                           else Activation.parse(activation, f"{owner}.activation"))
        self.weight_init = (None if weight_init is None
                            else WeightInit.parse(weight_init, f"{owner}.weight_init"))
        self.bias_init = _finite(owner, "bias_init", bias_init)
        for name, mode in (("training_workspace_mode", training_workspace_mode),
                           ("inference_workspace_mode", inference_workspace_mode)):
            if mode is not None:
                try:
                    mode = mode if isinstance(mode, WorkspaceMode) else WorkspaceMode[
                        str(mode).upper()]
                except KeyError:
                    raise ValueError(f"{owner}.{name}: unknown workspace mode {mode!r:.40}; "
                                     f"expected one of {', '.join(WorkspaceMode.__members__)}"
                                     ) from None
            setattr(self, name, mode)

    def apply(self, layer: Layer, fill_only: bool = False) -> Layer:
        """`layer` with this configuration's fields set (`fill_only`: only where it has
        None, for a layer the builder adds)."""
        fields = {}
        for f in self._LAYER_FIELDS:
            v = getattr(self, f)
            if v is None or f not in layer.fields or (fill_only and getattr(layer, f) is not None):
                continue
            if f == "activation" and is_output(layer):
                continue
            fields[f] = v
        return changed(layer, **fields) if fields else layer

    def conf_changes(self) -> dict:
        """What this configuration changes network-wide."""
        out = {k: getattr(self, k) for k in ("updater", "seed") + _MODES}
        return {k: v for k, v in out.items() if v is not None}


class TransferLearning:
    """DL4J's ``TransferLearning``: `TransferLearning.Builder(net)` edits a
    `MultiLayerNetwork` into a new one, `TransferLearning.GraphBuilder(graph)` a
    `ComputationGraph` (docs/training-tools.md).

    Examples
    --------
    >>> from ndws.nn import (MultiLayerConfiguration, MultiLayerNetwork, DenseLayer,
    ...                      OutputLayer, Adam)
    >>> from ndws.nn.transferlearning import TransferLearning, FineTuneConfiguration
    >>> net = MultiLayerNetwork(MultiLayerConfiguration(
    ...     [DenseLayer(n_in=4, n_out=8), DenseLayer(n_out=8),
    ...      OutputLayer(n_out=3, activation="softmax")], seed=1))
    >>> net.init()
    >>> new = (TransferLearning.Builder(net)
    ...        .fine_tune_configuration(FineTuneConfiguration(updater=Adam(1e-3)))
    ...        .set_feature_extractor(1)
    ...        .n_out_replace(2, 5, "XAVIER")
    ...        .build())
    >>> [type(layer).__name__ for layer in new.layers], new.layers[2].n_out
    (['FrozenLayer', 'FrozenLayer', 'OutputLayer'], 5)
    """

    class Builder:
        """Edits of `net` (an initialised MultiLayerNetwork), applied by `build` in DL4J's
        order: `n_out_replace`, then the removals, then the added layers, then the fine-tune
        configuration and the frozen layers. Each method returns the builder. Layers are
        named by index or by their ``name``."""

        def __init__(self, net: Any):
            from ndws.nn.network import MultiLayerNetwork
            if not isinstance(net, MultiLayerNetwork):
                raise TypeError(f"TransferLearning.Builder: expected an initialised "
                                f"ndws.nn.MultiLayerNetwork, got {type(net).__name__}")
            net._check_init()
            self._net = net
            self._n = len(net.conf.layers)
            self._fine_tune: FineTuneConfiguration | None = None
            self._frozen_till: int | None = None
            self._replace: dict[int, tuple] = {}
            self._remove = 0
            self._added: list[Layer] = []
            self._preprocessors: dict[int, InputPreProcessor] = {}

        def _index(self, op: str, layer: Any) -> int:
            # a layer of the original network by index or name
            names = [getattr(layer_, "name", None) for layer_ in self._net.conf.layers]
            if isinstance(layer, str):
                if layer not in names:
                    raise ValueError(f"{op}: no layer is named {layer!r:.40} (the network's "
                                     f"named layers: {[n for n in names if n]})")
                return names.index(layer)
            if isinstance(layer, (bool, np.bool_)) or not isinstance(layer, (int, np.integer)):
                raise TypeError(f"{op}: expected a layer index or name, got "
                                f"{type(layer).__name__} {layer!r:.40}")
            if not 0 <= layer < self._n:
                raise ValueError(f"{op}: layer {layer} does not exist (the network has "
                                 f"{self._n} layers: 0 to {self._n - 1})")
            return int(layer)

        def fine_tune_configuration(self, config: FineTuneConfiguration
                                    ) -> "TransferLearning.Builder":
            if not isinstance(config, FineTuneConfiguration):
                raise TypeError(f"fine_tune_configuration: expected a FineTuneConfiguration, "
                                f"got {type(config).__name__}")
            self._fine_tune = config
            return self

        def set_feature_extractor(self, layer: Any) -> "TransferLearning.Builder":
            """Freeze `layer` and every layer below it (`FrozenLayer`)."""
            self._frozen_till = self._index("set_feature_extractor", layer)
            return self

        def n_out_replace(self, layer: Any, n_out: int, weight_init: Any = "XAVIER",
                          weight_init_next: Any = None) -> "TransferLearning.Builder":
            """Give `layer` `n_out` outputs (its parameters initialised anew with
            `weight_init`) and the next layer the matching n_in (initialised anew with
            `weight_init_next`, default `weight_init`)."""
            i = self._index("n_out_replace", layer)
            n_out = n_out_checked(n_out)
            scheme = WeightInit.parse(weight_init, "n_out_replace.weight_init")
            nxt = scheme if weight_init_next is None else WeightInit.parse(
                weight_init_next, "n_out_replace.weight_init_next")
            self._replace[i] = (int(n_out), scheme, nxt)
            return self

        def remove_output_layer(self) -> "TransferLearning.Builder":
            return self.remove_layers_from_output(1)

        def remove_layers_from_output(self, n: int) -> "TransferLearning.Builder":
            if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 1:
                raise ValueError(f"remove_layers_from_output: expected an int >= 1, got "
                                 f"{n!r:.40}")
            if self._remove + n > self._n:
                raise ValueError(f"remove_layers_from_output: cannot remove {self._remove + n} "
                                 f"layers, the network has {self._n}")
            self._remove += int(n)
            return self

        def add_layer(self, layer: Layer) -> "TransferLearning.Builder":
            """Append `layer` (a configuration: copied) after the kept layers."""
            if not isinstance(layer, Layer):
                raise TypeError(f"add_layer: expected an ndws.nn layer, got "
                                f"{type(layer).__name__}")
            self._added.append(layer.clone())
            return self

        def set_input_preprocessor(self, layer: int, processor: InputPreProcessor
                                   ) -> "TransferLearning.Builder":
            """The preprocessor of layer `layer` of the new network."""
            if isinstance(layer, (bool, np.bool_)) or not isinstance(layer, (int, np.integer)) \
                    or layer < 0:
                raise ValueError(f"set_input_preprocessor: expected a layer index >= 0 of the "
                                 f"new network, got {layer!r:.40}")
            if not isinstance(processor, InputPreProcessor):
                raise TypeError(f"set_input_preprocessor: expected an ndws.nn."
                                f"InputPreProcessor, got {type(processor).__name__}")
            self._preprocessors[int(layer)] = processor.clone()
            return self

        def build(self) -> Any:
            """The new, initialised network."""
            from ndws.nn.network import MultiLayerNetwork
            net, conf = self._net, self._net.conf
            layers = list(conf.resolved_layers)
            fresh = set()                       # indices initialised anew
            frozen = -1 if self._frozen_till is None else self._frozen_till
            kept = len(layers) - self._remove
            for i, (n_out, scheme, nxt) in sorted(self._replace.items()):
                if i >= kept:
                    raise ValueError(f"n_out_replace: layer {i} is removed "
                                     f"(remove_layers_from_output keeps layers 0 to "
                                     f"{kept - 1})")
                if i <= frozen:
                    raise ValueError(f"n_out_replace: layer {i} is frozen by "
                                     f"set_feature_extractor({frozen}): its shape cannot change")
                if isinstance(layers[i], FrozenLayer):
                    raise ValueError(f"n_out_replace: layer {i} is frozen "
                                     f"({type(layers[i]).__name__}): its shape cannot change")
                if "weight_init" not in layers[i].fields or not layers[i].has_weights:
                    raise ValueError(f"n_out_replace: layer {i} ({type(layers[i]).__name__}) "
                                     f"has no n_out to replace")
                layers[i] = changed(layers[i], n_out=n_out, weight_init=scheme)
                fresh.add(i)
                if i + 1 < kept:                # (a removed next layer needs nothing)
                    after = layers[i + 1]
                    if not after.has_weights or isinstance(after, FrozenLayer):
                        raise ValueError(f"n_out_replace: layer {i + 1} "
                                         f"({type(after).__name__}) after layer {i} takes its "
                                         f"width without an n_in of its own; replace the "
                                         f"layers from there (remove_layers_from_output, "
                                         f"add_layer)")
                    layers[i + 1] = changed(after, n_in=None, weight_init=nxt)
                    fresh.add(i + 1)
            layers = layers[:kept]
            if not layers and not self._added:
                raise ValueError(f"build: the builder removes every layer of the network "
                                 f"({self._n}) and adds none")
            if self._frozen_till is not None and self._frozen_till >= kept:
                raise ValueError(f"set_feature_extractor: layer {self._frozen_till} is removed "
                                 f"(remove_layers_from_output keeps layers 0 to {kept - 1})")
            ft = self._fine_tune
            out = []
            for i, layer in enumerate(layers + self._added):
                if i <= frozen or isinstance(layer, FrozenLayer):
                    out.append(layer if isinstance(layer, FrozenLayer) else FrozenLayer(layer))
                elif ft is not None:
                    out.append(ft.apply(layer, fill_only=i >= kept))
                else:
                    out.append(layer)
            pres = {i: p for i, p in conf.input_preprocessors.items() if i < kept}
            for i, p in self._preprocessors.items():
                if i >= len(out):
                    raise ValueError(f"set_input_preprocessor: layer {i} does not exist in the "
                                     f"new network ({len(out)} layers)")
                pres[i] = p
            changes = ft.conf_changes() if ft is not None else {}
            new_conf = MultiLayerConfiguration(out, input_preprocessors=pres,
                                               **settings(conf, **changes))
            new = MultiLayerNetwork(new_conf)
            new.init()
            # the kept layers' parameters, copied (the rest keep their fresh initialisation)
            for i in range(kept):
                if i in fresh:
                    continue
                mine, theirs = net.layers[i].params, new.layers[i].params
                for name, view in theirs.items():
                    view.assign(mine[name])
            return new
