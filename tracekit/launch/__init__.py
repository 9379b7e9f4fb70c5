"""tracekit.launch: what runs in the `tracekit launch` parent process, never inside the server.

- `launcher`: `launch(LaunchOptions)`, the steps in order (run directory, preflight, run.json,
  NVML, the child, its supervision, the final run.json, merge);
- `options`: `LaunchOptions`, `LaunchResult`;
- `rundir`: a fresh run directory (and `multinode`: a node's part of a multi-node run);
- `preflight`: what is checked before the command starts (options, targets, Python flags);
- `env`: the child's environment (the bootstrap on PYTHONPATH, the `TRACEKIT_*` settings);
- `supervise`: the child's process group: watching /proc, forwarding signals, reaping;
- `runjson`: run.json, at the start (with the phase map's cycle rule) and at the end;
- `nvml`: the NVML sampler thread.

Code inside the server is in `collectors/` (imported as `tracekit.collectors`).
"""
