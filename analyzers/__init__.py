"""tracekit.analyzers: cycles, breakdown, graphs, allreduce, skew, temporal, diff, breakeven.

Imported as `tracekit.analyzers`. Pure functions over polars frames read from the store.
"""
