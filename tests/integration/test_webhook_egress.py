"""Egress of webhooks (issue 26, defect 5): callbacks to the cloud metadata address, to loopback ports
(`http://localhost:5432/`) and to names that resolve inside the network are refused, judged on the
address actually connected, recorded with their reason (failed at once, no retries), on both databases;
an allow-list lets a local receiver through; `dags apply` warns of a refused literal URL and applies."""

from __future__ import annotations

import socket
import ssl
import subprocess

import pytest

from dagline.clock import FixedClock
from dagline.db.outbox import list_deliveries
from dagline.executors.noop import NoopExecutor
from dagline.scheduler.channels import Callback, DeliveryFailed, DeliveryRefused, SecretReader, webhook_channel
from dagline.scheduler.deliveries import CallbackSettings
from dagline.scheduler.loop import Scheduler
from dagline.store.runs import trigger_run
from tests.helpers.cli import cli
from tests.helpers.harness import apply, t, write_dag
from tests.helpers.receiver import Receiver

NOW = "2026-03-01T00:00:00Z"
HOOKS = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: inside}
spec:
  paused: false
  schedule: null
  callbacks:
    - {events: [success], webhook: {url: "http://169.254.169.254/latest/meta-data/"}}
    - {events: [success], webhook: {url: "http://localhost:5432/"}}
    - {events: [success], webhook: {urlFrom: {env: SECRET_HOOK_URL}}}
  tasks:
    - {id: a, spark: {mainApplicationFile: a.py}}
"""


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def _run(db, receiver, **settings):
    clock = FixedClock(t(NOW))
    Scheduler(db, NoopExecutor(4, clock=clock), clock=clock,
              secret_reader=SecretReader(environ={"SECRET_HOOK_URL": receiver.url}),
              callback_settings=CallbackSettings(**settings)).run(until_idle=True)
    with db.begin() as conn:
        return {row.target.get("url") or "SECRET_HOOK_URL": row for row in list_deliveries(conn)}


def test_metadata_and_loopback_destinations_are_refused_and_recorded_with_their_reason(db, tmp_path, receiver):
    apply(db, write_dag(tmp_path, HOOKS))
    trigger_run(db, "inside", logical_date=t(NOW), now=t(NOW))
    rows = _run(db, receiver)
    metadata, database, local = (rows["http://169.254.169.254/latest/meta-data/"], rows["http://localhost:5432/"],
                                 rows["SECRET_HOOK_URL"])
    # failed for good at the first attempt: retrying cannot change a refusal
    assert (metadata.state, metadata.attempts) == ("failed", 1)
    assert "169.254.169.254:80 (link-local address)" in metadata.last_error
    assert database.state == "failed" and ":5432 (loopback address)" in database.last_error
    assert "localhost resolves to" in database.last_error
    # a urlFrom value is judged the same way, when it is read: the receiver on loopback got nothing
    assert local.state == "failed" and "loopback" in local.last_error and receiver.bodies() == []


def test_an_allowed_loopback_port_is_delivered_and_other_ports_stay_refused(db, tmp_path, receiver):
    apply(db, write_dag(tmp_path, HOOKS))
    trigger_run(db, "inside", logical_date=t(NOW), now=t(NOW))
    rows = _run(db, receiver, allowed_networks=receiver.allowed_networks)  # 127.0.0.1/32:<its port>
    assert rows["SECRET_HOOK_URL"].state == "delivered" and len(receiver.bodies()) == 1
    assert rows["http://localhost:5432/"].state == "failed"  # same address, another port


def _callback(url: str) -> Callback:
    return Callback(1, "d-1", "webhook", "success", {"url": url}, {"dag_id": "x", "event": "success"}, 1)


@pytest.fixture
def resolver(monkeypatch):
    """A DNS whose answers for names under `.test` the test sets (a list per call: DNS rebinding)."""
    real = socket.getaddrinfo
    answers: dict[str, list[str]] = {}
    asked: list[str] = []

    def getaddrinfo(host, port, *args, **kwargs):
        if isinstance(host, str) and host.endswith(".test"):
            asked.append(host)
            address = answers[host].pop(0) if len(answers[host]) > 1 else answers[host][0]
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return answers, asked


def test_a_name_resolving_to_loopback_is_refused_unless_allowed(receiver, resolver):
    answers, _ = resolver
    answers["hooks.test"] = ["127.0.0.1"]
    url = f"http://hooks.test:{receiver.port}/hook"
    with pytest.raises(DeliveryRefused, match=r"hooks.test resolves to 127.0.0.1: .*loopback"):
        webhook_channel(SecretReader(environ={}), timeout_s=5)(_callback(url))
    assert receiver.received == []
    allowed = CallbackSettings(allowed_networks=receiver.allowed_networks).egress
    webhook_channel(SecretReader(environ={}), timeout_s=5, egress=allowed)(_callback(url))
    [(headers, _)] = receiver.received
    assert headers["Host"] == f"hooks.test:{receiver.port}"  # connected to the address, the request names the host


def test_dns_rebinding_cannot_reach_an_address_that_was_not_checked(receiver, resolver):
    """The name answers an allowed address to the check and a refused one afterwards: the delivery goes
    to the address that was checked, never to the second one (which has its own listener, on the same port)."""
    answers, asked = resolver
    inside = Receiver(host="127.0.0.2", port=receiver.port)
    try:
        answers["rebind.test"] = ["127.0.0.1", "127.0.0.2"]
        egress = CallbackSettings(allowed_networks="127.0.0.1/32").egress
        webhook_channel(SecretReader(environ={}), timeout_s=5, egress=egress)(
            _callback(f"http://rebind.test:{receiver.port}/hook"))
        assert len(receiver.received) == 1 and inside.received == [] and asked == ["rebind.test"]
        # and a name with one refused address among allowed ones is refused whatever the order
        answers["mixed.test"] = ["127.0.0.2"]
        with pytest.raises(DeliveryRefused):
            webhook_channel(SecretReader(environ={}), timeout_s=5, egress=egress)(
                _callback(f"http://mixed.test:{receiver.port}/hook"))
        assert inside.received == []
    finally:
        inside.close()


def test_https_sends_the_host_name_in_tls_and_checks_the_certificate_against_it(tmp_path, resolver, monkeypatch):
    """Connected to the checked address, the TLS handshake still names the URL's host (SNI) and the
    certificate is verified for that name, as on a direct connection."""
    answers, _ = resolver
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=hooks.test", "-addext", "subjectAltName=DNS:hooks.test"],
                   check=True, capture_output=True)
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(cert, key)
    names: list[str | None] = []
    server_side.sni_callback = lambda sock, name, context: names.append(name)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client trusts this certificate, for its name only
    answers["hooks.test"] = ["127.0.0.1"]
    answers["other.test"] = ["127.0.0.1"]
    secure = Receiver(tls=server_side)
    try:
        egress = CallbackSettings(allowed_networks=secure.allowed_networks).egress
        webhook_channel(SecretReader(environ={}), timeout_s=5, egress=egress)(
            _callback(f"https://hooks.test:{secure.port}/hook"))
        assert len(secure.received) == 1 and names == ["hooks.test"]
        with pytest.raises(DeliveryFailed, match="TLS"):  # the same server under another name: not its certificate
            webhook_channel(SecretReader(environ={}), timeout_s=5, egress=egress)(
                _callback(f"https://other.test:{secure.port}/hook"))
        assert len(secure.received) == 1
    finally:
        secure.close()


def test_apply_warns_of_a_refused_literal_url_and_applies_the_dag(sqlite_db, tmp_path, monkeypatch):
    path = write_dag(tmp_path, HOOKS)
    result = cli(sqlite_db, "dags", "apply", path)
    assert "inside: created" in result.output
    warnings = [line for line in result.stderr.splitlines() if "webhook will be refused" in line]
    assert [line.split(":")[2].strip() for line in warnings] == ["spec.callbacks[0].webhook.url",
                                                                 "spec.callbacks[1].webhook.url"]
    assert "link-local" in warnings[0] and "loopback" in warnings[1]
    monkeypatch.setenv("DAGLINE_CALLBACK_ALLOWED_NETWORKS", "169.254.169.254/32:80, 127.0.0.0/8")
    assert "webhook will be refused" not in cli(sqlite_db, "dags", "apply", path).stderr
