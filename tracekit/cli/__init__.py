"""The `tracekit` command line.

Commands live one per module (`tracekit/cli/<command>.py`, a click command named `command`) and
are imported only when used, so `tracekit --help` stays fast and needs no extras.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from tracekit._version import __version__
from tracekit.errors import TracekitError

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}

# command name -> (module, one-line help). Order is the order of `tracekit --help`.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "tracekit.cli.demo",
        "Run the embedded speculative decoder under tracekit, end to end.",
    ),
    "launch": ("tracekit.cli.launch", "Run a server command with every rank instrumented."),
    "ingest": (
        "tracekit.cli.ingest",
        "Read Kineto traces (torch.profiler, SGLang, vLLM) into a run directory.",
    ),
    "merge": ("tracekit.cli.merge", "Turn raw per-rank collector output into the Parquet store."),
    "summary": (
        "tracekit.cli.summary",
        "Cycle time, acceptance length and per-phase shares of a run.",
    ),
    "breakdown": (
        "tracekit.cli.breakdown",
        "Forward / allreduce / overhead of every phase instance.",
    ),
    "temporal": (
        "tracekit.cli.temporal",
        "Idle / compute / non-compute time per rank (HTA's definitions).",
    ),
    "diff": (
        "tracekit.cli.diff",
        "What changed between two runs, biggest significant change first.",
    ),
    "breakeven": ("tracekit.cli.breakeven", "Acceptance length needed to beat plain decoding."),
    "sweep": (
        "tracekit.cli.sweep",
        "Run a workload at several held acceptance lengths; measure the break-even.",
    ),
    "top": ("tracekit.cli.top", "Live view of a running server: cycles/s, phases, lagging rank."),
    "report": ("tracekit.cli.report", "Write the self-contained HTML report of a run."),
    "perfetto": ("tracekit.cli.perfetto", "Write a native Perfetto trace of a run."),
    "view": ("tracekit.cli.view", "Open a run's Perfetto trace in ui.perfetto.dev."),
}


class LazyGroup(click.Group):
    """A group whose commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module = importlib.import_module(entry[0])
        command: click.Command = module.command
        return command

    def invoke(self, ctx: click.Context) -> Any:
        # Errors tracekit knows about end as one line on stderr with their exit code, both for
        # the console script and for click's CliRunner in tests. Anything else is a bug.
        try:
            return super().invoke(ctx)
        except TracekitError as exc:
            message = str(exc).strip() or type(exc).__name__
            click.echo(f"tracekit: error: {message}", err=True)
            ctx.exit(exc.exit_code)
        except click.UsageError as exc:  # a command's arguments: one line, like the others
            if exc.ctx is None or exc.ctx is ctx:
                raise
            name = exc.ctx.command_path
            click.echo(f"tracekit: error: {exc.format_message()} (see `{name} --help`)", err=True)
            ctx.exit(exc.exit_code)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Short help from the table: listing commands must not import them.
        rows = [(name, help_) for name, (_, help_) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, prog_name="tracekit")
def cli() -> None:
    """Profile speculative-decoding cycles on tensor-parallel LLM servers.

    \b
    Example:
        tracekit demo
        tracekit launch --adapter sglang -- python -m sglang.launch_server ... --tp 8
        tracekit summary RUN_DIR
    """


def main(argv: list[str] | None = None) -> Any:
    """Entry point of the console script and `python -m tracekit`."""
    try:
        return cli.main(args=argv, prog_name="tracekit", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted!", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(130)
