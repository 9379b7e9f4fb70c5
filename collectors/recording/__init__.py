"""The recorder's parts, one job a module, stacked into one class (`collectors/recorder.py`).

Each layer may use the ones below it, never those above:

- `state`: the recorder's attributes, per-thread state, the torch.compile / CUDA graph bypass;
- `gpu`: CUDA events of light mode (sampling, sharing at boundaries, resolving them);
- `output`: buffering to the record stream (flush, segments, the timer thread, process.json,
  the manifest) and disabling itself on a failure;
- `lifecycle`: the bounded exit, fork handling;
- `hotpath`: `enter` / `exit` and the inlined sync wrapper body (`sync_call`), the site codes.
- `readings`: acceptance read from a call at its exit (a number a row, per-request lists aside).

The layers are classes of one object (mixins in a line: `Recorder(HotPath)`, `HotPath(Lifecycle)`,
...), so a call on the hot path looks its methods up exactly as on one class.
"""
