"""Neural-network building blocks. `ndws.nn.functional` (``import ndws.nn.functional as F``)
holds the native activation, loss and updater kernels; networks come in later issues."""
from ndws.nn import functional

__all__ = ["functional"]
