"""The options `compare`, `doctor` and `backtest` share to reach a Prometheus: its URL, the
timeout of one request, the command's overall deadline and the credentials, read
from files or the environment (never from the command line, where `ps` shows them)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from genobs.errors import printable
from genobs.inputs import Unreadable, read_regular
from genobs.promhttp import PrometheusError, Server, basic, connect

PASSWORD_ENV = "GENOBS_PROMETHEUS_PASSWORD"
DEFAULT_DEADLINE = 120.0
_MAX_SECRET = 64 * 1024


DEFAULT_URL = "http://localhost:9090"

# --prometheus: where the Prometheus to ask answers (its HTTP API at URL/api/v1/)
url_option = click.option(
    "--prometheus",
    "url",
    default=DEFAULT_URL,
    show_default=True,
    metavar="URL",
    help="Base URL of the Prometheus to ask (HTTP API at URL/api/v1/).",
)


def prometheus_options(func):
    """--timeout, --deadline, --bearer-token-file, --basic-auth-user, --basic-auth-password-file."""
    options = [
        click.option("--timeout", type=float, default=10.0, show_default=True, help="Seconds per HTTP request."),
        click.option(
            "--deadline",
            type=float,
            default=DEFAULT_DEADLINE,
            show_default=True,
            help="Seconds for the whole command: every request and the reading of its answer.",
        ),
    ]
    func = credential_options(func)  # listed after the timeouts in --help, as before
    for option in reversed(options):
        func = option(func)
    return func


def credential_options(func):
    """--bearer-token-file, --basic-auth-user, --basic-auth-password-file."""
    options = [
        click.option(
            "--bearer-token-file",
            type=click.Path(path_type=Path),
            help="File holding a bearer token sent as 'Authorization: Bearer ...'.",
        ),
        click.option(
            "--basic-auth-user",
            metavar="USER",
            help=f"Basic-auth user; the password comes from --basic-auth-password-file or ${PASSWORD_ENV}.",
        ),
        click.option(
            "--basic-auth-password-file", type=click.Path(path_type=Path), help="File holding the basic-auth password."
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _secret(path: Path, what: str) -> str:
    try:
        raw = read_regular(path, _MAX_SECRET + 1, what, f"a {what} file is a regular file")
    except Unreadable as exc:  # a file name (or a link's target) may hold terminal escapes
        raise PrometheusError(printable(f"{path}: {exc.message}")) from None
    text = raw.decode("utf-8", "replace").strip()  # a trailing newline is how editors save it
    if len(raw) > _MAX_SECRET or not text or not (text.isascii() and text.isprintable()):
        raise PrometheusError(f"{printable(str(path))}: the {what} file must hold one line of printable ASCII")
    return text


def server_from(
    url: str,
    timeout: float,
    deadline: float,
    bearer_token_file: Path | None,
    basic_auth_user: str | None,
    basic_auth_password_file: Path | None,
) -> Server:
    """The Server the options describe, or PrometheusError (exit 2) saying which option is wrong."""
    if "://" not in url:
        url = "http://" + url
    authorization = authorization_from(bearer_token_file, basic_auth_user, basic_auth_password_file)
    return connect(url, timeout, deadline, authorization)


def authorization_from(
    bearer_token_file: Path | None, basic_auth_user: str | None, basic_auth_password_file: Path | None
) -> str:
    """The Authorization header the credential options describe ("" for none)."""
    authorization = ""
    if bearer_token_file is not None and (basic_auth_user or basic_auth_password_file):
        raise PrometheusError("give --bearer-token-file or basic auth, not both")
    if bearer_token_file is not None:
        authorization = "Bearer " + _secret(bearer_token_file, "bearer token")
    elif basic_auth_password_file is not None and not basic_auth_user:
        raise PrometheusError("--basic-auth-password-file needs --basic-auth-user")
    elif basic_auth_user:
        if ":" in basic_auth_user or not basic_auth_user.isprintable():
            raise PrometheusError("--basic-auth-user: a user name has no ':' and no control characters")
        if basic_auth_password_file is not None:
            password = _secret(basic_auth_password_file, "password")
        elif os.environ.get(PASSWORD_ENV):
            password = os.environ[PASSWORD_ENV]
        else:
            raise PrometheusError(f"--basic-auth-user needs --basic-auth-password-file or ${PASSWORD_ENV}")
        authorization = basic(basic_auth_user, password)
    return authorization
