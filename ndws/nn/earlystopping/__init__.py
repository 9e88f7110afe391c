"""Early stopping (DL4J's ``org.deeplearning4j.earlystopping``; docs/training-tools.md): train
until the held-out score stops improving, keep the best model.

Examples
--------
>>> import numpy as np
>>> from ndws.data.dataset import DataSet
>>> from ndws.nn import MultiLayerConfiguration, MultiLayerNetwork, DenseLayer, OutputLayer, Sgd
>>> from ndws.nn.earlystopping import (EarlyStoppingConfiguration, EarlyStoppingTrainer,
...     DataSetLossCalculator, MaxEpochsTerminationCondition)
>>> x = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=np.float32)
>>> data = DataSet(x, np.eye(2, dtype=np.float32)[[0, 1, 1, 0]])
>>> net = MultiLayerNetwork(MultiLayerConfiguration(
...     [DenseLayer(n_in=2, n_out=8, activation="tanh"),
...      OutputLayer(n_out=2, activation="softmax")], seed=0, updater=Sgd(0.5)))
>>> net.init()
>>> config = EarlyStoppingConfiguration(
...     epoch_termination_conditions=[MaxEpochsTerminationCondition(5)],
...     score_calculator=DataSetLossCalculator([data]))
>>> result = EarlyStoppingTrainer(config, net, [data]).fit(progress=False)
>>> result.termination_reason.name, result.total_epochs, sorted(result.score_vs_epoch)
('EpochTerminationCondition', 5, [0, 1, 2, 3, 4])
"""
from ndws.nn.earlystopping.saver import (EarlyStoppingModelSaver, InMemoryModelSaver,
                                         LocalFileGraphSaver, LocalFileModelSaver)
from ndws.nn.earlystopping.scorecalc import (ClassificationScoreCalculator,
                                             DataSetLossCalculator, RegressionScoreCalculator,
                                             ROCScoreCalculator, ScoreCalculator)
from ndws.nn.earlystopping.termination import (BestScoreEpochTerminationCondition,
                                               EpochTerminationCondition,
                                               InvalidScoreIterationTerminationCondition,
                                               IterationTerminationCondition,
                                               MaxEpochsTerminationCondition,
                                               MaxScoreIterationTerminationCondition,
                                               MaxTimeIterationTerminationCondition,
                                               ScoreImprovementEpochTerminationCondition)
from ndws.nn.earlystopping.trainer import (BaseEarlyStoppingTrainer, EarlyStoppingConfiguration,
                                           EarlyStoppingGraphTrainer, EarlyStoppingListener,
                                           EarlyStoppingResult, EarlyStoppingTrainer,
                                           TerminationReason)

__all__ = ["BaseEarlyStoppingTrainer", "BestScoreEpochTerminationCondition",
           "ClassificationScoreCalculator", "DataSetLossCalculator", "EarlyStoppingConfiguration",
           "EarlyStoppingGraphTrainer", "EarlyStoppingListener", "EarlyStoppingModelSaver",
           "EarlyStoppingResult", "EarlyStoppingTrainer", "EpochTerminationCondition",
           "InMemoryModelSaver", "InvalidScoreIterationTerminationCondition",
           "IterationTerminationCondition", "LocalFileGraphSaver", "LocalFileModelSaver",
           "MaxEpochsTerminationCondition",
           "MaxScoreIterationTerminationCondition", "MaxTimeIterationTerminationCondition",
           "ROCScoreCalculator", "RegressionScoreCalculator", "ScoreCalculator",
           "ScoreImprovementEpochTerminationCondition", "TerminationReason"]
