from . import layers
from ._ops import ops

__all__ = ["layers"]
