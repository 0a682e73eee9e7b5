"""Backtest stage: series keys as the private copy stores them. Every line of OpenMetrics
repeats its series' whole label set, so one long label value (a Kubernetes annotation copied
into a label) is paid for with every sample: 20 KB of labels on a series scraped every 15 s
is 115 MB of text a day. The labels no rule names (every identifier of every rule's text is
"named", plus `le` and `quantile`, which histogram_quantile reads without naming) are
therefore folded into one short label when they are long: PromQL treats labels it does not
name all alike (kept or dropped together, compared for equality), so the rules see the same
series, and the episodes' labels are unfolded again from a small store on disk before they
are reported. Labels the rules name are kept; a series whose named labels alone exceed
MAX_KEY bytes is refused with a message."""

from __future__ import annotations

import hashlib
import json
import math
import re
import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path

from genobs.errors import printable
from genobs.promhttp import PrometheusError

FOLDED = "genobs_folded"  # the label that stands for the folded ones
FOLD_ABOVE = 512  # bytes of unnamed labels kept as they are; longer ones are folded
MAX_KEY = 4096  # bytes of a series key once folded: a longer one means long labels the rules name
ALWAYS_NAMED = frozenset({"__name__", "le", "quantile"})
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def named_labels(exprs: Iterable[str]) -> frozenset[str]:
    """Every identifier in the rules' texts: a superset of the label names they read (by,
    without, on, ignoring, group_left, matchers, label_replace's quoted arguments)."""
    names: set[str] = set(ALWAYS_NAMED)
    for expr in exprs:
        names.update(_IDENTIFIER.findall(expr))
    return frozenset(names)


def om_value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def om_labels(metric: dict[str, str]) -> str:
    """`{a="x",b="y"}` in name order, without __name__; names and values checked."""
    parts = []
    for k in sorted(metric):
        if k == "__name__":
            continue
        if not _LABEL_NAME.match(k):
            raise PrometheusError(f"the answer holds an invalid label name {printable(k[:40])!r}")
        parts.append(f'{k}="{_escape(metric[k])}"')
    return "{" + ",".join(parts) + "}"


def _shown(metric: dict[str, str]) -> str:
    name = metric.get("__name__", "")
    text = name + "{" + ",".join(f"{k}={v[:20]!r}" for k, v in sorted(metric.items()) if k != "__name__") + "}"
    return printable(text[:160] + ("..." if len(text) > 160 else ""))


class Folding:
    """Series keys with the unnamed labels folded when they are long. `store` (a file the run
    removes) keeps what each folded label stood for; without one (--dry-run) nothing is kept."""

    def __init__(self, named: frozenset[str] | None = None, store: Path | None = None):
        self.named = named  # None: fold nothing
        self.store = store
        self._db: sqlite3.Connection | None = None
        self._stored: set[str] = set()
        self._lock = threading.Lock()  # rules are recorded by several threads at once

    def labels(self, metric: dict[str, str]) -> dict[str, str]:
        """The labels as the copy holds them, checked: __name__ aside, a label name, text that
        is valid UTF-8, and a key of at most MAX_KEY bytes."""
        try:
            size = sum(len(k) + len(v) + 4 for k, v in metric.items())
            if self.named is None or size <= FOLD_ABOVE:
                kept = dict(metric)
            else:
                kept = {k: v for k, v in metric.items() if k in self.named}
                rest = {k: v for k, v in metric.items() if k not in self.named}
                if sum(len(k) + len(v) + 4 for k, v in rest.items()) > FOLD_ABOVE:
                    kept[FOLDED] = self._fold(rest)
                else:
                    kept = dict(metric)
            key_bytes = len(om_labels(kept).encode("utf-8")) + len(kept.get("__name__", ""))
        except UnicodeEncodeError:  # a lone surrogate: JSON can spell one, UTF-8 cannot
            raise PrometheusError(f"the answer holds a label that is not valid UTF-8 in {_shown(metric)}") from None
        if key_bytes > MAX_KEY:
            raise PrometheusError(
                f"a series carries {key_bytes:,} bytes of labels the rules read, more than {MAX_KEY:,}: {_shown(metric)}"
            )
        return kept

    def key(self, metric: dict[str, str]) -> str:
        """The series' OpenMetrics key (`name{labels}`); PrometheusError for a bad name."""
        name = metric.get("__name__", "")
        if not _METRIC_NAME.match(name):
            raise PrometheusError(f"the answer holds an invalid metric name {printable(name[:40])!r}")
        return name + om_labels(self.labels(metric))

    def _fold(self, rest: dict[str, str]) -> str:
        text = json.dumps(sorted(rest.items()), ensure_ascii=False)
        token = "f" + hashlib.blake2b(text.encode("utf-8"), digest_size=12).hexdigest()
        if self.store is not None and token not in self._stored:
            with self._lock:
                self._connection().execute("INSERT OR IGNORE INTO folded VALUES (?, ?)", (token, text))
                self._stored.add(token)
        return token

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            assert self.store is not None
            self._db = sqlite3.connect(self.store, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=OFF")
            self._db.execute("CREATE TABLE IF NOT EXISTS folded (token TEXT PRIMARY KEY, labels TEXT)")
        return self._db

    def unfold(self, labels: dict[str, str]) -> dict[str, str]:
        """`labels` with the folded label replaced by the labels it stands for."""
        token = labels.get(FOLDED)
        if token is None or self.store is None or token not in self._stored:
            return labels
        with self._lock:
            row = self._connection().execute("SELECT labels FROM folded WHERE token = ?", (token,)).fetchone()
        out = {k: v for k, v in labels.items() if k != FOLDED}
        for k, v in json.loads(row[0]):
            out.setdefault(k, v)
        return out

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
