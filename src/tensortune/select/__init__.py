"""Selectors: which scored candidates to measure (top-k, diversity-aware, epsilon-greedy)."""
from .selectors import (DIVERSITY_ALPHA, DIVERSITY_LAMBDA, EPSILON, SELECTORS, diversity_select, epsilon_mix,
                        objective, top_k)

__all__ = ["DIVERSITY_ALPHA", "DIVERSITY_LAMBDA", "EPSILON", "SELECTORS", "diversity_select", "epsilon_mix",
           "objective", "top_k"]
