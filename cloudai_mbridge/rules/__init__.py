from .base import PointRejectedError, RuleSet, Violation
from .training import TRAINING_RULES

__all__ = ["TRAINING_RULES", "PointRejectedError", "RuleSet", "Violation"]
