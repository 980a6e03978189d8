"""Feature extractors for cost models: knob, loop-AST, context-relation (curve), TVM per-store."""
from __future__ import annotations

from typing import Any

from .base import FeatureExtractor, KnobFeatures, LoopTree, pad_rows
from .loop_ast import (
    CTX_DIM,
    CURVE_DIM,
    ITERVAR_DIM,
    MAX_LOOPS,
    CurveFeatures,
    ItervarFeatures,
    LoopAnalysis,
    PerStoreFeatures,
    analyze,
    analyze_config,
    curve_features,
    extract_loop_tree,
    itervar_features,
    loop_tree,
)

#: Extractor classes by short name.
FEATURES: dict[str, type[FeatureExtractor]] = {
    "knob": KnobFeatures,
    "itervar": ItervarFeatures,
    "curve": CurveFeatures,
    "perstore": PerStoreFeatures,
}


def get_extractor(name: str, **kwargs: Any) -> FeatureExtractor:
    """A new extractor called ``name`` (see :data:`FEATURES`); ValueError naming the known ones."""
    try:
        cls = FEATURES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown feature extractor {name!r}; known: {', '.join(FEATURES)}") from None
    return cls(**kwargs)


__all__ = [
    "CTX_DIM", "CURVE_DIM", "FEATURES", "ITERVAR_DIM", "MAX_LOOPS", "CurveFeatures", "FeatureExtractor",
    "ItervarFeatures", "KnobFeatures", "LoopAnalysis", "LoopTree", "PerStoreFeatures", "analyze", "analyze_config",
    "curve_features", "extract_loop_tree", "get_extractor", "itervar_features", "loop_tree", "pad_rows",
]
