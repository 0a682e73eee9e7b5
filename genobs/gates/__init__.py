"""Gates for release pipelines: benchmark exports and live before/after comparisons
judged by the spec's use-case KPIs and resolved thresholds."""
