"""Options every command shares, and the one check of a run directory named on the command line.

RUN_DIR (argument or option), `-o/--output`, `-f/--force`, `--json`, `--rules/--impl-table`,
`--all-cycles/--cycles`, `--scheduler/--workers`. A run directory that is not there, or lacks what
the command reads, fails in `tracekit.store.layout.check_run_dir` with one line (InputError,
exit 2) naming the path and what to pass instead; every RUN_DIR here goes through it. An
analysis command's run must also have a store that reads (`tracekit.store.reader.check_store`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, overload

import click

from tracekit.errors import InputError
from tracekit.store.layout import Mode, Needs, check_run_dir

F = TypeVar("F", bound=Callable[..., Any])

OutputKind = Literal["file", "dir"]
OTHER_RUN_HINT = "give another run's directory"


def check_overwrite(output: Path | None, *, force: bool) -> None:
    """An explicit `-o FILE` that exists needs `--force` (a default output is rewritten)."""
    if output is not None and output.exists() and not force:
        msg = f"file already exists, will not overwrite without --force: {output}"
        raise InputError(msg)


def run_dir_argument(
    name: str = "run_dir", *, needs: Needs = "dir", many: bool = False, store: bool = True
) -> Callable[[F], F]:
    """The RUN_DIR argument (or RUN_A, ...; with `many`, one or more), each checked by
    `check_run_dir`; with `store` (an analysis command), its store must read too."""

    def one(value: Any) -> Path:
        path = check_run_dir(value, needs=needs)
        if store and needs == "dir":  # an analysis command: its store must read (one line if not)
            from tracekit.store.reader import check_store

            check_store(path)
        return path

    def check(_ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
        if many:
            return tuple(one(v) for v in value)
        return one(value)

    if many:
        return click.argument(
            name, nargs=-1, required=True, type=click.Path(path_type=Path), callback=check
        )
    return click.argument(name, type=click.Path(path_type=Path), callback=check)


def run_dir_option(*decls: str, help: str) -> Callable[[F], F]:
    """An option naming another run directory (`--baseline RUN`), checked when given."""

    def check(_ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
        if value is None:
            return None
        from tracekit.store.reader import check_store

        path = check_run_dir(value, option=param.opts[0], hint=OTHER_RUN_HINT)
        check_store(path)
        return path

    return click.option(
        *decls, type=click.Path(path_type=Path), default=None, callback=check, help=help
    )


def output_option(
    *,
    help: str,
    dest: str = "output",
    kind: OutputKind = "file",
    required: bool = False,
) -> Callable[[F], F]:
    """`-o/--output PATH`: a file to write, or a directory to create or add to."""
    path = (
        click.Path(dir_okay=False, path_type=Path)
        if kind == "file"
        else click.Path(file_okay=False, path_type=Path)
    )
    return click.option(
        "-o", "--output", dest, type=path, default=None, required=required, help=help
    )


def force_option(f: F) -> F:
    return click.option("-f", "--force", is_flag=True, help="Overwrite an existing output file.")(f)


@overload
def json_option(f: F, *, help: str = ...) -> F: ...
@overload
def json_option(f: None = None, *, help: str = ...) -> Callable[[F], F]: ...
def json_option(f: F | None = None, *, help: str = "Print JSON on stdout.") -> Any:
    """`--json` (as `as_json`); `@json_option` or `@json_option(help=...)`."""
    deco = click.option("--json", "as_json", is_flag=True, help=help)
    return deco if f is None else deco(f)


def out_option(*, what: str, name_default: str) -> Callable[[F], F]:
    """`--out DIR --name NAME`: where a command that runs something writes its `what`
    directory (run, sweep), and its name."""

    def deco(f: F) -> F:
        f = click.option(
            "--name",
            default=None,
            help=f"{what.capitalize()} directory name [default: {name_default}].",
        )(f)
        return click.option(
            "--out",
            type=click.Path(file_okay=False, path_type=Path),
            default=Path("tracekit-runs"),
            show_default=True,
            help=f"Directory that receives the {what} directory.",
        )(f)

    return deco


def mode_option(*, default: Mode, help: str) -> Callable[[F], F]:
    """`--mode light|full`, as `tracekit launch` records."""
    return click.option(
        "--mode", type=click.Choice(get_args(Mode)), default=default, show_default=True, help=help
    )


def profile_cycles_option(*, default: str | None, help: str) -> Callable[[F], F]:
    return click.option(
        "--profile-cycles",
        default=default,
        show_default=default is not None,
        metavar="START:COUNT",
        help=help,
    )


def phases_option(*, help: str) -> Callable[[F], F]:
    """`--phases FILE` (as `phases_file`): a phase map of one's own."""
    return click.option(
        "--phases",
        "phases_file",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        default=None,
        help=help,
    )


def rules_option(f: F) -> F:
    f = click.option(
        "--impl-table",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="TOML file of extra [[impl]] allreduce-implementation entries, tried first.",
    )(f)
    return click.option(
        "--rules",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="TOML file of extra [[rule]] entries mapping annotation names to phases.",
    )(f)


def cycles_option(f: F) -> F:
    """`--all-cycles` / `--cycles A:B`, handed to the command as `choice` (a CycleChoice)."""

    @functools.wraps(f)
    def wrapper(*args: Any, all_cycles: bool, cycles: str | None, **kwargs: Any) -> Any:
        from tracekit.analyzers.steady import CycleChoice

        choice = CycleChoice.parse(all_cycles=all_cycles, cycles=cycles)
        return f(*args, choice=choice, **kwargs)

    wrapped = click.option(
        "--cycles",
        metavar="A:B",
        default=None,
        help="Use cycles A to B-1 only (a slice: `64:` from cycle 64 on) instead of the "
        "steady state.",
    )(wrapper)
    wrapped = click.option(
        "--all-cycles",
        is_flag=True,
        help="Use every recorded cycle, warm-up included (default: the steady state, see "
        "docs/DEFINITIONS.md).",
    )(wrapped)
    return wrapped  # type: ignore[return-value]


def engine_options(f: F) -> F:
    """`--scheduler ADDRESS` / `--workers N`: with either, the command's per-rank maps run on
    Dask (tracekit/distributed.py)."""

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


def analysis_options(f: F) -> F:
    """The options of a command that analyses a run: `rules_option`, `cycles_option` and
    `engine_options`, in that order."""
    return rules_option(cycles_option(engine_options(f)))
