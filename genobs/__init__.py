"""genobs: compile a declarative LLM-serving spec into Prometheus rules, a Grafana
dashboard, a runbook and promtool unit tests."""

__version__ = "0.1.0"
