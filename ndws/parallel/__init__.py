"""Data-parallel training and batched inference on threads (docs/parallel.md): ndws' kernels
release the GIL, so worker threads run in parallel, each in its own workspaces; and
data-parallel training over MPI processes (docs/distributed.md).

`ParallelWrapper` trains one `MultiLayerNetwork` on several worker threads (parameter averaging
or one shared parameter set with combined gradients); `ParallelInference` serves one network
to many calling threads (sequential, batched, or in the caller's thread); `MPITrainer` trains
one network on several processes or machines, one per MPI rank (mpi4py, the ``mpi`` extra:
importing ndws never needs it).
"""
from ndws.parallel.modes import InferenceMode, LoadBalanceMode, TrainingMode

__all__ = ["ParallelWrapper", "ParallelInference", "MPITrainer", "TrainingMode",
           "InferenceMode", "LoadBalanceMode"]


def __getattr__(name):
    # the engines import on first use (their modules pull in the network stack; the MPI
    # trainer needs mpi4py only when it is built)
    if name == "ParallelWrapper":
        from ndws.parallel.wrapper import ParallelWrapper
        return ParallelWrapper
    if name == "MPITrainer":
        from ndws.parallel.mpi import MPITrainer
        return MPITrainer
    if name == "ParallelInference":
        from ndws.parallel.inference import ParallelInference
        return ParallelInference
    raise AttributeError(f"module 'ndws.parallel' has no attribute {name!r}")
