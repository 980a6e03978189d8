"""Hugging Face ``transformers`` models as a model source (the optional ``hf`` extra).

Two forms reach :func:`load_hf` through :func:`tensortune.models.importer.load_model`:

* a spec ``hf:MODEL_TYPE[:key=value,...]`` (``hf:vit``, ``hf:convnext:image_size=160``,
  ``hf:gpt2:seq_len=64,n_layer=2``): the architecture of ``MODEL_TYPE`` built from its default
  configuration with the given fields changed, with random weights seeded by ``seed``, each
  convolution's weights then scaled so that its output has unit variance on the example input
  (:func:`give_signal`). Nothing is
  downloaded, so any architecture can be tuned at any size without network access or weights.
  ``image_size`` and ``seq_len`` set the example input's shape (``image_size`` is also the config
  field of that name where the model has one; for whisper ``seq_len`` is the number of frames and
  sets ``max_source_positions`` to half of it); every other key is a config field. A value is an
  int, a float, ``true``/``false``, a list ``[a,b,...]`` or else a string.
* a local ``save_pretrained`` folder (a directory holding ``config.json``), loaded with
  ``from_pretrained`` from local files only, weights as saved (as float32).

The model is wrapped in a module taking the one example tensor and returning one tensor (the
output's ``last_hidden_state``, else its first tensor) and imported with
:func:`~tensortune.models.importer.from_torch`. Vision models take ``pixel_values`` (float32,
``batch x channels x size x size``), text models ``input_ids`` (int64, ``batch x seq_len``, values
within the vocabulary), whisper's encoder ``input_features`` (float32, ``batch x mel bins x
frames``), wav2vec2-like speech models ``input_values`` (float32, ``batch x samples``, ``seq_len``
samples, one second at 16 kHz by default); t5 and whisper are imported as their encoders. Every failure is a one-line
:class:`~tensortune.models.importer.ModelError`.
"""
from __future__ import annotations

import inspect
import logging
import os
import re
from typing import Any, Sequence

import torch

from .importer import Model, ModelError, _first_line, from_torch

log = logging.getLogger(__name__)

PREFIX = "hf:"
MISSING = "hf:... needs Hugging Face transformers: pip install 'tensortune[hf]'"
SHAPE_KEYS = ("image_size", "seq_len")
DEFAULT_SEQ_LEN = 128
DEFAULT_AUDIO_SAMPLES = 16000  # one second at 16 kHz, what wav2vec2's feature encoder was made for
TESTED = ("convnext", "regnet", "resnet", "mobilenet_v2", "mobilevit", "efficientnet", "swin", "levit",
          "poolformer", "vit", "gpt2", "distilbert", "t5", "whisper",
          "deit", "beit", "dinov2", "segformer", "convnextv2", "mobilenet_v1", "focalnet", "pvt_v2", "swiftformer",
          "bert", "roberta", "albert", "electra", "deberta-v2", "opt", "llama", "qwen2", "wav2vec2", "hubert", "wavlm")
"""Model types known to import, compile and match PyTorch (a tiny-config test, or the corpus run of
``bench/corpus.py``, each of whose entries checks the outputs); others may work too."""

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _transformers() -> Any:
    """The ``transformers`` module, or the one-line error saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise ModelError(MISSING) from None
    return transformers


# ---------------------------------------------------------------- spec parsing
def _split_items(text: str) -> list[str]:
    """Split ``key=value,...`` on the commas outside ``[...]``."""
    items, depth, cur = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    return items


def parse_value(text: str) -> Any:
    """A spec value: int, float, bool (``true``/``false``), list ``[a,b]`` of those, else the string."""
    t = text.strip()
    if t.startswith("[") and t.endswith("]"):
        inner = t[1:-1].strip()
        return [parse_value(v) for v in _split_items(inner)] if inner else []
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    for conv in (int, float):
        try:
            return conv(t)
        except ValueError:
            pass
    return t


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``hf:MODEL_TYPE[:key=value,...]`` -> (model type, {key: parsed value}); ModelError if malformed."""
    if not spec.startswith(PREFIX):
        raise ModelError(f"{spec}: not a Hugging Face spec (expected hf:MODEL_TYPE[:key=value,...])")
    model_type, _, rest = spec[len(PREFIX):].partition(":")
    model_type = model_type.strip()
    if not model_type:
        raise ModelError(f"{spec}: no model type (expected hf:MODEL_TYPE[:key=value,...], e.g. hf:vit)")
    fields: dict[str, Any] = {}
    if rest.strip():
        if rest.count("[") != rest.count("]"):
            raise ModelError(f"{spec}: unbalanced brackets in {rest!r}")
        for item in _split_items(rest):
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep or not _KEY.match(key) or not value.strip():
                raise ModelError(f"{spec}: {item.strip()!r} is not key=value")
            if key in fields:
                raise ModelError(f"{spec}: {key} given twice")
            fields[key] = parse_value(value)
    return model_type, fields


def _type_name(v: Any) -> str:
    """A value's kind, as refusals name it."""
    return "true/false" if isinstance(v, bool) else "a list" if isinstance(v, (list, tuple)) else type(v).__name__


def _fits(value: Any, default: Any) -> bool:
    """Whether a parsed value may replace a config default (same kind; an int where a float is)."""
    if default is None:
        return True
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, (list, tuple)):
        if not isinstance(value, list):
            return False
        return all(_fits(v, default[0]) for v in value) if default else True
    if isinstance(default, str):
        return isinstance(value, str)
    return True


def _positive(spec: str, key: str, value: Any) -> int:
    """``value`` of a shape key, refused unless a positive int."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelError(f"{spec}: {key}={value!r} must be a positive integer")
    return value


# ---------------------------------------------------------------- building
def _build_config(spec: str, model_type: str, fields: dict[str, Any], tf: Any) -> Any:
    """The default config of ``model_type`` with ``fields`` set, each checked against it."""
    from transformers import AutoConfig

    known = list(tf.CONFIG_MAPPING.keys())
    if model_type not in known:
        raise ModelError(f"{spec}: unknown Hugging Face model type {model_type!r} (known include: {', '.join(TESTED)}; "
                         f"{len(known)} in all)")
    try:
        default = AutoConfig.for_model(model_type)
    except Exception as e:  # noqa: BLE001 - a config class that cannot be built is bad input
        raise ModelError(f"{spec}: cannot make a {model_type} config: {_first_line(e)}") from None
    names = sorted(k for k in default.to_dict() if not k.startswith("_"))
    for key, value in fields.items():
        if not hasattr(default, key):
            raise ModelError(f"{spec}: {key!r} is not a {model_type} config field (fields: {', '.join(names)})")
        dv = getattr(default, key)
        if not _fits(value, dv):
            raise ModelError(f"{spec}: {key}={value!r} is {_type_name(value)}; the {model_type} field {key} "
                             f"takes {_type_name(dv)} (default {dv!r})")
    try:
        return AutoConfig.for_model(model_type, **fields)
    except Exception as e:  # noqa: BLE001 - the config's own validation
        raise ModelError(f"{spec}: bad {model_type} config: {_first_line(e)}") from None


def _kind(config: Any) -> str:
    """``whisper`` / ``audio`` / ``vision`` / ``text``: which input the model takes."""
    if config.model_type == "whisper":
        return "whisper"
    if hasattr(config, "num_feat_extract_layers"):  # wav2vec2 and its kin: a convolutional feature encoder
        return "audio"
    if hasattr(config, "image_size") or hasattr(config, "num_channels"):
        return "vision"
    return "text"


def _as_int(v: Any) -> int | None:
    """An image size field as one int (some configs store ``[h, w]``)."""
    if isinstance(v, (list, tuple)) and v:
        v = v[0]
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _instantiate(where: str, config: Any, folder: str | None) -> Any:
    """The model (random weights from ``config``, or the folder's weights): the encoder for t5 and
    whisper, ``AutoModel`` otherwise; eager attention where the class accepts it."""
    from transformers import AutoModel, T5EncoderModel, WhisperModel

    cls: Any = {"t5": T5EncoderModel, "whisper": WhisperModel}.get(config.model_type, AutoModel)

    def make(**kw: Any) -> Any:
        if folder is not None:
            return cls.from_pretrained(folder, local_files_only=True, dtype=torch.float32, **kw)
        return cls.from_config(config, **kw) if cls is AutoModel else cls._from_config(config, **kw)

    try:
        try:
            model = make(attn_implementation="eager")
        except (TypeError, ValueError) as e:
            if "attn" not in str(e).lower() and "attention" not in str(e).lower():
                raise
            log.debug("%s: eager attention refused (%s); default attention", where, _first_line(e))
            model = make()
    except Exception as e:  # noqa: BLE001 - e.g. an architecture needing another package
        raise ModelError(f"{where}: cannot build the {config.model_type} model: {type(e).__name__}: "
                         f"{_first_line(e)}") from None
    if config.model_type == "whisper":
        model = model.get_encoder()
    return model.float().eval()


class HFModule(torch.nn.Module):
    """A transformers model called on one named tensor, one tensor out: ``last_hidden_state``, else
    the output's first tensor (``from_torch`` and the reference runners need a plain tensor out).
    Subclasses name ``forward``'s argument after the model's input, which ``torch.export`` gives the
    imported model's input."""

    input_name = ""

    def __init__(self, model: torch.nn.Module, extra: dict[str, Any]) -> None:
        super().__init__()
        self.model = model
        self.extra = dict(extra)
        self.takes_mask = "attention_mask" in inspect.signature(model.forward).parameters

    def run(self, x: torch.Tensor) -> torch.Tensor:
        """``model(**{input_name: x}, **extra)`` reduced to one tensor."""
        kwargs = dict(self.extra)
        if self.input_name == "input_ids" and self.takes_mask:
            # all ones: the whole sequence attends, as with no mask; without one, torch.export traces
            # transformers' packed-sequence detection (a bool cumsum TVM cannot build)
            kwargs["attention_mask"] = torch.ones_like(x)
        out = self.model(**{self.input_name: x}, **kwargs)
        hidden = getattr(out, "last_hidden_state", None)
        if isinstance(hidden, torch.Tensor):
            return hidden
        if isinstance(out, torch.Tensor):
            return out
        values = out.to_tuple() if hasattr(out, "to_tuple") else tuple(out)
        for v in values:
            if isinstance(v, torch.Tensor):
                return v
        raise TypeError(f"{type(self.model).__name__} returned no tensor")


class _PixelValues(HFModule):
    input_name = "pixel_values"

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.run(pixel_values)


class _InputIds(HFModule):
    input_name = "input_ids"

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.run(input_ids)


class _InputValues(HFModule):
    input_name = "input_values"

    def forward(self, input_values: torch.Tensor) -> torch.Tensor:
        return self.run(input_values)


class _InputFeatures(HFModule):
    input_name = "input_features"

    def forward(self, input_features: torch.Tensor) -> torch.Tensor:
        return self.run(input_features)


_WRAPPERS: dict[str, type[HFModule]] = {c.input_name: c for c in (_PixelValues, _InputIds, _InputValues, _InputFeatures)}


def _call_extras(model: Any, config: Any) -> dict[str, Any]:
    """``return_dict=True`` / ``use_cache=False`` where ``forward`` names them (config flags otherwise)."""
    params = inspect.signature(model.forward).parameters
    extra: dict[str, Any] = {}
    if "return_dict" in params:
        extra["return_dict"] = True
    if "use_cache" in params:
        extra["use_cache"] = False
    for cfg in (config, getattr(model, "config", None)):
        if cfg is not None:
            if hasattr(cfg, "return_dict"):
                cfg.return_dict = True
            if hasattr(cfg, "use_cache"):
                cfg.use_cache = False
    return extra


def _example(where: str, config: Any, kind: str, batch: int, seq_len: int | None, image_size: int | None,
             seed: int, input_shapes: dict[str, Sequence[int]] | None) -> tuple[str, Any]:
    """The input's name and a reproducible example tensor."""
    g = torch.Generator().manual_seed(seed)
    if kind == "whisper":
        name, shape = "input_features", (batch, int(config.num_mel_bins), 2 * int(config.max_source_positions))
    elif kind == "audio":
        name, shape = "input_values", (batch, seq_len or DEFAULT_AUDIO_SAMPLES)
    elif kind == "vision":
        size = image_size or _as_int(getattr(config, "image_size", None)) or 224
        name, shape = "pixel_values", (batch, int(getattr(config, "num_channels", 3)), size, size)
    else:
        name, shape = "input_ids", (batch, seq_len or DEFAULT_SEQ_LEN)
    if input_shapes:
        extra = sorted(set(input_shapes) - {name})
        if extra:
            raise ModelError(f"{where}: no input named {extra[0]!r} (the input is {name})")
        given = tuple(int(d) for d in input_shapes[name])
        if len(given) != len(shape) or min(given) < 1:
            raise ModelError(f"{where}: input {name!r} takes {len(shape)} positive dimensions, "
                             f"--input-shape gave {','.join(map(str, given))}")
        shape = given
    if kind == "text":
        vocab = int(getattr(config, "vocab_size", 0) or 0)
        if vocab < 1:
            raise ModelError(f"{where}: the {config.model_type} config has no vocab_size; not a text model")
        limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        if isinstance(limit, int) and shape[1] > limit:
            raise ModelError(f"{where}: seq_len {shape[1]} exceeds the model's {limit} positions")
        return name, torch.randint(0, vocab, shape, generator=g, dtype=torch.int64)
    return name, torch.randn(shape, generator=g, dtype=torch.float32)


#: The layers :func:`unit_variance` scales: convolutions first; linear layers too (``transformers``'
#: GPT-2 ``Conv1D`` among them) where the output still has no signal (:data:`LIVE_OUTPUT`).
CONVOLUTIONS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
LINEAR = (torch.nn.Linear,)
#: An output whose largest magnitude is below this carries no signal an accuracy check can compare.
LIVE_OUTPUT = 1e-2


def _scalable(m: torch.nn.Module, kinds: tuple[type, ...]) -> bool:
    w = getattr(m, "weight", None)
    linear = LINEAR[0] in kinds and type(m).__name__ == "Conv1D"
    return (isinstance(m, kinds) or linear) and isinstance(w, torch.Tensor) and w.dim() >= 2


def unit_variance(module: torch.nn.Module, x: torch.Tensor, kinds: tuple[type, ...] = CONVOLUTIONS) -> int:
    """Scale each layer of ``kinds``' weight and bias, in the order one forward pass on ``x`` runs
    them, so that its output there has unit standard deviation (layer-sequential unit variance);
    returns how many were scaled. The configs' own initialisation (a normal of std 0.02) shrinks a
    deep CNN's activations layer by layer: MobileNetV2's, MobileViT's and EfficientNet's outputs
    were all below 1e-4 (denormal, or zero), which leaves an accuracy check nothing to compare."""
    return _scale(module, x, kinds)[0]


def _scale(module: torch.nn.Module, x: torch.Tensor, kinds: tuple[type, ...]) -> tuple[int, Any]:
    """:func:`unit_variance`'s pass: the layers scaled and the module's output with their new weights
    (each hook hands on its scaled output, so the pass itself computes it)."""
    scaled: set[int] = set()

    def hook(m: torch.nn.Module, _inputs: Any, out: Any) -> Any:
        if id(m) in scaled or not isinstance(out, torch.Tensor) or not out.is_floating_point() or out.numel() < 2:
            return None
        std = float(out.float().std())
        if not 1e-30 < std < float("inf"):
            return None
        scaled.add(id(m))
        m.weight.mul_(1.0 / std)
        if getattr(m, "bias", None) is not None:
            m.bias.mul_(1.0 / std)
        return out / std

    handles = [m.register_forward_hook(hook) for m in module.modules() if _scalable(m, kinds)]
    try:
        with torch.no_grad():
            out = module(x)
    finally:
        for h in handles:
            h.remove()
    return len(scaled), out


def give_signal(module: torch.nn.Module, x: torch.Tensor) -> None:
    """Random weights that carry a signal to the output: the convolutions scaled to unit variance
    (:func:`unit_variance`), and the linear layers too where the output is still below
    :data:`LIVE_OUTPUT` (LeViT's; a transformer's own norms usually keep it, and its attention's
    logits depend on the linear layers' scale: T5's, scaled, put its bf16 error at 9%)."""
    _, out = _scale(module, x, CONVOLUTIONS)
    if float(out.abs().max()) < LIVE_OUTPUT:
        _scale(module, x, CONVOLUTIONS + LINEAR)


def load_hf(source: str, *, batch: int = 1, seed: int = 0,
            input_shapes: dict[str, Sequence[int]] | None = None) -> Model:
    """Import a ``hf:`` spec or a ``save_pretrained`` folder (see the module docstring)."""
    if batch < 1:
        raise ModelError(f"batch size {batch} must be at least 1")
    folder = source if not source.startswith(PREFIX) else None
    where = source
    tf = _transformers()

    seq_len: int | None = None
    image_size: int | None = None
    if folder is None:
        model_type, fields = parse_spec(source)
        shape_keys = {k: fields.pop(k) for k in SHAPE_KEYS if k in fields}
        if "seq_len" in shape_keys:
            seq_len = _positive(source, "seq_len", shape_keys["seq_len"])
        if "image_size" in shape_keys:
            image_size = _positive(source, "image_size", shape_keys["image_size"])
        config_fields = dict(fields)
        default_config = None
        if image_size is not None or seq_len is not None:
            default_config = _build_config(source, model_type, {}, tf)
        if image_size is not None:
            if not (hasattr(default_config, "image_size") or hasattr(default_config, "num_channels")):
                raise ModelError(f"{source}: image_size is for vision models; {model_type} takes seq_len")
            if hasattr(default_config, "image_size"):
                default = default_config.image_size  # an int, or (h, w) in some configs (pvt_v2)
                config_fields["image_size"] = ([image_size] * len(default) if isinstance(default, (list, tuple))
                                               else image_size)
        if seq_len is not None:
            if _kind(default_config) == "vision":
                raise ModelError(f"{source}: seq_len is for text and speech models; {model_type} takes image_size")
            if model_type == "whisper":
                if seq_len % 2:
                    raise ModelError(f"{source}: whisper's seq_len (frames) must be even, got {seq_len}")
                config_fields["max_source_positions"] = seq_len // 2
        config = _build_config(source, model_type, config_fields, tf)
        name = source.replace(os.sep, "_")
    else:
        from transformers import AutoConfig

        try:
            config = AutoConfig.from_pretrained(folder, local_files_only=True)
        except Exception as e:  # noqa: BLE001
            raise ModelError(f"{folder}: not a loadable Hugging Face folder: {_first_line(e)}") from None
        model_type, config_fields = config.model_type, {}
        name = os.path.basename(os.path.normpath(folder)) or "hf"
    kind = _kind(config)
    torch.manual_seed(seed)
    model = _instantiate(where, config, folder)
    extra = _call_extras(model, config)
    input_name, x = _example(where, config, kind, batch, seq_len, image_size, seed, input_shapes)
    module = _WRAPPERS[input_name](model, extra).eval()
    log.info("hf: %s (%s, %s %s)", where, model_type, input_name, tuple(x.shape))
    try:
        with torch.no_grad():
            module(x)  # a shape the model refuses fails here, with the model's own one-line message
    except Exception as e:  # noqa: BLE001
        raise ModelError(f"{where}: the {model_type} model fails on {input_name} {tuple(x.shape)}: "
                         f"{_first_line(e)}") from None
    if folder is None:  # random weights: scaled to carry a signal through every layer
        give_signal(module, x)
    m = from_torch(module, [x], name=name)
    m.source, m.batch = "hf", int(x.shape[0])
    m.meta.update({"hf_model_type": model_type, "hf_config": config_fields, "input_shape": list(x.shape),
                   "hf_input": input_name, **({"hf_folder": os.path.abspath(folder)} if folder else {})})
    return m
