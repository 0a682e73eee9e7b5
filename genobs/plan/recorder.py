"""The recorder the recording-rule builders share (part of the `plan` stage): it collects
recording rules and remembers the recorded name of each signal, for the rules, panels
and tests that read them."""

from __future__ import annotations

from genobs import naming
from genobs import promql as q
from genobs.plan.context import Context
from genobs.plan.model import RecordingRule

_INSTANT = frozenset({"max", "sum", "count", "bytes", "avg"})
# operations whose name already carries their window (a count over the last hour)
_WINDOWED = frozenset({"increase1h"})

class Recorder:
    """Collects recording rules and remembers the recorded name of each signal."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.rules: list[RecordingRule] = []
        self.names: dict[str, str] = {}

    def add(self, key: str, subject: str, operation: str, expr: str, labels: tuple = ()) -> str:
        # instant aggregations of gauges carry no window in their name
        named = operation in _INSTANT or operation in _WINDOWED
        name = naming.record(subject, operation) if named else self.ctx.rec(subject, operation)
        self.rules.append(RecordingRule(record=name, expr=expr, labels=labels))
        self.names[key] = name
        return name

    def count(self, key: str) -> str:
        """Observations per second of a histogram, from its recorded bucket rate (le="+Inf")."""
        return q.sum_by(self.ctx.group, self.ref(f"{key}_buckets", (("le", "=", "+Inf"),)))

    def ref(self, key: str, extra: tuple = ()) -> str:
        """Selector for an already recorded series, restricted to this spec."""
        return self.ctx.recorded(self.names[key], extra, process=key.startswith("process"))
