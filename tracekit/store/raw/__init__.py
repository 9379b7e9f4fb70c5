"""The raw format: what the collector writes in `RUN_DIR/raw/` and merge reads back.

One owner for the files between the server and the store, so the collector (inside the
server) and merge (in `tracekit merge` / the launcher) never spell the format twice:

- `files`: file names (records*.arrow segments, sites.json, process.json, manifest.json,
  kineto.json.gz, phasemap.toml), listing a process's segments, JSON read / atomic write;
- `schema`: the record row (struct layout of a buffered row, `RAW_COLUMNS`, the Arrow schema),
  the site kinds, the Arrow IPC end-of-stream marker;
- `ipc`: Arrow IPC stream writing (a file appended with one `os.write` a message) and reading
  (every complete batch of a whole, cut or damaged stream);
- `records`: packed rows -> one record batch (writer), record batch + sites.json -> a decoded
  polars frame (reader: merge; live/ takes it as one dict a row);
- `nvml`: the launcher's NVML samples (file names, schema, batches, reading);
- `cycle_rule`: the phase map's cycle rule as the launcher writes it into run.json, read by merge;
- `processes`: every `pid-<pid>/` of a run read whole (merge's input).

Code inside the server imports these modules, so each imports only the standard library at
module level; pyarrow and numpy are imported inside the functions that need them.
"""
