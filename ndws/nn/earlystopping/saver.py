"""Where early stopping keeps the best (and the latest) model (DL4J's ``EarlyStoppingModelSaver``
and its two implementations).

`InMemoryModelSaver` keeps clones; `LocalFileModelSaver` writes ``bestModel.zip`` and
``latestModel.zip`` in its directory with the network's own `save` (the same zip, written next
to the old file and renamed over it), so the best model of a run survives a crash of the run and
loads with `MultiLayerNetwork.load`.
"""
from __future__ import annotations

import os
from typing import Any

from ndws._fileio import output_directory

__all__ = ["EarlyStoppingModelSaver", "InMemoryModelSaver", "LocalFileModelSaver",
           "LocalFileGraphSaver"]


class EarlyStoppingModelSaver:
    """Base class: `save_best_model(net, score)`, `save_latest_model(net, score)`,
    `get_best_model()` and `get_latest_model()` (None when nothing was saved)."""

    def save_best_model(self, net: Any, score: float) -> None:
        raise NotImplementedError(f"{type(self).__name__}.save_best_model")

    def save_latest_model(self, net: Any, score: float) -> None:
        raise NotImplementedError(f"{type(self).__name__}.save_latest_model")

    def get_best_model(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.get_best_model")

    def get_latest_model(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.get_latest_model")


class InMemoryModelSaver(EarlyStoppingModelSaver):
    """Keeps a clone of the best and of the latest model (parameters, updater state and
    counters: nothing shared with the network that goes on training)."""

    def __init__(self) -> None:
        self._best: Any = None
        self._latest: Any = None

    def save_best_model(self, net, score):
        self._best = net.clone()

    def save_latest_model(self, net, score):
        self._latest = net.clone()

    def get_best_model(self):
        return self._best

    def get_latest_model(self):
        return self._latest

    def __repr__(self) -> str:
        return "InMemoryModelSaver()"


class LocalFileModelSaver(EarlyStoppingModelSaver):
    """Saves the best and the latest model as ``bestModel.zip`` / ``latestModel.zip`` in
    `directory` (created with its parents if it does not exist; a path to a file is refused);
    `save_updater` keeps the updater state, so a loaded best model resumes training exactly.
    `get_best_model` loads the file with the saved network's class (``MultiLayerNetwork`` if
    none was saved in this run: a directory of an earlier run reads too)."""

    BEST = "bestModel.zip"
    LATEST = "latestModel.zip"

    def __init__(self, directory: Any, save_updater: bool = True):
        if not isinstance(save_updater, bool):
            raise TypeError(f"LocalFileModelSaver.save_updater: expected True or False, got "
                            f"{save_updater!r:.40}")
        self.save_updater = save_updater
        self.directory = output_directory("LocalFileModelSaver.directory", directory)
        self._cls: Any = None

    @property
    def best_model_path(self) -> str:
        return os.path.join(self.directory, self.BEST)

    @property
    def latest_model_path(self) -> str:
        return os.path.join(self.directory, self.LATEST)

    def save_best_model(self, net, score):
        self._cls = type(net)
        net.save(self.best_model_path, self.save_updater)

    def save_latest_model(self, net, score):
        self._cls = type(net)
        net.save(self.latest_model_path, self.save_updater)

    def _load(self, path: str) -> Any:
        if not os.path.exists(path):
            return None
        return (self._cls or self._default_class()).load(path, self.save_updater)

    @staticmethod
    def _default_class() -> type:
        # the network type of a directory no model was saved to in this run
        from ndws.nn.network import MultiLayerNetwork
        return MultiLayerNetwork

    def get_best_model(self):
        return self._load(self.best_model_path)

    def get_latest_model(self):
        return self._load(self.latest_model_path)

    def __repr__(self) -> str:
        return f"LocalFileModelSaver({self.directory!r})"


class LocalFileGraphSaver(LocalFileModelSaver):
    """`LocalFileModelSaver` for a `ComputationGraph` (DL4J's ``LocalFileGraphSaver``): the same
    files, and a directory of an earlier run reads as a ComputationGraph."""

    @staticmethod
    def _default_class() -> type:
        from ndws.nn.graph import ComputationGraph
        return ComputationGraph

    def __repr__(self) -> str:
        return f"LocalFileGraphSaver({self.directory!r})"
