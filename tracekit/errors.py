"""Errors raised by tracekit.

The CLI catches `TracekitError` only: it prints the message on one line to stderr and exits with
the error's `exit_code` (2 for bad input). Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from typing import Any


class TracekitError(Exception):
    """Errors raised by tracekit."""

    exit_code: int = 2


class InputError(TracekitError):
    """A file or directory given to tracekit cannot be used (missing, empty, not a trace...)."""


class TraceFormatError(InputError):
    """A trace file is not a Kineto Chrome-JSON trace, or is damaged beyond salvage."""


class RankError(InputError):
    """A trace's rank cannot be determined, or two files claim one rank."""


class IngestError(InputError):
    """Several inputs could not be ingested; the others were. `result` says what was written.

    A single bad input raises its own class (TraceFormatError, RankError, ...); every error
    raised by `ingest` carries the `result` attribute, a `tracekit.store.ingest.IngestResult`
    (typed Any here: this module imports nothing of tracekit, so every layer can import it).
    """

    def __init__(self, message: str, result: Any) -> None:
        super().__init__(message)
        self.result = result


class SchemaError(TracekitError):
    """A store table lacks a column, or was written by a newer schema version."""


class StoreError(TracekitError):
    """A run directory has no store, or the store is incomplete."""


class NoCyclesError(StoreError):
    """A run has phase instances but its cycle rule found no cycle; `instances` counts them
    per phase name, so an output can still show what was recorded."""

    def __init__(self, *args: object, instances: dict[str, int] | None = None) -> None:
        super().__init__(*args)
        self.instances = dict(instances or {})


class CollectorError(TracekitError):
    """The collector or launcher could not do its job."""


class PortInUseError(TracekitError):
    """`tracekit view` cannot bind its local port (another program holds it)."""


class RankFailedError(TracekitError):
    """A rank of the demo exited with an error (its traceback is above); exit status 1."""

    exit_code = 1


class MissingDependencyError(TracekitError):
    """An optional dependency is needed for this command."""


class CommandError(TracekitError):
    """A CLI error carrying its own exit code. Raised by tracekit/cli only: library code raises
    one of the classes above."""

    def __init__(self, *args: object, exit_code: int = 2) -> None:
        super().__init__(*args)
        self.exit_code = exit_code
