"""`tracekit view RUN_DIR|FILE [--port 9001] [--no-open]`."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.errors import InputError


@click.command(name="view")
@click.argument("target", type=click.Path(path_type=Path))
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=9001,
    show_default=True,
    help="Port on 127.0.0.1 to serve from.",
)
@click.option("--no-open", is_flag=True, help="Only print the URL; do not open a browser.")
def command(target: Path, port: int, no_open: bool) -> None:
    """Open a run's Perfetto trace in ui.perfetto.dev.

    Serves that one file on 127.0.0.1 (nothing else, loopback only) for ui.perfetto.dev to
    fetch, prints the link and opens it, and exits once the UI has fetched the file (or on
    Ctrl-C). Given a run directory it uses RUN_DIR/tracekit.pftrace, writing it first if needed.
    The trace stays on this machine: the UI loads it into your browser.

    \b
    Example:
        tracekit view runs/demo-001
        tracekit view trace.pftrace --no-open
        # on a remote machine: ssh -L 9001:127.0.0.1:9001 HOST, then open the printed link
    """
    import webbrowser

    from tracekit.export.serve import DEFAULT_PORT, make_server, serve_until_fetched, trace_url
    from tracekit.store.layout import RunLayout

    if target.is_dir():
        file = RunLayout(target).perfetto
        if not file.is_file():
            from tracekit.export.perfetto import write_perfetto

            write_perfetto(target, file)
            click.echo(f"Wrote {file}", err=True)
    elif target.is_file():
        file = target
    else:
        msg = f"{target}: no such file or run directory; give a run directory or a .pftrace file"
        raise InputError(msg)

    server = make_server(file, port, log=lambda line: click.echo(line, err=True))
    actual_port = server.server_address[1]
    url = trace_url(file.name, actual_port)
    if actual_port != DEFAULT_PORT:
        click.echo(
            f"note: ui.perfetto.dev only fetches from port {DEFAULT_PORT} (its content security policy); "
            f"port {actual_port} works with a self-hosted UI or a tunnel to {DEFAULT_PORT}",
            err=True,
        )
    click.echo(url)
    click.echo(
        f"Serving {file} on http://127.0.0.1:{actual_port}/ until the UI has fetched it (Ctrl-C to stop).",
        err=True,
    )
    if not no_open:
        webbrowser.open_new_tab(url)
    result = serve_until_fetched(server)
    if result.served:
        click.echo("The UI has the trace; stopped serving.", err=True)
