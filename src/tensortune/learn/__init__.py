"""Shared learning parts: training data, neural predictors, the trainer and its metrics.

One trainer serves every pre-trained or transferable cost model (One-Shot Tuner's predictor,
Fasor's transferable model, Trimmer's filter): data from ``tensortune dataset export``
(:mod:`.data`), nets by name (:mod:`.nets`), training (:mod:`.trainer`), predictors saved as
a schema + state dict and read back without unpickling (:mod:`.predictor`), ranking metrics
(:mod:`.metrics`). Importing this package loads neither PyTorch nor XGBoost; the modules that
need them import them when used.
"""
from __future__ import annotations

from .data import Standardizer, TrainingData, concat, load_training, oversampling_weights
from .metrics import ranking_metrics, spearman
from .predictor import Predictor, PredictorError, load_predictor

__all__ = ["Predictor", "PredictorError", "Standardizer", "TrainingData", "concat", "load_predictor",
           "load_training", "oversampling_weights", "ranking_metrics", "spearman"]
