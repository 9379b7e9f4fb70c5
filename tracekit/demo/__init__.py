"""tracekit.demo."""
