"""tracekit.export."""
