"""What every stage is: validated parameters, spec propagation, per-backend implementations.

A stage *family* lives in one module of this package (``fir.py``, ``fft.py``...).
It defines a :class:`Stage` subclass with

* ``type``: the YAML ``type:`` name;
* ``Params``: a pydantic model of its parameters (the catalog and YAML validation
  read it: field defaults, descriptions, constraints);
* ``output_spec(spec_in)``: the format it produces, or a :class:`ConfigError`
  saying what input it needs;
* ``cpu(spec_in)``: a fresh :class:`CpuProcessor` that owns the streaming state.

A stage that reads several inputs in a graph (``add``, ``multiply``, ``combine``: docs/graphs.md)
says so in ``input_count`` (least, most); its ``output_spec`` and ``cpu`` then take the list of
its inputs' specs, its processor's ``process`` the list of their blocks, and inputs that disagree
raise :class:`InputMismatch` naming the two.

The CUDA implementation of a stage lives in ``native/ops``; its glue is in
``pygpukit_dsp/backends/cuda.py``.
"""

from __future__ import annotations

import abc
import difflib
from pathlib import Path
from typing import Annotated, Any, ClassVar, Protocol

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainSerializer, ValidationError

from ..errors import ConfigError
from ..registry import Registry
from ..signal import SignalSpec


class StageParams(BaseModel):
    """Base of every stage's parameter model: unknown keys are errors, values are frozen, and no
    number is NaN or infinite (sources, sinks and QoS share these rules).

    ``defer_build``: a model's validator is built when it first validates, so listing the catalog
    (``gk-stream stages``) or importing a stage module builds none."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True,
                              allow_inf_nan=False, defer_build=True)


# ---------------------------------------------------------------------------
# Array-valued parameters (taps, matrices). YAML holds them as (nested) lists; complex
# values are written as strings such as "0.5-1j". In Python they may be any array-like.


def _parse_complex(v: Any) -> complex:
    if isinstance(v, str):
        return complex(v.replace(" ", "").replace("i", "j"))
    return complex(v)


def _to_real_array(v: Any) -> np.ndarray:
    if isinstance(v, (str, bytes)):
        raise ValueError("expected a list of numbers, got a string")
    try:
        a = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: an int beyond float64
        raise ValueError(f"expected a list of real numbers ({exc})") from None
    if not np.all(np.isfinite(a)):
        raise ValueError("values must be finite (no NaN or inf)")
    return a


def _to_number_array(v: Any) -> np.ndarray:
    """Real or complex array; strings are parsed as complex numbers."""
    if isinstance(v, np.ndarray) and v.dtype.kind in "fciu":
        a = v.astype(np.complex128 if v.dtype.kind == "c" else np.float64)
    else:
        try:
            a = np.asarray(v, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            try:
                a = np.vectorize(_parse_complex, otypes=[np.complex128])(np.asarray(v, dtype=object))
            except (TypeError, ValueError, OverflowError) as exc:
                raise ValueError(f"expected numbers or complex strings like '1-2j' ({exc})") from None
    if not np.all(np.isfinite(a)):
        raise ValueError("values must be finite (no NaN or inf)")
    return a


def _array_to_yaml(a: np.ndarray) -> Any:
    if np.iscomplexobj(a):
        return np.vectorize(lambda z: repr(complex(z)).strip("()"), otypes=[object])(a).tolist()
    return a.tolist()


RealArray = Annotated[np.ndarray, BeforeValidator(_to_real_array), PlainSerializer(_array_to_yaml)]
"""A real float64 array parameter; serialises to nested lists."""

NumberArray = Annotated[np.ndarray, BeforeValidator(_to_number_array), PlainSerializer(_array_to_yaml)]
"""A real or complex array parameter; complex values serialise to strings like '1-2j'."""


# ---------------------------------------------------------------------------


class CpuProcessor(Protocol):
    """A running CPU implementation of one stage. It owns the stage's streaming state."""

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        """Process one block and return the output block.

        ``x`` has the input spec's block shape, except that the last block of a
        stream (``final=True``) may be shorter along the streaming axis. Stages
        whose output count per input is fractional (stft, resample, channelizer,
        average) zero-pad the final block to emit the documented total.
        """

    def reset(self) -> None:
        """Forget all streaming state (as if freshly created)."""


class InputMismatch(ConfigError):
    """The inputs of a stage with several inputs disagree: input ``other`` (0-based) differs from
    input ``first``; the message says in what. The graph names both inputs when it reports it."""

    def __init__(self, message: str, *, first: int, other: int, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.first, self.other = first, other


class Stage(abc.ABC):
    """A stage of a pipeline: validated parameters, spec propagation, per-backend implementations.

    Every subclass is built with keyword parameters, one per field of its ``Params`` model
    (``inspect.signature`` and ``help()`` list them), or with one ready ``Params`` instance.
    """

    type: ClassVar[str] = ""
    Params: ClassVar[type[StageParams]] = StageParams
    summary: ClassVar[str] = ""
    # How many inputs the stage reads: (least, most), most None for any number. A stage whose most
    # is not 1 takes lists: output_spec(specs), cpu(specs) and its processor's process(blocks, final).
    input_count: ClassVar[tuple[int, int | None]] = (1, 1)

    @classmethod
    def takes_several(cls) -> bool:
        """True when the stage reads a list of inputs (``input_count``'s most is not 1)."""
        return cls.input_count[1] != 1

    @classmethod
    def inputs_text(cls) -> str:
        """How many inputs it takes, in words: '1', '2 or more', '2 to 4'."""
        least, most = cls.input_count
        if most is None:
            return f"{least} or more"
        return str(least) if least == most else f"{least} to {most}"

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        from .params_doc import install_constructor_doc

        install_constructor_doc(cls)  # signature and docstring from the Params model

    def __init__(self, params: StageParams | None = None, *, name: str | None = None,
                 base_dir: str | Path | None = None, **kwargs: Any):
        self.base_dir = Path(base_dir) if base_dir is not None else Path.cwd()
        if params is None:
            params = validate_params(self.Params, kwargs, base_dir=self.base_dir,
                                     what=f"stage '{name or self.type}' ({self.type})")
        elif kwargs:
            raise TypeError("pass either a Params instance or keyword parameters, not both")
        self.params = params
        self.name = name or self.type
        self.where: str | None = None  # FILE:LINE:COL of the stage in its YAML file, if any

    # -- spec propagation -------------------------------------------------
    @abc.abstractmethod
    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        """Return the output format for input ``spec``; raise ConfigError if ``spec`` is unusable."""

    # -- implementations --------------------------------------------------
    @abc.abstractmethod
    def cpu(self, spec: SignalSpec) -> CpuProcessor:
        """A fresh CPU processor for input ``spec`` (already validated by output_spec)."""

    def state_bytes(self, spec: SignalSpec) -> int:
        """About how many bytes the stage holds besides its output block for input ``spec``
        (histories, delay lines, filters, work arrays); the memory check before the first block
        (:func:`pygpukit_dsp.limits.check_memory`) adds it up. Must not allocate."""
        return 0

    # -- helpers for subclasses ------------------------------------------
    def resolve_path(self, p: str | Path) -> Path:
        """Resolve a file parameter against the YAML file's folder (or the cwd)."""
        p = Path(p).expanduser()
        return p if p.is_absolute() else self.base_dir / p

    @staticmethod
    def require(spec: SignalSpec, *, domain: str | None = None, dtype: str | None = None) -> None:
        if domain is not None and spec.domain != domain:
            got = "frames (after fft/stft)" if spec.domain == "frames" else "time-domain samples"
            raise ConfigError(f"needs {domain}-domain input, got {got}")
        if dtype is not None and spec.dtype != dtype:
            raise ConfigError(f"needs {dtype} input, got {spec.dtype}")

    # -- serialisation ----------------------------------------------------
    def to_config(self) -> dict[str, Any]:
        """The YAML mapping for this stage (``type``, ``name`` if set, non-default params)."""
        cfg: dict[str, Any] = {"type": self.type}
        if self.name != self.type:
            cfg["name"] = self.name
        cfg.update(params_config(self.params))
        return cfg

    def __repr__(self) -> str:
        params = params_repr(self.params)
        return f"{type(self).__name__}(name={self.name!r}{', ' if params else ''}{params})"


# ---------------------------------------------------------------------------
# Parameter validation shared by stages, sources and sinks.


def _is_default(value: Any, default: Any) -> bool:
    if isinstance(value, np.ndarray) or isinstance(default, np.ndarray):
        # pydantic's exclude_defaults would evaluate `array == None` and fail
        return default is not None and np.array_equal(value, default)
    try:
        return bool(value == default)
    except (ValueError, TypeError):
        return False


def params_config(params: BaseModel) -> dict[str, Any]:
    """The non-default parameters of ``params`` as plain YAML data, keyed by alias.

    Like ``model_dump(mode="json", exclude_defaults=True, exclude_none=True)``, but safe
    for array-valued parameters; nested parameter models are reduced the same way.
    """
    data = params.model_dump(mode="json", by_alias=True, exclude_none=True)
    out: dict[str, Any] = {}
    for name, field in type(params).model_fields.items():
        key = field.alias or name
        if key not in data:
            continue
        value = getattr(params, name)
        if _is_default(value, field.get_default(call_default_factory=True)):
            continue
        out[key] = params_config(value) if isinstance(value, BaseModel) else data[key]
    return out


def _shown_value(value: Any) -> str:
    if isinstance(value, np.ndarray):
        if value.size <= 8:
            return repr(_array_to_yaml(value))
        return f"array(shape={value.shape}, dtype={value.dtype})"  # a long array is not read in a repr
    if isinstance(value, BaseModel):
        return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in params_config(value).items()) + "}"
    if callable(value):
        return f"<function {getattr(value, '__qualname__', type(value).__name__)}>"
    return repr(value)


def params_repr(params: BaseModel) -> str:
    """``key=value`` for each non-default parameter, as the constructor takes them (a repr's body)."""
    parts = []
    for name, field in type(params).model_fields.items():
        value = getattr(params, name)
        if value is None or _is_default(value, field.get_default(call_default_factory=True)):
            continue
        parts.append(f"{name}={_shown_value(value)}")
    return ", ".join(parts)


def did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str | None:
    """A 'did you mean ...?' hint for a misspelt name, or None."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None


def _loc_text(loc: tuple) -> str:
    return ".".join(str(p) for p in loc) if loc else "(parameters)"


def pydantic_errors(exc: ValidationError, model: type[BaseModel], what: str) -> list[ConfigError]:
    """Turn a pydantic ValidationError into ConfigErrors carrying the key path of each problem."""
    out: list[ConfigError] = []
    unions: dict[tuple, list[str]] = {}
    for err in exc.errors(include_url=False):
        loc = tuple(err.get("loc", ()))
        kind = err.get("type", "")
        if kind == "extra_forbidden":
            # did-you-mean against the fields of the (possibly nested) model at that place
            fields = _fields_at(model, loc[:-1])
            hint = did_you_mean(str(loc[-1]), fields) or (
                f"known parameters: {', '.join(fields)}" if fields else None)
            out.append(ConfigError(f"{what}: unknown parameter '{_loc_text(loc)}'", hint=hint, path=loc))
        elif kind == "missing":
            out.append(ConfigError(f"{what}: missing required parameter '{_loc_text(loc)}'", path=loc))
        else:
            msg = err.get("msg", "invalid value")
            msg = msg.removeprefix("Value error, ")
            n = _field_prefix(model, loc)
            if n < len(loc):  # one error per branch of a union ('cpu.constrained-int', "cpu.literal['auto']")
                key = loc[:n]
                if out and out[-1].path == key and key in unions:
                    unions[key].append(msg)
                    first, *rest = unions[key]
                    joined = first + "".join(f"; or {m.removeprefix('Input should be ')}" for m in rest)
                    out[-1] = ConfigError(f"{what}: {_loc_text(key)}: {joined}", path=key)
                    continue
                unions[key] = [msg]
                loc = key
            out.append(ConfigError(f"{what}: {_loc_text(loc)}: {msg}", path=loc))
    return out


def _field_prefix(model: type[BaseModel], loc: tuple) -> int:
    """How much of a pydantic error location names fields and list items; what follows is the
    branch of a union that pydantic tried (``constrained-int``, ``literal['auto']``)."""
    current: Any = model
    for i, key in enumerate(loc):
        if isinstance(key, int):
            continue
        fields = getattr(current, "model_fields", None)
        if fields is None:
            return i
        field = fields.get(key) or next((f for f in fields.values() if f.alias == key), None)
        if field is None:
            return i
        ann = field.annotation
        current = next((c for c in (ann, *getattr(ann, "__args__", ()))
                        if isinstance(c, type) and issubclass(c, BaseModel)), None)
    return len(loc)


def _fields_at(model: type[BaseModel], loc: tuple) -> list[str]:
    current: Any = model
    for key in loc:
        if isinstance(key, int):
            continue
        field = getattr(current, "model_fields", {}).get(key)
        if field is None:
            return []
        ann = field.annotation
        # unwrap Optional[Model] / Model | None
        for cand in (ann, *getattr(ann, "__args__", ())):
            if isinstance(cand, type) and issubclass(cand, BaseModel):
                current = cand
                break
        else:
            return []
    # YAML spells a field by its alias when it has one (QoS: "class", not "class_")
    return [f.alias or k for k, f in getattr(current, "model_fields", {}).items()]


def validate_params(model: type[BaseModel], data: dict[str, Any], *, base_dir: Path | None = None,
                    what: str = "parameters") -> BaseModel:
    """Validate ``data`` against ``model``; raise one ConfigError (or ConfigErrors) on failure."""
    from ..errors import ConfigErrors

    try:
        return model.model_validate(data, context={"base_dir": base_dir or Path.cwd()})
    except ValidationError as exc:
        errors = pydantic_errors(exc, model, what)
        raise (errors[0] if len(errors) == 1 else ConfigErrors(errors)) from None


# ---------------------------------------------------------------------------
# Registry


STAGES: Registry[type[Stage]] = Registry("stage")
"""Every stage type by its YAML name (``stages/__init__.py`` declares the built-in ones with their
modules: a module is imported when one of its types is first looked up)."""


def register_stage(cls: type[Stage]) -> type[Stage]:
    if not cls.type:
        raise TypeError(f"{cls.__name__} has no type name")
    STAGES.register(cls.type, cls)  # TypeError when another class holds the name
    return cls


def stage_class(type_name: str, *, where: str | None = None) -> type[Stage]:
    """The Stage subclass for a YAML ``type:``; a ConfigError with a did-you-mean if unknown."""
    try:
        return STAGES[type_name]
    except KeyError:
        hint = did_you_mean(type_name, sorted(STAGES)) or f"known stages: {', '.join(sorted(STAGES))}"
        raise ConfigError(f"unknown stage type '{type_name}'", where=where, hint=hint, path=("type",)) from None
