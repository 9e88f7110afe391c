"""Networks with every temporary in workspaces (docs/networks.md): `MultiLayerConfiguration`,
`MultiLayerNetwork`, the layers (`DenseLayer`, `OutputLayer`, ..., and `Layer` for custom ones),
the updaters and schedules, `ArrayType` and `LayerWorkspaceMgr` (which workspace each array a
layer makes goes to), `listeners`; and `functional` (``import ndws.nn.functional as F``), the
native activation, loss and updater kernels they are built on."""
from ndws.nn import functional, listeners
from ndws.nn.conf import BackpropType, MultiLayerConfiguration
from ndws.nn.inputs import CNN2DFormat, ConvolutionMode, InputType, PoolingType, RNNFormat
from ndws.nn.network import MultiLayerNetwork
from ndws.nn.layers import (
    LSTM,
    Activation,
    ActivationLayer,
    BatchNormalization,
    Bidirectional,
    CnnLossLayer,
    Convolution1DLayer,
    ConvolutionLayer,
    Cropping2D,
    Deconvolution2D,
    DenseLayer,
    DepthwiseConvolution2D,
    DropoutLayer,
    EmbeddingLayer,
    EmbeddingSequenceLayer,
    GlobalPoolingLayer,
    GravesLSTM,
    LastTimeStep,
    Layer,
    LossFunction,
    LossLayer,
    MaskZeroLayer,
    OutputLayer,
    RnnLossLayer,
    RnnOutputLayer,
    SeparableConvolution2D,
    SimpleRnn,
    Subsampling1DLayer,
    SubsamplingLayer,
    Upsampling2D,
    WeightInit,
    ZeroPaddingLayer,
)
from ndws.nn.preprocessors import (
    CnnToFeedForwardPreProcessor,
    CnnToRnnPreProcessor,
    FeedForwardToCnnPreProcessor,
    FeedForwardToRnnPreProcessor,
    InputPreProcessor,
    MaskState,
    RnnToCnnPreProcessor,
    RnnToFeedForwardPreProcessor,
)
from ndws.nn.updaters import (
    AdaGrad,
    Adam,
    AdamW,
    CycleSchedule,
    ExponentialSchedule,
    Nesterovs,
    RmsProp,
    Schedule,
    ScheduleType,
    Sgd,
    StepSchedule,
    Updater,
)
from ndws.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr, WorkspacesCloseable

__all__ = ["Activation", "ActivationLayer", "AdaGrad", "Adam", "AdamW", "ArrayType",
           "BackpropType", "BatchNormalization", "Bidirectional", "CNN2DFormat", "CnnLossLayer",
           "CnnToFeedForwardPreProcessor", "CnnToRnnPreProcessor", "Convolution1DLayer",
           "ConvolutionLayer", "ConvolutionMode", "Cropping2D", "CycleSchedule",
           "Deconvolution2D", "DenseLayer", "DepthwiseConvolution2D", "DropoutLayer",
           "EmbeddingLayer", "EmbeddingSequenceLayer", "ExponentialSchedule",
           "FeedForwardToCnnPreProcessor", "FeedForwardToRnnPreProcessor", "GlobalPoolingLayer",
           "GravesLSTM", "InputPreProcessor", "InputType", "LSTM", "LastTimeStep", "Layer",
           "LayerWorkspaceMgr", "LossFunction", "LossLayer", "MaskState", "MaskZeroLayer",
           "MultiLayerConfiguration", "MultiLayerNetwork", "Nesterovs", "OutputLayer",
           "PoolingType", "RNNFormat", "RmsProp", "RnnLossLayer", "RnnOutputLayer",
           "RnnToCnnPreProcessor", "RnnToFeedForwardPreProcessor", "Schedule", "ScheduleType",
           "SeparableConvolution2D", "Sgd", "SimpleRnn", "StepSchedule", "Subsampling1DLayer",
           "SubsamplingLayer", "Updater", "Upsampling2D", "WeightInit", "WorkspacesCloseable",
           "ZeroPaddingLayer", "functional", "listeners"]
