"""Backtest stage: the servers a run asks, the user's Prometheus and the private one. A
Source is built from a URL and an Authorization header; the URL it keeps has no userinfo
(a password in the URL becomes basic auth), and its repr and str show the URL as the user
gave it with the userinfo redacted, so a message, report or traceback that formats a Source
cannot print a credential. `scrub` removes every spelling of the secret from a text (a hostile
server may echo the Authorization header in an error or a label). Every request of a run
ends within the run's --deadline as well as its own --timeout."""

from __future__ import annotations

import base64
import binascii
import json
import math
import time
import urllib.parse
from dataclasses import dataclass

from genobs.promhttp import PrometheusError, Server, api, basic, check_url, redact

DEFAULT_DEADLINE = 3600.0
MAX_DEADLINE = 7 * 86400.0
MIN_SECRET = 4  # shorter pieces of a secret are not searched for in texts (they would blank common words)
MIN_RUN = 6  # a text holding this many first characters of a secret holds a cut copy of it


@dataclass(frozen=True)
class Deadline:
    """The monotonic time by which the whole run ends."""

    seconds: float
    at: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        if not (math.isfinite(seconds) and 0 < seconds <= MAX_DEADLINE):
            raise PrometheusError(f"--deadline must be above 0 and at most {MAX_DEADLINE:g} seconds, got {seconds!r}")
        return cls(seconds, time.monotonic() + seconds)

    def left(self) -> float:
        left = self.at - time.monotonic()
        if left <= 0:
            raise PrometheusError(f"no complete result within the overall deadline of {self.seconds:g}s (--deadline)")
        return left


NO_DEADLINE = Deadline(math.inf, math.inf)


def _secrets(authorization: str) -> tuple[str, ...]:
    """Every piece of `authorization` that identifies it, longest first: the token or the base64
    text, user:password and the password, each also as JSON and URL spell them (the scheme,
    "Bearer " or "Basic ", is no secret and is left in texts)."""
    scheme, _, value = authorization.partition(" ")
    pieces = {value}
    if scheme == "Basic":
        try:
            pair = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            pair = ""
        pieces |= {pair, pair.partition(":")[2]}
    spelled = set()
    for p in pieces:
        if len(p) >= MIN_SECRET:
            spelled |= {p, json.dumps(p)[1:-1], urllib.parse.quote(p, safe=""), urllib.parse.quote_plus(p)}
    return tuple(sorted(spelled, key=len, reverse=True))


class Source:
    """A Prometheus HTTP API to ask, with its credentials and the run's deadline."""

    __slots__ = ("url", "shown", "_authorization", "_secrets", "timeout", "deadline", "steps_ceiling")

    def __init__(
        self,
        url: str,
        authorization: str = "",
        timeout: float = 30.0,
        deadline: Deadline = NO_DEADLINE,
        name: str = "",
    ):
        parts = check_url(url)
        self.shown = name or redact(url)  # how reports and errors name it
        if "@" in parts.netloc:
            if authorization:
                raise PrometheusError(f"{self.shown}: give credentials in the URL or by option, not both")
            userinfo, _, host = parts.netloc.rpartition("@")
            user, _, password = userinfo.partition(":")
            authorization = basic(urllib.parse.unquote(user), urllib.parse.unquote(password))
            url = urllib.parse.urlunsplit(parts._replace(netloc=host))
        self.url = url
        self._authorization = authorization
        self._secrets = _secrets(authorization) if authorization else ()
        self.timeout = timeout
        self.deadline = deadline
        # the most evaluations one query_range may ask of it: lowered when one got no answer in time
        self.steps_ceiling = 1 << 30

    def __repr__(self) -> str:
        return f"Source({self.shown!r})"

    def __str__(self) -> str:
        return self.shown

    def scrub(self, text: str) -> str:
        """`text` with every spelling of this source's secret replaced by ***, also where a
        message cut it short (a server's text is quoted up to a length)."""
        for secret in self._secrets:
            head = secret[:MIN_RUN]
            i = text.find(head)
            while i >= 0:
                n = len(head)
                while n < len(secret) and i + n < len(text) and text[i + n] == secret[n]:
                    n += 1
                text = text[:i] + "***" + text[i + n :]
                i = text.find(head, i + 3)
        return text

    def server(self) -> Server:
        """The promhttp Server of one request: its timeout cut to what the deadline leaves."""
        left = self.deadline.left()
        return Server(self.url, self._authorization, min(self.timeout, left), self.deadline.at, self.deadline.seconds)

    def ask(self, path: str, params: dict, post: bool = False, expect: str = "") -> object:
        """`data` of one API request with the hardened client `compare` and `doctor` use; its
        errors name the server as `shown` does (a private server by what it is, not its port)."""
        try:
            return api(self.server(), path, params, post=post, expect=expect)
        except PrometheusError as exc:
            if self.shown != redact(self.url):
                raise PrometheusError(str(exc).replace(self.url, self.shown)) from None
            raise


def ask(source: Source, path: str, params: dict, post: bool = False, expect: str = "") -> object:
    return source.ask(path, params, post, expect)
