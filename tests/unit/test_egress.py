"""The egress policy of webhooks (`dagline.domain.egress`): which destination addresses are refused by
default, how an admin's allow-list (CIDRs, optionally per port) is read, and what `dags apply` can judge
of a literal URL without DNS."""

from __future__ import annotations

import pytest

from dagline.domain.egress import DEFAULT_EGRESS, EgressPolicy, literal_url_refusal
from dagline.errors import InvalidInput


@pytest.mark.parametrize("address, kind", [
    ("127.0.0.1", "loopback"), ("127.1.2.3", "loopback"), ("::1", "loopback"),
    ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("169.254.169.254", "link-local"), ("fe80::1", "link-local"),
    ("10.1.2.3", "private"), ("172.16.0.1", "private"), ("172.31.255.255", "private"), ("192.168.1.1", "private"),
    ("fd00::1", "private"), ("100.64.0.1", "shared (CGNAT)"), ("100.127.255.254", "shared (CGNAT)"),
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:169.254.169.254", "link-local"),  # IPv4 inside IPv6
    ("2002:a9fe:a9fe::", "link-local"), ("64:ff9b::a00:1", "private"),          # 6to4, NAT64
    ("224.0.0.1", "multicast"), ("ff02::1", "multicast"), ("192.0.2.1", "not globally routable"),
])
def test_internal_destinations_are_refused_by_default_naming_the_kind(address, kind):
    why = DEFAULT_EGRESS.refusal(address, 80)
    assert why is not None and f"({kind} address)" in why and "DAGLINE_CALLBACK_ALLOWED_NETWORKS" in why


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700::1111"])
def test_public_destinations_pass(address):
    assert DEFAULT_EGRESS.refusal(address, 443) is None


def test_an_allow_list_admits_networks_and_ports():
    policy = EgressPolicy.parse("10.20.0.0/16, 127.0.0.1/32:8080, [::1]:9000, [fd00::/8]:443, 192.168.1.7")
    assert policy.refusal("10.20.9.9", 1) is None and policy.refusal("10.21.0.1", 80) is not None
    assert policy.refusal("127.0.0.1", 8080) is None and policy.refusal("127.0.0.1", 5432) is not None
    assert policy.refusal("::1", 9000) is None and policy.refusal("::1", 9001) is not None
    assert policy.refusal("fd12::1", 443) is None and policy.refusal("192.168.1.7", 22) is None
    assert policy.refusal("::ffff:127.0.0.1", 8080) is None  # the IPv4 inside is what was allowed


@pytest.mark.parametrize("text", ["10.0.0.0/33", "localhost", "10.0.0.0/8:0", "10.0.0.0/8:http", "[::1]x"])
def test_a_malformed_allow_list_names_the_setting(text):
    with pytest.raises(InvalidInput) as exc:
        EgressPolicy.parse(text)
    assert exc.value.field == "DAGLINE_CALLBACK_ALLOWED_NETWORKS"


def test_apply_judges_ip_literals_and_localhost_and_leaves_names_to_delivery():
    assert "169.254.169.254:80" in literal_url_refusal("http://169.254.169.254/latest", DEFAULT_EGRESS)
    assert "127.0.0.1:5432" in literal_url_refusal("http://localhost:5432/", DEFAULT_EGRESS)
    assert "443" in literal_url_refusal("https://[::1]/x", DEFAULT_EGRESS)
    assert literal_url_refusal("http://app.localhost/", DEFAULT_EGRESS) is not None
    assert literal_url_refusal("https://hooks.example.com/x", DEFAULT_EGRESS) is None
    assert literal_url_refusal("https://93.184.216.34/x", DEFAULT_EGRESS) is None
