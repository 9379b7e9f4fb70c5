"""The console every table command prints through, and tables that never cut a number.

rich fits a table to the console's width, which without a TTY (CI logs, `| tee`, a file) is 80
columns or $COLUMNS, by cutting cells ("1886…") and wrapping names over lines. Here a table is
printed at no less than its natural width (every cell whole, on one line); a terminal narrower
than that wraps the long lines itself. Plain text lines are not wrapped without a TTY.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def make_console(*, stderr: bool = False) -> Console:
    from rich.console import Console

    probe = Console(stderr=stderr)
    # No TTY: no word wrapping of text lines, no highlighting of numbers in logs.
    return Console(stderr=stderr, soft_wrap=not probe.is_terminal, highlight=probe.is_terminal)


def new_table(
    title: str, columns: list[str], *, text: set[str] | frozenset[str] = frozenset()
) -> Table:
    """A table with `columns`: those in `text` left-aligned, the rest right-aligned numbers;
    no cell is ever wrapped or cut (see print_table)."""
    from rich.table import Table

    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="left" if col in text else "right", no_wrap=True)
    return table


def print_table(console: Console, table: Table) -> None:
    """Print `table` at no less than its natural width, so no cell is cut or wrapped."""
    from rich.console import Console
    from rich.measure import Measurement

    natural = Measurement.get(console, console.options.update_width(1_000_000), table).maximum
    if natural <= console.width:
        console.print(table)
        return
    wide = Console(
        file=console.file,
        width=natural,
        force_terminal=console.is_terminal,
        color_system=console.color_system,  # type: ignore[arg-type]
        highlight=False,
    )
    wide.print(table)
