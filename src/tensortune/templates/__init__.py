"""Schedule templates (each a search space + a schedule), by short name."""
from .base import TEMPLATES, Template, TemplateError, get_template, register_template

__all__ = ["TEMPLATES", "Template", "TemplateError", "get_template", "register_template"]
