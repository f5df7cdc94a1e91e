"""One exception family for the whole package.

Every error a user can cause derives from :class:`GkError`. The CLI prints
them without a traceback and exits 2 for :class:`ConfigError` and
:class:`UnsupportedError`/:class:`AdmissionError` raised while building a
pipeline, 1 for failures while it runs.
"""

from __future__ import annotations

from typing import Any


class GkError(Exception):
    """Base of every pygpukit-dsp error."""

    exit_code = 1


class ConfigError(GkError, ValueError):
    """Bad configuration: a YAML file, a stage parameter or a pipeline spec.

    ``where`` is ``FILE:LINE:COL`` when the error comes from a YAML file (or a
    stage name when it comes from the Python builder); ``hint`` says how to fix
    it, e.g. a did-you-mean.
    """

    exit_code = 2

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None,
                 path: tuple = ()):
        self.message = message
        self.where = where
        self.hint = hint
        # Key path inside the component that is wrong (e.g. ("design", "cutoff_hz")), so a
        # YAML loader can turn it into FILE:LINE:COL when ``where`` is not set yet.
        self.path = tuple(path)
        super().__init__(self._format())

    def _format(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        if self.hint:
            text += f" ({self.hint})"
        return text

    def located(self, where: str | None) -> "ConfigError":
        """Return a copy of this error that points at ``where`` unless it already has a place."""
        if self.where or not where:
            return self
        return ConfigError(self.message, where=where, hint=self.hint, path=self.path)


class ConfigErrors(ConfigError):
    """Several configuration errors found in one pass; each keeps its own location."""

    def __init__(self, errors: list[ConfigError]):
        self.errors = list(errors)
        first = self.errors[0]
        GkError.__init__(self, "\n".join(str(e) for e in self.errors))
        self.message, self.where, self.hint = first.message, first.where, first.hint


class UnsupportedError(GkError):
    """A (stage, backend, dtype) combination that cannot run; raised before the first block."""

    exit_code = 2

    def __init__(self, stage: str, backend: str, reason: str):
        self.stage, self.backend, self.reason = stage, backend, reason
        super().__init__(f"stage '{stage}' is not supported on backend '{backend}': {reason}")


class DeviceError(GkError):
    """The CUDA driver, a library or the GPU is missing or unusable."""


class CompileError(GkError):
    """NVRTC failed to compile a kernel; carries the kernel name and the compiler log."""

    def __init__(self, kernel: str, log: str):
        self.kernel, self.log = kernel, log
        super().__init__(f"kernel '{kernel}' failed to compile:\n{log}")


class AdmissionError(GkError):
    """The scheduler refused a stream; ``figures`` holds the numbers behind the refusal."""

    exit_code = 2

    def __init__(self, stream: str, message: str, figures: dict[str, Any] | None = None):
        self.stream, self.figures = stream, dict(figures or {})
        text = f"stream '{stream}' not admitted: {message}"
        if self.figures:
            text += " [" + ", ".join(f"{k}={_fmt(v)}" for k, v in self.figures.items()) + "]"
        super().__init__(text)


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


class StreamFault(GkError):
    """A source, sink or device failed while a stream was running.

    ``part`` names what failed ("sink 'file' (out.wav)", "engine (cuda)"...) and ``block`` the
    block it failed on (counting from 0: every block before it went through), when known.
    """

    def __init__(self, message: str, *, part: str | None = None, block: int | None = None):
        self.part, self.block = part, block
        super().__init__(message)


__all__ = [
    "GkError",
    "ConfigError",
    "ConfigErrors",
    "UnsupportedError",
    "DeviceError",
    "CompileError",
    "AdmissionError",
    "StreamFault",
]
