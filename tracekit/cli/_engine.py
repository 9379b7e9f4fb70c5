"""`--scheduler ADDRESS` / `--workers N`: run a command's per-rank maps on Dask
(tracekit/distributed.py)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def engine_options(f: F) -> F:
    """Add `--scheduler` and `--workers`; with either, the command runs inside that engine."""

    @functools.wraps(f)
    def wrapper(*args: Any, scheduler: str | None, workers: int | None, **kwargs: Any) -> Any:
        if not scheduler and not workers:
            return f(*args, **kwargs)
        from tracekit.distributed import engine

        with engine(scheduler, workers) as eng:
            if eng is not None:
                click.echo(
                    f"tracekit: per-rank work on Dask ({eng.workers} worker(s) at {eng.address})",
                    err=True,
                )
            return f(*args, **kwargs)

    wrapped = click.option(
        "--workers",
        type=click.IntRange(min=1),
        default=None,
        help="Run the per-rank work on a local Dask cluster of N worker processes "
        "(pip install 'tracekit-spec[dask]').",
    )(wrapper)
    wrapped = click.option(
        "--scheduler",
        metavar="ADDRESS",
        default=None,
        help="Run the per-rank work on the Dask cluster at ADDRESS (tcp://host:8786 or a "
        "scheduler file); the run directory must be on storage its workers share.",
    )(wrapped)
    return wrapped  # type: ignore[return-value]
