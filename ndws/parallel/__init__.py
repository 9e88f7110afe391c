"""Data-parallel training and batched inference on threads (docs/parallel.md): ndws' kernels
release the GIL, so worker threads run in parallel, each in its own workspaces.

`ParallelWrapper` trains one `MultiLayerNetwork` on several worker threads (parameter averaging
or one shared parameter set with combined gradients); `ParallelInference` serves one network
to many calling threads (sequential, batched, or in the caller's thread).
"""
from ndws.parallel.modes import InferenceMode, LoadBalanceMode, TrainingMode

__all__ = ["ParallelWrapper", "ParallelInference", "TrainingMode", "InferenceMode",
           "LoadBalanceMode"]


def __getattr__(name):
    # the two engines import on first use (their modules pull in the network stack)
    if name == "ParallelWrapper":
        from ndws.parallel.wrapper import ParallelWrapper
        return ParallelWrapper
    if name == "ParallelInference":
        from ndws.parallel.inference import ParallelInference
        return ParallelInference
    raise AttributeError(f"module 'ndws.parallel' has no attribute {name!r}")
