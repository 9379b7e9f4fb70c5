"""Arrow IPC streams as the raw format writes and reads them.

Writing: a stream is a file opened for appending, the schema message first, then one message a
flush (`os.write` of a serialized batch, so a reader never sees half a batch unless the process
died inside that write), and the end-of-stream marker when it is closed cleanly. Reading: every
complete batch of a stream, whether it was closed, cut after a batch, or damaged in the middle.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tracekit.store.raw.schema import EOS


class StreamWriter:
    """One Arrow IPC stream file, appended to with one `os.write` a message."""

    def __init__(self, path: Path, schema: Any) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        self.closed = False
        self.head_bytes = self.write(schema.serialize().to_pybytes())

    def writable_fd(self) -> int:
        """The descriptor to append messages to (OSError once the stream is closed)."""
        if self.closed:
            msg = f"{self.path}: the stream is closed"
            raise OSError(msg)
        return self.fd

    def write(self, data: bytes) -> int:
        """Append serialized message bytes; the number of bytes written."""
        os.write(self.writable_fd(), data)
        return len(data)

    def write_batch(self, batch: Any) -> int:
        return self.write(batch.serialize().to_pybytes())

    def close(self, *, clean: bool = True) -> None:
        """Close the file, ending the stream with its marker when `clean`."""
        if self.closed:
            return
        self.closed = True
        try:
            if clean:
                os.write(self.fd, EOS)
        finally:
            os.close(self.fd)


def read_stream(path: Path, fallback_schema: Any = None) -> tuple[Any, bool, str | None]:
    """Every complete batch of an Arrow IPC stream: (table or None, ended cleanly, error).

    The table is None only when the file cannot be read at all or is empty; a stream damaged
    after its schema gives the batches before the damage (or none, with the stream's schema, or
    `fallback_schema` when not even the schema could be read)."""
    import pyarrow as pa

    try:
        data = path.read_bytes()
    except OSError as exc:
        return None, False, str(exc)
    if not data:
        return None, False, "empty file"
    batches = []
    err = None
    complete = False
    try:
        reader = pa.ipc.open_stream(pa.BufferReader(data))
        schema = reader.schema
        while True:
            try:
                batches.append(reader.read_next_batch())
            except StopIteration:
                complete = data.endswith(EOS)
                break
    except (pa.ArrowInvalid, OSError) as exc:
        err = str(exc)
        schema = batches[0].schema if batches else None
    if schema is None:
        schema = fallback_schema
    if schema is None:
        return None, False, err
    return pa.Table.from_batches(batches, schema=schema), complete, err
