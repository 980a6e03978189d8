"""Schedule templates (each a search space + a schedule), by short name (:mod:`.registry`)."""
from .registry import TEMPLATES, Template, TemplateError, get_template, register_template

__all__ = ["TEMPLATES", "Template", "TemplateError", "get_template", "register_template"]
