"""tracekit.store."""
