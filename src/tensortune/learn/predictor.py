"""A trained predictor on disk: weights, feature schema and dataset summary, never pickled.

A predictor is a folder::

    predictor.json   the schema: kind, op, inputs (curve width, knob width, task-feature names),
                     the input standardisation, the net's hyper-parameters, the dataset summary
                     (tasks, samples, machines), how it was trained and the command that did it
    weights.pt       a PyTorch state dict, read back with ``torch.load(weights_only=True)``;
                     float32, or float16 to halve it (the schema's ``weights_dtype``: the
                     packaged predictors), computed in float32 either way
    xgb.json         (kind ``xgb``) the XGBoost booster in its JSON format

:func:`load_predictor` reads any kind; :meth:`Predictor.rows` builds a task's input rows from
its candidates (curve features, knob values, task features, in the schema's order), so the
same code feeds training data and the tuner's search.
"""
from __future__ import annotations

import json
import pickle  # only for its error type: weights are read with torch.load(weights_only=True)
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..errors import TensortuneError
from .data import Standardizer

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task

#: Schema format written by :meth:`Predictor.save` (read back only when equal).
FORMAT = "tensortune-predictor/1"
SCHEMA_FILE, WEIGHTS_FILE, XGB_FILE = "predictor.json", "weights.pt", "xgb.json"
#: How a neural predictor's weights may be stored (the first is the default).
WEIGHT_DTYPES = ("float32", "float16")


class PredictorError(TensortuneError, ValueError):
    """A predictor folder that cannot be read (one-line message)."""


class Predictor(ABC):
    """Scores input rows ``[curve | knob | task]``; higher is predicted faster."""

    kind: str = ""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self.folder: Path | None = None  # where it was loaded from (files kept beside it live there)

    @property
    def op(self) -> str:
        """The op (template) it was trained for."""
        return str(self.schema["op"])

    @property
    def machine(self) -> dict[str, Any]:
        """The machine its training data was measured on (the first, if several)."""
        machines = self.schema.get("dataset", {}).get("machines") or [{}]
        return dict(machines[0])

    @abstractmethod
    def predict_rows(self, x: np.ndarray) -> np.ndarray:
        """Predicted normalised throughput of raw (unstandardised) input rows (float64 [n])."""

    @abstractmethod
    def _save_weights(self, folder: Path, dtype: str) -> None:
        """Write the learnt parameters into ``folder`` (floating tensors as ``dtype``)."""

    def save(self, folder: str | Path, weights_dtype: str | None = None) -> Path:
        """Write the predictor into ``folder`` (created; files replaced atomically).
        ``weights_dtype`` (one of :data:`WEIGHT_DTYPES`) stores a neural net's weights at that
        precision; None keeps the schema's (float32 for a new predictor)."""
        from ..utils.atomic import atomic_write

        dtype = weights_dtype or self.schema.get("weights_dtype", WEIGHT_DTYPES[0])
        if dtype not in WEIGHT_DTYPES:
            raise PredictorError(f"weights dtype {dtype!r}: expected one of {', '.join(WEIGHT_DTYPES)}")
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self._save_weights(folder, dtype)
        atomic_write(folder / SCHEMA_FILE, json.dumps(self.schema, indent=1))
        return folder

    @property
    def hw_features(self) -> list[str]:
        """Names of the hardware-feature inputs (empty: the predictor reads none)."""
        return list(self.schema["inputs"].get("hw_features", []))

    @property
    def targets(self) -> list[str]:
        """What the outputs are, in order (the first is the ranking score: higher is faster)."""
        return list(self.schema.get("targets", ["normalised_throughput"]))

    def rows(self, task: Task, configs: Sequence[Any], curve: np.ndarray | None = None,
             hw: np.ndarray | None = None) -> np.ndarray:
        """Input rows of ``task``'s ``configs``; ``curve`` (their curve features) when already
        extracted, else extracted here; ``hw``, the machine's hardware features, for a
        predictor that reads them (ValueError when missing or of another width)."""
        from ..features import get_extractor

        inputs = self.schema["inputs"]
        if curve is None:
            curve = get_extractor("curve").extract(task, configs)
        knob = np.asarray([task.space.vectorize(c) for c in configs], dtype=np.float32).reshape(len(configs), -1)
        kw = int(inputs["knob_dim"])
        knob = knob[:, :kw] if knob.shape[1] >= kw else np.pad(knob, ((0, 0), (0, kw - knob.shape[1])))
        feats = task.features
        trow = np.array([feats.get(n, 0.0) for n in inputs["task_features"]], dtype=np.float32)
        names = self.hw_features
        hw_row = np.zeros(0, dtype=np.float32)
        if names:
            if hw is None or len(hw) != len(names):
                raise ValueError(f"the {self.op} predictor reads {len(names)} hardware features; "
                                 f"got {'none' if hw is None else len(hw)}")
            hw_row = np.asarray(hw, dtype=np.float32)
        return np.concatenate([np.asarray(curve, dtype=np.float32).reshape(len(configs), -1), knob,
                               np.tile(trow, (len(configs), 1)), np.tile(hw_row, (len(configs), 1))], axis=1)

    def predict(self, task: Task, configs: Sequence[Any], curve: np.ndarray | None = None,
                hw: np.ndarray | None = None) -> np.ndarray:
        """Predicted ranking score (first output) of ``task``'s ``configs``: higher is faster."""
        if not configs:
            return np.zeros(0)
        return self.predict_rows(self.rows(task, configs, curve, hw))

    def predict_outputs(self, x: np.ndarray) -> np.ndarray:
        """Every output for raw input rows, ``[n, len(targets)]`` (one-output kinds: the score)."""
        return self.predict_rows(x)[:, None]


class NeuralPredictor(Predictor):
    """A PyTorch net (:mod:`.nets`) over standardised rows."""

    def __init__(self, schema: dict[str, Any], net: Any, standardizer: Standardizer) -> None:
        super().__init__(schema)
        self.kind = schema["kind"]
        self.net = net.eval()
        self.standardizer = standardizer
        ts = schema.get("target_standardizer")
        self.target_standardizer = Standardizer.from_json(ts) if ts else None

    def predict_outputs(self, x: np.ndarray) -> np.ndarray:
        import torch

        out = []
        with torch.inference_mode():
            for i in range(0, len(x), 4096):
                y = self.net(torch.from_numpy(self.standardizer(x[i:i + 4096]))).double().numpy()
                out.append(y.reshape(len(y), -1))
        y = np.concatenate(out) if out else np.zeros((0, len(self.targets)))
        if self.target_standardizer is not None:
            y = y * self.target_standardizer.std + self.target_standardizer.mean
        return y

    def predict_rows(self, x: np.ndarray) -> np.ndarray:
        return self.predict_outputs(x)[:, 0]

    def _save_weights(self, folder: Path, dtype: str) -> None:
        import torch

        from ..utils.atomic import atomic_path

        to = getattr(torch, dtype)
        state = {k: v.detach().cpu().to(to) if v.is_floating_point() else v.detach().cpu()
                 for k, v in self.net.state_dict().items()}
        if dtype != WEIGHT_DTYPES[0]:  # the net in memory computes what a reload will
            self.net.load_state_dict(state)
        self.schema["weights_dtype"] = dtype
        with atomic_path(folder / WEIGHTS_FILE, suffix=".pt") as tmp:
            torch.save(state, tmp)


class XGBPredictor(Predictor):
    """An XGBoost regressor on the raw rows (ablation)."""

    kind = "xgb"

    def __init__(self, schema: dict[str, Any], booster: Any) -> None:
        super().__init__(schema)
        self.booster = booster

    def predict_rows(self, x: np.ndarray) -> np.ndarray:
        import xgboost as xgb

        return self.booster.predict(xgb.DMatrix(x)).astype(np.float64)

    def _save_weights(self, folder: Path, dtype: str) -> None:
        from ..utils.atomic import atomic_path

        with atomic_path(folder / XGB_FILE, suffix=".json") as tmp:
            self.booster.save_model(str(tmp))


def layout_of(schema: dict[str, Any]) -> Any:
    """The token layout of a schema's inputs."""
    from .nets import TokenLayout

    i = schema["inputs"]
    return TokenLayout.for_inputs(int(i["curve_dim"]), int(i["knob_dim"]), len(i["task_features"]),
                                  int(i["curve_buffers"]), int(i["curve_globals"]), len(i.get("hw_features", [])))


#: Fields of a schema's ``inputs`` every predictor reads, with their types.
_INPUT_FIELDS = {"curve_dim": int, "knob_dim": int, "task_features": list, "curve_buffers": int, "curve_globals": int}


def _check_schema(folder: Path, schema: dict[str, Any]) -> None:
    """PredictorError naming the first field of ``schema`` that is missing or mistyped."""
    where = folder / SCHEMA_FILE
    if not isinstance(schema.get("op"), str):
        raise PredictorError(f"{where}: field 'op' is missing or not a string")
    inputs = schema.get("inputs")
    if not isinstance(inputs, dict):
        raise PredictorError(f"{where}: field 'inputs' is missing or not an object")
    for name, kind in _INPUT_FIELDS.items():
        v = inputs.get(name)
        if not isinstance(v, kind) or isinstance(v, bool) or (kind is int and v < 0):
            raise PredictorError(f"{where}: field 'inputs.{name}' is missing or not a{'n' if kind is int else ''} "
                                 f"{'non-negative integer' if kind is int else 'list'}")
    if schema.get("kind") != "xgb" and not isinstance(schema.get("standardizer"), dict):
        raise PredictorError(f"{where}: field 'standardizer' is missing or not an object")


def load_predictor(folder: str | Path) -> Predictor:
    """The predictor saved in ``folder``; :class:`PredictorError` naming what is missing or wrong."""
    folder = Path(folder)
    try:
        schema = json.loads((folder / SCHEMA_FILE).read_text())
    except FileNotFoundError:
        raise PredictorError(f"{folder}: no predictor here (no {SCHEMA_FILE})") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise PredictorError(f"{folder / SCHEMA_FILE}: not valid JSON ({exc})") from None
    except OSError as exc:
        raise PredictorError(f"{folder / SCHEMA_FILE}: cannot be read ({exc.strerror or exc})") from None
    if not isinstance(schema, dict) or schema.get("format") != FORMAT:
        raise PredictorError(f"{folder}: not a {FORMAT} predictor (format {schema.get('format')!r})"
                             if isinstance(schema, dict) else f"{folder}: not a predictor schema")
    _check_schema(folder, schema)
    kind = schema.get("kind")
    if kind == "xgb":
        import xgboost as xgb

        booster = xgb.Booster()
        try:
            booster.load_model(str(folder / XGB_FILE))
        except xgb.core.XGBoostError as exc:
            raise PredictorError(f"{folder / XGB_FILE}: cannot be read ({str(exc).splitlines()[0]})") from None
        p = XGBPredictor(schema, booster)
        p.folder = folder
        return p
    import torch

    from .nets import NETS, make_net

    if kind not in NETS:
        raise PredictorError(f"{folder}: unknown predictor kind {kind!r}")
    net, _ = make_net(kind, layout_of(schema), schema.get("net"), len(schema.get("targets", [0])))
    try:
        state = torch.load(folder / WEIGHTS_FILE, map_location="cpu", weights_only=True)
        net.load_state_dict(state)
    except FileNotFoundError:
        raise PredictorError(f"{folder}: {WEIGHTS_FILE} is missing") from None
    except (RuntimeError, ValueError, EOFError, pickle.UnpicklingError) as exc:
        raise PredictorError(f"{folder / WEIGHTS_FILE}: cannot be read ({str(exc).splitlines()[0]})") from None
    p = NeuralPredictor(schema, net, Standardizer.from_json(schema["standardizer"]))
    p.folder = folder
    return p
