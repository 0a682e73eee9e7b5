"""The Prometheus HTTP API as `doctor` and `compare` ask it, hardened against
broken or hostile servers: one deadline for the whole exchange (connect, headers
and body; a server dripping a byte every second cannot stretch it), a cap on the
answer's size, and every malformed answer (bad URL, garbage bytes, huge headers,
odd JSON shapes, deep JSON) turned into a PrometheusError with a printable
message. Only the standard library; proxies from the environment are not used."""

from __future__ import annotations

import http.client
import json
import math
import socket
import ssl
import threading
import urllib.parse

from genobs.errors import printable

MAX_BYTES = 32 * 1024 * 1024  # every metric name of a large Prometheus is a few MB
MAX_TIMEOUT = 600.0
_SHOWN = 200  # characters of a server's own text quoted in a message


class PrometheusError(Exception):
    """Prometheus could not be asked (unreachable, HTTP error, not a Prometheus API)."""


def _quote(text: str) -> str:
    text = printable(text)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def check_url(base: str) -> urllib.parse.SplitResult:
    """The parsed base URL, or a PrometheusError saying what is wrong with it."""
    bad = next((c for c in base if not (c.isascii() and c.isprintable()) or c == " "), None)
    if bad is not None:
        raise PrometheusError(f"malformed URL {_quote(base)!r}: it contains {_quote(repr(bad))}")
    try:
        parts = urllib.parse.urlsplit(base)
        port = parts.port
    except ValueError as exc:
        raise PrometheusError(f"malformed URL {_quote(base)!r}: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise PrometheusError(f"malformed URL {_quote(base)!r}: use http:// or https://")
    if not parts.hostname:
        raise PrometheusError(f"malformed URL {_quote(base)!r}: no host name")
    if port == 0:
        raise PrometheusError(f"malformed URL {_quote(base)!r}: port 0")
    return parts


def check_timeout(timeout: float) -> float:
    if not (math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT):
        raise PrometheusError(f"timeout must be above 0 and at most {MAX_TIMEOUT:g} seconds, got {timeout!r}")
    return timeout


def fetch(base: str, path: str, body: str = "", post: bool = False, timeout: float = 10.0) -> tuple[int, bytes]:
    """(HTTP status, body) of one request; the whole exchange ends within `timeout`."""
    parts = check_url(base)
    check_timeout(timeout)
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
    url = f"{base.rstrip('/')}/{path}"
    try:
        headers = {"Accept": "application/json", "User-Agent": "genobs"}
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
            raise PrometheusError(f"{url}: no complete answer within {timeout:g}s (--timeout)") from None
        if isinstance(exc, http.client.HTTPException):
            what = type(exc).__name__ + (f": {exc}" if str(exc) else "")
            raise PrometheusError(f"{url}: not a valid HTTP answer ({_quote(what)})") from None
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise PrometheusError(f"cannot reach Prometheus at {_quote(base)}: {_quote(reason)}") from None
    finally:
        timer.cancel()
        conn.close()


def _json(raw: bytes) -> object:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # garbage, bad UTF-8, or nested deeper than Python recurses
        return None


def api(base: str, path: str, params: dict | None = None, timeout: float = 10.0, post: bool = False) -> object:
    """`data` of a successful /api/v1/<path> answer, its shape checked for the
    endpoints genobs reads (`query`, `query_range`: a result list of series; `label/.../values`: names)."""
    url = f"{base.rstrip('/')}/api/v1/{path}"
    body = urllib.parse.urlencode(params or {}, doseq=True)
    status, raw = fetch(base, f"api/v1/{path}", body, post=post, timeout=timeout)
    doc = _json(raw)
    if status >= 300:
        detail = doc.get("error") if isinstance(doc, dict) else None
        extra = f": {_quote(str(detail))}" if isinstance(detail, str) and detail else ""
        hint = " (a redirect: pass the URL it points to)" if 300 <= status < 400 else ""
        raise PrometheusError(f"{url}: HTTP {status}{extra}{hint}")
    if not isinstance(doc, dict):
        raise PrometheusError(f"{url} did not answer with a JSON object; is {_quote(base)} a Prometheus server?")
    if doc.get("status") != "success":
        err = doc.get("error", doc.get("status"))
        raise PrometheusError(f"{url}: {_quote(str(err))}")
    data = doc.get("data")
    if path in ("query", "query_range") and not _is_vector(data):
        raise PrometheusError(f"{url}: the answer's data is not a query result ({_quote(json.dumps(data)[:80])})")
    if path.startswith("label/") and not (isinstance(data, list) and all(isinstance(v, str) for v in data)):
        raise PrometheusError(f"{url}: the answer's data is not a list of names ({_quote(json.dumps(data)[:80])})")
    return data


def _is_vector(data: object) -> bool:
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        return False
    for r in data["result"]:
        if not isinstance(r, dict) or not isinstance(r.get("metric", {}), dict):
            return False
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in r.get("metric", {}).items()):
            return False
    return True
