"""The ``bench:`` mapping of a pipeline file, shared by its kinds (contention.py: W3, link.py: a
stream over zmq): its settings validated with every error at its FILE:LINE:COL, and the
pipelines its keys name (or, unnamed, the only one that fits the role)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..errors import ConfigError, ConfigErrors
from ..stages.base import StageParams, did_you_mean, validate_params

if TYPE_CHECKING:
    from ..pipeline import Pipeline
    from ..spec.loader import Marks


def validate_bench(model: type[StageParams], section: Any, bm: "Marks") -> StageParams:
    """``section`` validated as ``model``; errors located at the mapping's marks ``bm``."""
    try:
        return validate_params(model, section, what="bench")
    except ConfigError as exc:
        group = exc.errors if isinstance(exc, ConfigErrors) else [exc]
        located = [e if e.where else ConfigError(e.message, hint=e.hint, path=e.path,
                                                 where=bm.locate(e.path, as_key="unknown parameter" in e.message))
                   for e in group]
        raise (located[0] if len(located) == 1 else ConfigErrors(located)) from None


def pick_pipeline(pipelines: list["Pipeline"], name: str | None, key: str, bm: "Marks", *,
                  fits: Callable[["Pipeline"], bool],
                  count_error: Callable[[int, list[str]], tuple[str, str]],
                  misfit: Callable[["Pipeline"], tuple[str, str]]) -> "Pipeline":
    """The pipeline the bench's ``key:`` names, or, with no name, the only one that ``fits``.
    ConfigError: ``count_error(n, names)`` (message, hint) when none or several fit unnamed,
    ``misfit(p)`` when the named one does not fit, or no pipeline of that name."""
    names = [p.name for p in pipelines]
    if name is None:
        found = [p for p in pipelines if fits(p)]
        if len(found) != 1:
            message, hint = count_error(len(found), names)
            raise ConfigError(message, where=bm.where, hint=hint)
        return found[0]
    for p in pipelines:
        if p.name == name:
            if not fits(p):
                message, hint = misfit(p)
                raise ConfigError(message, where=bm.value_where(key), hint=hint)
            return p
    raise ConfigError(f"bench: no pipeline named '{name}'", where=bm.value_where(key),
                      hint=did_you_mean(name, names) or f"pipelines: {', '.join(names)}")
