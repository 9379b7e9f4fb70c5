"""tracekit.collectors: what runs inside the profiled server (bootstrap, hooks, recorders).

Imported as `tracekit.collectors`. Nothing heavy at import time: no polars, no plotly, no torch.
"""
