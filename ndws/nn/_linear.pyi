# Typing stub for ndws.nn._linear (the public surface is ndws.nn.functional).
from typing import Any, Literal, overload

import numpy as np
import numpy.typing as npt

from ndws._core import NDArray

_In = NDArray | npt.ArrayLike
_Out = NDArray | np.ndarray | None
_Approx = Literal["none", "tanh"]
_Reduction = Literal["mean", "sum", "none"]

def linear(x: Any, w: Any, b: Any = ..., activation: str | None = ..., out: Any = ...,
           **params: Any) -> NDArray: ...
