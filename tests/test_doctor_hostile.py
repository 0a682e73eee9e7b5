"""`genobs doctor` against broken and hostile servers, run in-process on loopback:
every bad answer is a clear exit-2 message within the timeout, in bounded memory,
with the server's text printed escaped."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from click.testing import CliRunner

from genobs.cli import main
from genobs.promhttp import MAX_BYTES

Handler = Callable[[socket.socket], None]


@contextlib.contextmanager
def serve(handler: Handler, heads: list[bytes] | None = None) -> Iterator[str]:
    """A raw TCP server on a free loopback port; `handler` writes whatever it likes.
    Each request (request line, headers and body) is appended to `heads` first."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def one(conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                # read a POST's body too: closing with unread bytes sends a reset, which can reach
                # the client before it has read a large answer ("connection reset by peer")
                head, _, rest = data.partition(b"\r\n\r\n")
                length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
                need = int(length.group(1)) if length else 0
                while len(rest) < need:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    rest += chunk
                if heads is not None:
                    heads.append(head + b"\r\n\r\n" + rest)
                handler(conn)
            except OSError:
                pass

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def reply(body: bytes, status: str = "200 OK", headers: str = "Content-Type: application/json\r\n") -> Handler:
    def handler(conn: socket.socket) -> None:
        conn.sendall(f"HTTP/1.1 {status}\r\n{headers}Content-Length: {len(body)}\r\n\r\n".encode() + body)

    return handler


def doctor(url: str, *args: str) -> tuple[int, str, float]:
    start = time.monotonic()
    result = CliRunner().invoke(main, ["doctor", "--prometheus", url, *args])
    return result.exit_code, result.output, time.monotonic() - start


def assert_clear(code: int, output: str, *needles: str) -> None:
    assert code == 2, output
    assert "Traceback" not in output and "internal error" not in output, output
    assert output.startswith("error: "), output
    assert not any(ord(c) < 32 and c != "\n" for c in output), repr(output)
    for n in needles:
        assert n in output, output


def ok(data: object) -> bytes:
    return json.dumps({"status": "success", "data": data}).encode()


ODD_SHAPES = [
    (b"[]", "JSON object"),
    (b'"success"', "JSON object"),
    (b"null", "JSON object"),
    (b'{"status": "success"}', "not a query result"),
    (ok([1, 2]), "not a query result"),
    (ok({"result": "x"}), "not a query result"),
    (ok({"result": [1]}), "not a query result"),
    (ok({"result": [{"metric": 5}]}), "not a query result"),
    (ok({"result": [{"metric": {"__name__": 5}}]}), "not a query result"),
    (b'{"status": "error", "error": "\\u001b[2K\\rforged line"}', "\\x1b[2K\\rforged line"),
    (b'{"status": ["x"]}', "error"),
    (b"[" * 100_000 + b"]" * 100_000, "JSON object"),  # deeper than Python recurses
    (b"\x00\xff\xfe garbage \x1b[31m", "JSON object"),
    # the shapes a wrong endpoint, a proxy or a broken server answers with
    (ok({"resultType": "matrix", "result": [{"metric": {}, "values": [[1, "1"]]}]}), "resultType 'matrix'"),
    (ok({"resultType": "vector", "result": [{"metric": {}}]}), "series 0 has no [time, \"value\"] sample"),
    (ok({"resultType": "vector", "result": [{"metric": {}, "value": [1, 2]}]}), "no [time, \"value\"] sample"),
    (ok({"resultType": "vector", "result": [{"metric": {}, "value": None}]}), "no [time, \"value\"] sample"),
    (ok({"resultType": "vector", "result": [{"metric": {}, "value": [1]}]}), "no [time, \"value\"] sample"),
    (ok({"resultType": "vector", "result": [{"metric": {}, "value": ["x", "1"]}]}), "time that is not a number"),
    (ok({"resultType": "vector", "result": [{"metric": {}, "value": [1, "fast"]}]}), "value that is not a number"),
    (ok({"resultType": "vector", "result": [{"value": [1, "1"]}]}), "series 0 has no metric labels"),
    (b'{"status": "success", "data": {"result": [{"metric": {}, "value": [1' + b"0" * 400 + b', "1"]}]}}', "JSON"),
    (b'{"status": "success", "status": "success", "data": []}', "JSON object"),
]


@pytest.mark.parametrize(("body", "needle"), ODD_SHAPES, ids=range(len(ODD_SHAPES)))
def test_odd_answers_are_clear_errors(body: bytes, needle: str):
    with serve(reply(body)) as url:
        code, output, _ = doctor(url)
    assert_clear(code, output, needle)


def test_label_values_that_are_not_names_are_a_clear_error():
    answers = iter([ok({"resultType": "vector", "result": []}), ok({"names": 1})])

    def handler(conn: socket.socket) -> None:
        reply(next(answers))(conn)

    with serve(handler) as url:
        code, output, _ = doctor(url)
    assert_clear(code, output, "not a list of names")


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\xff\x1b[2K garbage\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(500)) + b"\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: nope\r\n\r\n{}",
    ],
    ids=["garbage", "huge-header", "many-headers", "bad-length"],
)
def test_garbage_and_huge_headers_are_clear_errors(raw: bytes):
    def handler(conn: socket.socket) -> None:
        conn.sendall(raw)

    with serve(handler) as url:
        code, output, elapsed = doctor(url, "--timeout", "5")
    assert_clear(code, output)
    assert elapsed < 10


def test_http_errors_and_redirects_say_what_happened():
    with serve(reply(b'{"error": "bad \\u001b query"}', "500 Internal Server Error")) as url:
        code, output, _ = doctor(url)
    assert_clear(code, output, "HTTP 500", "bad \\x1b query")
    with serve(reply(b"", "302 Found", "Location: http://elsewhere/\r\n")) as url:
        code, output, _ = doctor(url)
    assert_clear(code, output, "HTTP 302", "redirect")


@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_server_dripping_one_byte_every_2s_times_out(where: str):
    """Before: each recv got a byte within the socket timeout, so doctor waited forever."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    drip = head if where == "headers" else head + b"Content-Length: 100000\r\n\r\n"

    def handler(conn: socket.socket) -> None:
        conn.sendall(drip[:10] if where == "headers" else drip)
        for _ in range(30):
            time.sleep(2 if where == "headers" else 1)
            conn.sendall(b"X" if where == "headers" else b" ")

    with serve(handler) as url:
        code, output, elapsed = doctor(url, "--timeout", "3")
    assert_clear(code, output, "no complete answer within 3s")
    assert elapsed < 8, elapsed


def test_an_endless_body_is_cut_at_the_size_cap():
    chunk = b"[" + b"0," * 32768

    def handler(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        frame = b"%x\r\n%s\r\n" % (len(chunk), chunk)
        for _ in range(10 * MAX_BYTES // len(chunk)):
            conn.sendall(frame)

    import resource

    with serve(handler) as url:
        code, output, elapsed = doctor(url, "--timeout", "60")
    assert_clear(code, output, f"larger than {MAX_BYTES // 2**20} MiB")
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert peak_mib < 1024, peak_mib
    assert elapsed < 60


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("http://[::1", "malformed URL"),
        ("http://localhost:99999", "malformed URL"),
        ("http://localhost:abc", "malformed URL"),
        ("ftp://localhost:9090", "use http:// or https://"),
        ("http://", "no host name"),
        ("http://exa mple.com", "malformed URL"),
        ("http://localhost:9090/\x1b[2K", "malformed URL"),
    ],
)
def test_malformed_urls_are_clear_errors(url: str, needle: str):
    code, output, elapsed = doctor(url)
    assert_clear(code, output, needle)
    assert elapsed < 5


@pytest.mark.parametrize("timeout", ["0", "-1", "inf", "nan", "1e9"])
def test_timeout_must_be_a_plausible_number_of_seconds(timeout: str):
    code, output, _ = doctor("http://127.0.0.1:9", "--timeout", timeout)
    assert_clear(code, output, "timeout")


def test_unreachable_server_is_a_clear_error():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, output, _ = doctor(f"http://127.0.0.1:{port}")
    assert_clear(code, output, "cannot reach Prometheus")


# --- credentials: sent to the one host asked, never printed, never sent across a redirect ---------

SECRET = "s3cret-pa55"


def _empty_prometheus(expected: str, heads: list[bytes]) -> Handler:
    """Answers like a Prometheus with no series when the request carries `expected`, else 401."""

    def handler(conn: socket.socket) -> None:
        if f"\r\nauthorization: {expected}".lower().encode() not in heads[-1].lower():
            reply(b'{"status": "error", "error": "unauthorized"}', "401 Unauthorized")(conn)
        elif b"/label/" in heads[-1].split(b"\r\n", 1)[0]:
            reply(ok([]))(conn)
        else:
            reply(ok({"resultType": "vector", "result": []}))(conn)

    return handler


def _no_secret(output: str) -> None:
    assert SECRET not in output and "alice" not in output, output


def test_userinfo_is_sent_as_basic_auth_and_never_printed():
    heads: list[bytes] = []
    expected = "Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode()
    with serve(_empty_prometheus(expected, heads), heads) as url:
        host = url.removeprefix("http://")
        code, output, _ = doctor(f"http://alice:{SECRET}@{host}")
        assert code == 1 and f"Prometheus http://{host}" in output, output  # asked, no vLLM series
        _no_secret(output)
        code, output, _ = doctor(f"http://alice:wrong@{host}")
        assert_clear(code, output, "HTTP 401", "unauthorized")
        _no_secret(output)
    assert all(h.lower().count(b"authorization:") == 1 for h in heads)
    for bad in (
        f"http://alice:{SECRET}@127.0.0.1:99999",
        f"ftp://alice:{SECRET}@x",
        f"http://alice:{SECRET}@",
        f"http://alice:{SECRET}#x@127.0.0.1:9090",  # the parser reads the password as a port
        f"http://alice:{SECRET}?@127.0.0.1:9090",
        f"http://alice:{SECRET}/x@127.0.0.1:9090",
    ):
        code, output, _ = doctor(bad)
        assert_clear(code, output, "malformed URL")
        _no_secret(output)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, output, _ = doctor(f"http://alice:{SECRET}@127.0.0.1:{port}")
    assert_clear(code, output, "cannot reach Prometheus at http://127.0.0.1:")
    _no_secret(output)


def test_bearer_token_and_basic_auth_come_from_files_or_the_environment(tmp_path, monkeypatch):
    token, password = tmp_path / "token", tmp_path / "password"
    token.write_text(SECRET + "\n")
    password.write_text(SECRET + "\n")
    heads: list[bytes] = []
    with serve(_empty_prometheus(f"Bearer {SECRET}", heads), heads) as url:
        code, output, _ = doctor(url, "--bearer-token-file", str(token))
        assert code == 1, output
        _no_secret(output)
        code, output, _ = doctor(url)
        assert_clear(code, output, "HTTP 401")
    basic = "Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode()
    with serve(_empty_prometheus(basic, heads), heads) as url:
        code, output, _ = doctor(url, "--basic-auth-user", "alice", "--basic-auth-password-file", str(password))
        assert code == 1, output
        monkeypatch.setenv("GENOBS_PROMETHEUS_PASSWORD", SECRET)
        code, output, _ = doctor(url, "--basic-auth-user", "alice")
        assert code == 1, output
        _no_secret(output)
    monkeypatch.delenv("GENOBS_PROMETHEUS_PASSWORD")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for args, needle in (
        (["--basic-auth-user", "alice"], "needs --basic-auth-password-file or $GENOBS_PROMETHEUS_PASSWORD"),
        (["--basic-auth-password-file", str(password)], "needs --basic-auth-user"),
        (["--bearer-token-file", str(token), "--basic-auth-user", "alice"], "not both"),
        (["--bearer-token-file", str(fifo)], "not a regular file (a FIFO)"),
        (["--bearer-token-file", str(tmp_path / "none")], "cannot read bearer token"),
    ):
        code, output, _ = doctor("http://127.0.0.1:9", *args)
        assert_clear(code, output, needle)


def test_credentials_are_never_sent_across_a_redirect():
    caught: list[bytes] = []
    with serve(reply(ok([])), caught) as elsewhere:
        heads: list[bytes] = []
        moved = reply(b"", "307 Temporary Redirect", f"Location: {elsewhere}/api/v1/query\r\n")
        with serve(moved, heads) as url:
            host = url.removeprefix("http://")
            code, output, _ = doctor(f"http://alice:{SECRET}@{host}")
    assert_clear(code, output, "HTTP 307", "redirect")
    _no_secret(output)
    assert heads and not caught  # asked the one host, never the one it pointed to


def test_one_deadline_covers_every_request():
    def slow(conn: socket.socket) -> None:
        time.sleep(1.2)
        reply(ok({"resultType": "vector", "result": []}))(conn)

    with serve(slow) as url:
        code, output, elapsed = doctor(url, "--timeout", "10", "--deadline", "2")
    assert_clear(code, output, "within the overall deadline of 2s (--deadline)")
    assert elapsed < 4, elapsed
    for bad in ("0", "-1", "nan", "1e9"):
        code, output, _ = doctor("http://127.0.0.1:9", "--deadline", bad)
        assert_clear(code, output, "deadline must be above 0")


def test_a_million_series_are_refused_before_they_are_built():
    series = b'{"metric":{},"value":[1,"1"]},' * 1_000_000
    body = b'{"status":"success","data":{"resultType":"vector","result":[' + series[:-1] + b"]}}"
    import resource

    with serve(reply(body)) as url:
        code, output, elapsed = doctor(url, "--timeout", "60")
    assert_clear(code, output, "holds more than 2,000,000 strings")
    assert elapsed < 20, elapsed
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 < 1024
