"""tracekit.report."""
