"""Sending one webhook request to an address the egress policy allows, and to that address only.

`post(url, body, headers, policy=..., timeout_s=...)` resolves the URL's host once, judges every
address it resolves to (`dagline.domain.egress.EgressPolicy`: one refused address refuses the delivery,
whatever the order the resolver gives them in), then connects to an address it judged, never resolving
the name again: a name that answers a public address to the check and an internal one to the connection
(DNS rebinding) cannot get around the policy. The request still names the host: the `Host` header is
the URL's, and for https the TLS handshake sends the host name (SNI) and checks the certificate against
it, exactly as a direct connection would.

Redirects are not followed (a 3xx answer is a failed attempt: a redirect could lead anywhere), and no
HTTP proxy from the environment is used (the policy judges the destination, not a proxy in between).
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import urllib.parse
from collections.abc import Mapping

from dagline.domain.egress import EgressPolicy, url_address
from dagline.errors import DaglineError


class DeliveryFailed(DaglineError):
    """An attempt that did not get through; the message says why (it is stored as `last_error`). What
    dagline called refused or could not be reached: 502."""

    http_status = 502


class DeliveryRefused(DeliveryFailed):
    """A destination the egress policy refuses: failed for good at once (trying again changes nothing
    until a platform admin allows it; then `dagline callbacks redeliver` sends it)."""


def checked_addresses(host: str, port: int, policy: EgressPolicy) -> list[str]:
    """Every address `host` resolves to, once; DeliveryRefused if the policy refuses any of them."""
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        addresses = [str(literal)]
    else:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            raise DeliveryFailed(f"webhook not reached: cannot resolve {host}: {exc}") from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    for address in addresses:
        why = policy.refusal(address, port)
        if why is not None:
            resolved = "" if literal is not None else f"{host} resolves to {address}: "
            raise DeliveryRefused(f"refused: {resolved}{why}")
    return addresses


def _connection(scheme: str, host: str, port: int, address: str, timeout_s: float) -> http.client.HTTPConnection:
    if scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            host, port, timeout=timeout_s, context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout_s)

    def pinned(where, timeout, source_address=None):  # the checked address; the host name stays for Host/SNI
        return socket.create_connection((address, where[1]), timeout, source_address)

    conn._create_connection = pinned  # type: ignore[attr-defined]  # http.client's own hook for the socket
    return conn


def post(url: str, body: bytes, headers: Mapping[str, str], *, policy: EgressPolicy, timeout_s: float) -> None:
    """POST `body` to `url` through an allowed address; returns on 2xx, else raises DeliveryFailed
    (DeliveryRefused when the policy refuses the destination)."""
    try:
        parts = urllib.parse.urlsplit(url)
        host, port = url_address(url)
    except ValueError as exc:
        raise DeliveryFailed(f"webhook URL is not valid: {exc}") from None
    if parts.scheme not in ("http", "https") or not host:
        raise DeliveryFailed("webhook URL is not an http(s) URL with a host")
    addresses = checked_addresses(host, port, policy)
    target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    last_error: OSError | None = None
    for address in addresses:
        conn = _connection(parts.scheme, host, port, address, timeout_s)
        try:
            try:
                conn.connect()
            except ssl.SSLError as exc:
                raise DeliveryFailed(f"webhook not reached: TLS: {exc}") from None
            except OSError as exc:
                last_error = exc
                continue  # this address did not take the connection: the next checked one may
            try:
                conn.request("POST", target, body=body, headers=dict(headers))
                answer = conn.getresponse()
                answer.read()
            except (OSError, http.client.HTTPException) as exc:  # sent, perhaps: never to a second address
                raise DeliveryFailed(f"webhook not reached: {exc}") from None
        finally:
            conn.close()
        if not 200 <= answer.status < 300:
            raise DeliveryFailed(f"webhook answered {answer.status} {answer.reason}")
        return
    raise DeliveryFailed(f"webhook not reached: {last_error}")
