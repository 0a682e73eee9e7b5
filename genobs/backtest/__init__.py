"""The backtest stage: a spec's alerts replayed over a live Prometheus' history.

    spec ──rules──▶ RuleSet (recording rules by dependency level, alerts, raw selectors, warm-up)
         ──run────▶ source checked (flags, retention, lookback) and sized (/series)
                    ──pull──▶ raw samples copied into blocks (labels no rule names folded)
                    ──tsdb──▶ a private Prometheus serves them; recording rules backfilled level by level
                    ──alerts─▶ episodes (Prometheus' `for` / `keep_firing_for` state machine)
         ──report─▶ table, markdown, json · plot: the timeline PNG

`genobs backtest` (genobs/commands/backtest.py) is the shell around `run.plan` and `run.run`:
options in, exit codes and output out. Nothing here prints or exits; errors are BacktestError
or promhttp.PrometheusError with a message for the user (exit 2)."""
