"""Backtest stage: a rule's expression evaluated over a long range, as query_range answers
of a bounded size. Each answer holds evaluations × series points, and promhttp refuses one
past 32 MiB or 400,000 lists (a point is one): a fleet of 350 engine ranks at 2,000 steps
would be refused. So the steps of the next query follow the series of the last answer
(POINTS_PER_ANSWER points), and an answer refused as too large (by promhttp, or by the
server's own sample or resolution limits) is asked again with half the steps it asked, and the
rest of that expression's range with no more than that. What a query
costs the server grows with its steps times the raw series it reads, which no answer shows (a
bucket rate over 1,000 engine ranks answers a few series and reads 20,000): a query that gets no
answer within --timeout is asked again with half the steps it asked, and no later query of the
run asks the server for more (a day over 1,000 ranks timed out at 2,000 steps)."""

from __future__ import annotations

import math
from collections.abc import Iterator

from genobs.backtest.source import Source
from genobs.promhttp import PrometheusError

STEPS_PER_QUERY = 2000  # evaluations per query_range; Prometheus refuses more than 11,000
POINTS_PER_ANSWER = 150_000  # points of one answer: some 6 MiB of JSON, well under promhttp's caps
TOO_LARGE = (
    "larger than",  # promhttp: the answer's bytes
    "holds more than",  # promhttp: the answer's lists and values
    "exceeded maximum resolution",  # Prometheus: steps
    "too many samples",  # Prometheus: --query.max-samples
)
TIMED_OUT = "no complete answer within"  # genobs.promhttp: the request's --timeout ran out


def grid(t: float, interval: float) -> float:
    """The first evaluation at or after `t`: every group evaluates at multiples of its interval."""
    return math.ceil(t / interval) * interval


class Steps:
    """How many evaluations the next query asks for, learnt from the answers so far."""

    def __init__(self, ceiling: int = STEPS_PER_QUERY) -> None:
        self.ceiling = self.steps = max(1, min(ceiling, STEPS_PER_QUERY))

    def answered(self, series: int) -> None:
        self.steps = max(1, min(self.ceiling, POINTS_PER_ANSWER // max(series, 1)))

    def halved(self, asked: int) -> bool:
        """Half the steps asked, and never more for this expression (what the server refuses or
        takes too long over, its samples read or the answer's size, grows with the steps); False
        when one step was asked (no smaller question)."""
        if asked <= 1:
            return False
        self.ceiling = self.steps = max(1, asked // 2)
        return True


def evaluations(
    server: Source, expr: str, first: float, last: float, step: float, steps: Steps | None = None
) -> Iterator[tuple[float, float, list[dict]]]:
    """(a, b, result) per answer of `expr` evaluated every `step` from `first` to `last`: the
    answers cover the evaluations in order, each at most steps.steps long."""
    steps = steps or Steps(server.steps_ceiling)
    a = first
    while a <= last:
        b = min(last, a + (steps.steps - 1) * step)
        params = {"query": expr, "start": f"{a:.3f}", "end": f"{b:.3f}", "step": f"{step:g}"}
        try:
            data = server.ask("query_range", params, True)
        except PrometheusError as exc:
            timed_out = TIMED_OUT in str(exc)
            if (timed_out or any(why in str(exc) for why in TOO_LARGE)) and steps.halved(round((b - a) / step) + 1):
                if timed_out:  # the server's own speed: no later query of the run asks it for more
                    server.steps_ceiling = min(server.steps_ceiling, steps.ceiling)
                continue
            raise
        result = data["result"]  # type: ignore[index]  (ask checked it is a matrix)
        steps.answered(len(result))
        yield a, b, result
        a = b + step
