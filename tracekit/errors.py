"""Errors raised by tracekit.

The CLI catches `TracekitError` only: it prints the message on one line to stderr and exits with
the error's `exit_code` (2 for bad input). Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class TracekitError(Exception):
    """Errors raised by tracekit."""

    exit_code: int = 2


class InputError(TracekitError):
    """A file or directory given to tracekit cannot be used (missing, empty, not a trace...)."""


class TraceFormatError(InputError):
    """A trace file is not a Kineto Chrome-JSON trace, or is damaged beyond salvage."""


class RankError(InputError):
    """A trace's rank cannot be determined, or two files claim one rank."""


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


class MissingDependencyError(TracekitError):
    """An optional dependency is needed for this command."""


class CommandError(TracekitError):
    """A CLI error carrying its own exit code."""

    def __init__(self, *args: object, exit_code: int = 2) -> None:
        super().__init__(*args)
        self.exit_code = exit_code
