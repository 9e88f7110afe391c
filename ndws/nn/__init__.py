"""Neural-network building blocks: `ndws.nn.functional` (``import ndws.nn.functional as F``)
holds the native activation, loss and updater kernels; `ArrayType` and `LayerWorkspaceMgr` say
which workspace each array a layer makes goes to."""
from ndws.nn import functional
from ndws.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr, WorkspacesCloseable

__all__ = ["ArrayType", "LayerWorkspaceMgr", "WorkspacesCloseable", "functional"]
