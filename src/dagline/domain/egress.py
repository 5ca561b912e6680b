"""Egress of webhooks: which network addresses a callback may be delivered to.

Pure domain. A webhook URL is written by a DAG author, and the scheduler that sends it sits inside the
platform's network, beside its database, the cloud's metadata service and every internal port. So by
default a delivery refuses any destination address that is

* loopback (127.0.0.0/8, ::1), unspecified (0.0.0.0, ::),
* link-local (169.254.0.0/16, the cloud metadata service among them; fe80::/10),
* private (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7) or shared/CGNAT (100.64.0.0/10),
* or any other address that is not globally routable (multicast, reserved, documentation ranges),

and an IPv6 address that embeds an IPv4 one (`::ffff:127.0.0.1`, 6to4, NAT64) is judged by the IPv4
address inside. The address judged is the one connected to: the deliverer resolves the host once,
judges every address it resolves to, and connects to the address it judged (see
`dagline.scheduler.egress`), so a name that resolves to a public address when checked and to an
internal one when connected (DNS rebinding) gets nowhere.

A platform admin allows networks with `DAGLINE_CALLBACK_ALLOWED_NETWORKS` (the chart's
`callbacks.allowedNetworks`): a comma list of CIDRs (`10.20.0.0/16`), a single address, or either with
a port (`127.0.0.1/32:8080`, `[::1]:9000`) to allow only that port.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import urllib.parse

from dagline.errors import InvalidInput

ALLOWED_NETWORKS_SETTING = "DAGLINE_CALLBACK_ALLOWED_NETWORKS"

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("unspecified", ("0.0.0.0/32", "::/128")),
    ("loopback", ("127.0.0.0/8", "::1/128")),
    ("link-local", ("169.254.0.0/16", "fe80::/10")),
    ("private", ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")),
    ("shared (CGNAT)", ("100.64.0.0/10",)),
)
REFUSED_NETWORKS: tuple[tuple[str, Network], ...] = tuple(
    (kind, ipaddress.ip_network(cidr)) for kind, cidrs in _KINDS for cidr in cidrs)


@dataclasses.dataclass(frozen=True)
class AllowedNetwork:
    """A network a platform admin allowed, on every port or on one."""

    network: Network
    port: int | None = None

    def admits(self, address: Address, port: int) -> bool:
        return address.version == self.network.version and address in self.network and (
            self.port is None or self.port == port)

    def __str__(self) -> str:
        return f"{self.network}" if self.port is None else f"{self.network}:{self.port}"


def _embedded_ipv4(address: Address) -> Address:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, Teredo's client, NAT64), else the address."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address.teredo is not None:
            return address.teredo[1]
        if address in ipaddress.ip_network("64:ff9b::/96"):
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


@dataclasses.dataclass(frozen=True)
class EgressPolicy:
    """The default refusals, minus what the platform admin allowed."""

    allowed: tuple[AllowedNetwork, ...] = ()

    @classmethod
    def parse(cls, text: str | None, *, field: str = ALLOWED_NETWORKS_SETTING) -> EgressPolicy:
        """The policy of a comma list such as `10.20.0.0/16, 127.0.0.1/32:8080, [::1]:9000`."""
        return cls(tuple(_parse_entry(entry.strip(), field) for entry in (text or "").split(",") if entry.strip()))

    def refusal(self, address: str | Address, port: int) -> str | None:
        """Why a delivery to `address`:`port` is refused, or None when it may go."""
        address = ipaddress.ip_address(address) if isinstance(address, str) else address
        if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
            address = ipaddress.IPv6Address(str(address).split("%", 1)[0])
        if any(allowed.admits(address, port) for allowed in self.allowed):
            return None
        judged = _embedded_ipv4(address)
        if judged != address and any(allowed.admits(judged, port) for allowed in self.allowed):
            return None
        kind = next((kind for kind, network in REFUSED_NETWORKS
                     if network.version == judged.version and judged in network), None)
        if kind is None and judged.is_multicast:
            kind = "multicast"
        elif kind is None and (not judged.is_global or judged.is_reserved):
            kind = "not globally routable"
        if kind is None:
            return None
        shown = f"[{address}]" if address.version == 6 else str(address)
        return (f"destination {shown}:{port} ({kind} address): webhooks are not delivered inside the "
                f"platform's network unless a platform admin allows it ({ALLOWED_NETWORKS_SETTING} / the chart's "
                "callbacks.allowedNetworks)")


def _parse_entry(entry: str, field: str) -> AllowedNetwork:
    def bad(why: str) -> InvalidInput:
        return InvalidInput(f"{entry!r} {why} (write a CIDR such as 10.20.0.0/16, optionally with a port: "
                            "127.0.0.1/32:8080 or [::1]:9000)", field=field)

    text, port = entry, None
    if text.startswith("["):  # [v6] or [v6]:port or [v6/len]:port
        inside, _, rest = text[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise bad("has text after ']'")
        text, port = inside, rest[1:] if rest else None
    elif "/" in text:  # CIDR, then an optional :port after the prefix length
        network, _, length = text.partition("/")
        length, _, port = length.partition(":")
        text, port = f"{network}/{length}", port or None
    elif text.count(":") == 1:  # v4:port
        text, port = text.split(":")
    try:
        network = ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise bad("is not a network") from None
    if port is not None:
        if not port.isdigit() or not 0 < int(port) <= 65535:
            raise bad("has no valid port")
        return AllowedNetwork(network, int(port))
    return AllowedNetwork(network)


LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


def url_address(url: str) -> tuple[str, int]:
    """(host, port) of an http(s) URL, the port defaulted by the scheme."""
    parts = urllib.parse.urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.hostname or "", port


def literal_url_refusal(url: str, policy: EgressPolicy) -> str | None:
    """Why a literal webhook URL is refused, judged without DNS: an IP literal, or a name that is
    loopback by definition (`localhost`, `*.localhost`). Other names are judged at delivery."""
    try:
        host, port = url_address(url)
    except ValueError:
        return None  # the spec's own check names a bad URL
    host = host.rstrip(".").lower()
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if host in LOCAL_NAMES or host.endswith(".localhost"):
            address = ipaddress.ip_address("127.0.0.1")
        else:
            return None
    return policy.refusal(address, port)


DEFAULT_EGRESS = EgressPolicy()
