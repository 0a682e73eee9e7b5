"""The Prometheus HTTP API as `doctor` and `compare` ask it, hardened against
broken or hostile servers: one deadline for the whole exchange (connect, headers
and body; a server dripping a byte every second cannot stretch it), a cap on the
answer's size, and every malformed answer (bad URL, garbage bytes, huge headers,
odd JSON shapes, deep JSON) turned into a PrometheusError with a printable
message, and one overall deadline per command over every request and its parsing.
Credentials (URL userinfo, a bearer token or basic auth from a file or the
environment) go in an Authorization header to that one host and are never printed:
every message shows the URL with its userinfo redacted; redirects are not followed,
so nothing is sent anywhere else. Only the standard library; proxies from the
environment are not used."""

from __future__ import annotations

import base64
import http.client
import math
import re
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

from genobs.errors import printable
from genobs.inputs import Unreadable, load_json

MAX_BYTES = 32 * 1024 * 1024  # every metric name of a large Prometheus is a few MB
MAX_TIMEOUT = 600.0
MAX_DEADLINE = 3600.0
# what one answer may build: compare reads one series per query, doctor one per metric name
MAX_SERIES = 100_000
MAX_NAMES = 2_000_000
_USERINFO = re.compile(r"(?<=://).*@")  # to the last @: a password may hold / ? # unencoded
_SHOWN = 200  # characters of a server's own text quoted in a message


class PrometheusError(Exception):
    """Prometheus could not be asked (unreachable, HTTP error, not a Prometheus API)."""


def _quote(text: str) -> str:
    text = printable(text)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def redact(url: str) -> str:
    """`url` with any user name and password replaced by ***, for every message and report."""
    return _USERINFO.sub("***@", url)


def check_url(base: str) -> urllib.parse.SplitResult:
    """The parsed base URL, or a PrometheusError saying what is wrong with it."""
    shown = _quote(redact(base))
    bad = next((c for c in base if not (c.isascii() and c.isprintable()) or c == " "), None)
    if bad is not None:
        what = repr(bad) if bad in redact(base) else "a character that is not printable ASCII"
        raise PrometheusError(f"malformed URL {shown!r}: it contains {_quote(what)}")
    try:
        parts = urllib.parse.urlsplit(base)
        port = parts.port
    except ValueError as exc:
        # the parser quotes what it read as a port, which may be a piece of a password
        why = "write user:password@ with # ? / @ percent-encoded" if "@" in base else _quote(str(exc))
        raise PrometheusError(f"malformed URL {shown!r}: {why}") from None
    if parts.scheme not in ("http", "https"):
        raise PrometheusError(f"malformed URL {shown!r}: use http:// or https://")
    if not parts.hostname:
        raise PrometheusError(f"malformed URL {shown!r}: no host name")
    if port == 0:
        raise PrometheusError(f"malformed URL {shown!r}: port 0")
    return parts


def check_timeout(timeout: float) -> float:
    if not (math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT):
        raise PrometheusError(f"timeout must be above 0 and at most {MAX_TIMEOUT:g} seconds, got {timeout!r}")
    return timeout


@dataclass(frozen=True)
class Server:
    """Where and how to ask: the URL without userinfo, the Authorization header, the
    timeout of one request and the monotonic time by which the whole command ends."""

    base: str
    authorization: str = field(default="", repr=False)  # a repr in a message or traceback must not show it
    timeout: float = 10.0
    deadline: float = math.inf
    deadline_s: float = math.inf

    @property
    def shown(self) -> str:
        return _quote(redact(self.base))

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise PrometheusError(f"{self.shown}: no complete result within the overall deadline of {self.deadline_s:g}s (--deadline)")
        return left


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def connect(url: str, timeout: float = 10.0, deadline: float = 120.0, authorization: str = "") -> Server:
    """A Server for `url`; userinfo in the URL becomes basic auth (unless `authorization` is given)."""
    parts = check_url(url)
    check_timeout(timeout)
    if not (math.isfinite(deadline) and 0 < deadline <= MAX_DEADLINE):
        raise PrometheusError(f"deadline must be above 0 and at most {MAX_DEADLINE:g} seconds, got {deadline!r}")
    if "@" in parts.netloc:
        userinfo, _, host = parts.netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        if authorization:
            raise PrometheusError(f"{_quote(redact(url))}: give credentials in the URL or by option, not both")
        authorization = basic(urllib.parse.unquote(user), urllib.parse.unquote(password))
        url = urllib.parse.urlunsplit(parts._replace(netloc=host))
    return Server(url, authorization, timeout, time.monotonic() + deadline, deadline)


def fetch(server: Server, path: str, body: str = "", post: bool = False) -> tuple[int, bytes]:
    """(HTTP status, body) of one request; the whole exchange ends within the request's
    timeout and the command's deadline, whichever comes first."""
    base = server.base
    parts = check_url(base)
    timeout = min(server.timeout, server.remaining())
    target = f"{parts.path.rstrip('/')}/{path}"
    if body and not post:
        target += f"?{body}"
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname, parts.port, timeout=timeout)
    expired = threading.Event()

    def expire() -> None:  # unblocks a recv that a dripping server keeps alive
        expired.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    url = _quote(redact(f"{base.rstrip('/')}/{path}"))
    try:
        headers = {"Accept": "application/json", "User-Agent": "genobs"}
        if server.authorization:
            headers["Authorization"] = server.authorization
        if post:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request("POST" if post else "GET", target, body=body.encode() if post else None, headers=headers)
        resp = conn.getresponse()
        chunks, size = [], 0
        while True:
            chunk = resp.read(min(65536, MAX_BYTES + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_BYTES:
                raise PrometheusError(f"{url}: the answer is larger than {MAX_BYTES // 2**20} MiB; is it a Prometheus?")
        if expired.is_set():
            raise TimeoutError
        return resp.status, b"".join(chunks)
    except PrometheusError:
        raise
    except (http.client.HTTPException, ssl.SSLError, OSError, ValueError) as exc:
        if expired.is_set() or isinstance(exc, TimeoutError):
            server.remaining()  # the overall deadline, when it is what ran out
            raise PrometheusError(f"{url}: no complete answer within {timeout:g}s (--timeout)") from None
        if isinstance(exc, http.client.HTTPException):
            what = type(exc).__name__ + (f": {exc}" if str(exc) else "")
            raise PrometheusError(f"{url}: not a valid HTTP answer ({_quote(what)})") from None
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise PrometheusError(f"cannot reach Prometheus at {server.shown}: {_quote(reason)}") from None
    finally:
        timer.cancel()
        conn.close()


def _json(raw: bytes, path: str) -> object:
    """The parsed answer, None when it is not JSON; PrometheusError when it is too large to build."""
    try:
        return load_json(raw, 4 * MAX_SERIES, 2 * MAX_NAMES, MAX_NAMES)
    except Unreadable as exc:
        if exc.message.startswith("holds more than"):
            raise PrometheusError(f"the answer {exc.message}; ask a narrower question") from None
        return None  # garbage, bad UTF-8, duplicate keys, or nested deeper than Python recurses


def api(server: Server, path: str, params: dict | None = None, post: bool = False, expect: str = "") -> object:
    """`data` of a successful /api/v1/<path> answer (see `answer`), read within the deadline."""
    body = urllib.parse.urlencode(params or {}, doseq=True)
    status, raw = fetch(server, f"api/v1/{path}", body, post=post)
    data = answer(server.base, path, status, raw, expect)
    server.remaining()
    return data


def answer(base: str, path: str, status: int, raw: bytes, expect: str = "") -> object:
    """`data` of an /api/v1/<path> answer, its shape checked for the endpoints genobs
    reads (`query`: an instant vector, or a range vector where `expect` is "matrix";
    `query_range`: a range vector; `label/.../values`: names)."""
    url = _quote(redact(f"{base.rstrip('/')}/api/v1/{path}"))
    try:
        doc = _json(raw, path)
    except PrometheusError as exc:
        raise PrometheusError(f"{url}: {exc}") from None
    if status >= 300:
        detail = doc.get("error") if isinstance(doc, dict) else None
        extra = f": {_quote(str(detail))}" if isinstance(detail, str) and detail else ""
        hint = " (a redirect: pass the URL it points to)" if 300 <= status < 400 else ""
        raise PrometheusError(f"{url}: HTTP {status}{extra}{hint}")
    if not isinstance(doc, dict):
        raise PrometheusError(f"{url} did not answer with a JSON object; is {_quote(redact(base))} a Prometheus server?")
    if doc.get("status") != "success":
        err = doc.get("error", doc.get("status"))
        raise PrometheusError(f"{url}: {_quote(str(err)[:_SHOWN])}")
    data = doc.get("data")
    if path in ("query", "query_range"):
        matrix = expect == "matrix" or path == "query_range"
        why = _not_matrix(data) if matrix else _not_vector(data)
        if why:
            raise PrometheusError(f"{url}: the answer's data is not a query result ({why})")
    if path.startswith("label/") and not (isinstance(data, list) and all(isinstance(v, str) for v in data)):
        raise PrometheusError(f"{url}: the answer's data is not a list of names ({_quote(repr(data)[:80])})")
    return data


def _not_matrix(data: object) -> str:
    """What makes `data` other than a range vector of [time, "number"] samples; empty when it is one."""
    return _not_result(data, "matrix")


def _not_vector(data: object) -> str:
    """What makes `data` other than an instant vector of [time, "number"] samples; empty when it is one."""
    return _not_result(data, "vector")


def _not_result(data: object, kind: str) -> str:
    """What makes `data` other than a `kind` (vector: one sample per series, matrix: a list)."""
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        return "no result list"
    if data.get("resultType", "vector" if kind == "vector" else None) != kind:
        return f"resultType {_quote(repr(data.get('resultType'))[:40])}, not {kind}"
    if len(data["result"]) > MAX_SERIES:
        return f"more than {MAX_SERIES:,} series"
    for i, r in enumerate(data["result"]):
        if not isinstance(r, dict) or not isinstance(r.get("metric"), dict):
            return f"series {i} has no metric labels"
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in r["metric"].items()):
            return f"series {i} has labels that are not text"
        samples = [r.get("value")] if kind == "vector" else r.get("values")
        if not isinstance(samples, list):
            return f"series {i} has no sample list"
        for value in samples:
            if not (isinstance(value, list) and len(value) == 2 and isinstance(value[1], str)):
                return f"series {i} has no [time, \"value\"] sample"
            if isinstance(value[0], bool) or not isinstance(value[0], (int, float)):
                return f"series {i} has a sample time that is not a number"
            try:
                float(value[1])
            except ValueError:
                return f"series {i} has a sample value that is not a number ({_quote(value[1][:40])})"
    return ""

