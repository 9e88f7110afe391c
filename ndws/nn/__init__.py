"""Networks with every temporary in workspaces (docs/networks.md): `MultiLayerConfiguration`,
`MultiLayerNetwork`, the layers (`DenseLayer`, `OutputLayer`, ..., and `Layer` for custom ones),
the updaters and schedules, `ArrayType` and `LayerWorkspaceMgr` (which workspace each array a
layer makes goes to), `listeners`; and `functional` (``import ndws.nn.functional as F``), the
native activation, loss and updater kernels they are built on."""
from ndws.nn import functional, listeners
from ndws.nn.conf import MultiLayerConfiguration
from ndws.nn.inputs import CNN2DFormat, ConvolutionMode, InputType, PoolingType, RNNFormat
from ndws.nn.network import MultiLayerNetwork
from ndws.nn.layers import (
    Activation,
    ActivationLayer,
    BatchNormalization,
    CnnLossLayer,
    Convolution1DLayer,
    ConvolutionLayer,
    Cropping2D,
    Deconvolution2D,
    DenseLayer,
    DepthwiseConvolution2D,
    DropoutLayer,
    GlobalPoolingLayer,
    Layer,
    LossFunction,
    LossLayer,
    OutputLayer,
    SeparableConvolution2D,
    Subsampling1DLayer,
    SubsamplingLayer,
    Upsampling2D,
    WeightInit,
    ZeroPaddingLayer,
)
from ndws.nn.preprocessors import (
    CnnToFeedForwardPreProcessor,
    FeedForwardToCnnPreProcessor,
    InputPreProcessor,
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
           "BatchNormalization", "CNN2DFormat", "CnnLossLayer", "CnnToFeedForwardPreProcessor",
           "Convolution1DLayer", "ConvolutionLayer", "ConvolutionMode", "Cropping2D",
           "CycleSchedule", "Deconvolution2D", "DenseLayer", "DepthwiseConvolution2D",
           "DropoutLayer", "ExponentialSchedule", "FeedForwardToCnnPreProcessor",
           "GlobalPoolingLayer", "InputPreProcessor", "InputType", "Layer", "LayerWorkspaceMgr",
           "LossFunction", "LossLayer", "MultiLayerConfiguration", "MultiLayerNetwork",
           "Nesterovs", "OutputLayer", "PoolingType", "RNNFormat", "RmsProp", "Schedule",
           "ScheduleType", "SeparableConvolution2D", "Sgd", "StepSchedule", "Subsampling1DLayer",
           "SubsamplingLayer", "Updater", "Upsampling2D", "WeightInit", "WorkspacesCloseable",
           "ZeroPaddingLayer", "functional", "listeners"]
