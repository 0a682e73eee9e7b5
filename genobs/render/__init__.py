"""`render` stage: Plan -> data (rule dicts, dashboard JSON model, runbook text)."""
