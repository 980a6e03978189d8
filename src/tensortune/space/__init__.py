"""Search spaces: knobs and the ConfigSpace they form."""
from .knobs import AnnotateKnob, ChoiceKnob, Knob, ReorderKnob, SplitKnob, knob_from_json
from .space import Config, ConfigSpace

__all__ = ["AnnotateKnob", "ChoiceKnob", "Config", "ConfigSpace", "Knob", "ReorderKnob", "SplitKnob", "knob_from_json"]
