"""Neural metrics' models (COMET, MetricX): the files fetched for them, loading them as data,
scoring."""
