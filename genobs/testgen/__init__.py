"""Test generation stage: promtool unit tests computed from a plan's rules and
synthetic input series (Prometheus' rate, histogram_quantile and Go's humanize
functions reproduced in Python), never read back from Prometheus."""
