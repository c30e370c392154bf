"""Network building blocks shared by algorithms and policies."""

from robot_rl.nets.mlp import MLP, EnsembleMLP
from robot_rl.nets.vision import ObsEncoder, random_shift

__all__ = ["MLP", "EnsembleMLP", "ObsEncoder", "random_shift"]
