from .base import RuleSet, Violation
from .training import TRAINING_RULES

__all__ = ["TRAINING_RULES", "RuleSet", "Violation"]
