"""Whose change a stored event or signal is, and which readers' live streams are told of it (web.live)."""

from __future__ import annotations

from dagline.web.live import PLATFORM, UNATTRIBUTED, changed_namespaces, wants


def test_each_change_is_its_dags_its_pools_or_its_senders_namespaces():
    events = [(1, "a-team/etl", None), (2, "etl", None), (3, None, "pool team-b/spark"), (4, None, "pool shared")]
    assert changed_namespaces(events, []) == {"a-team", "default", "team-b", PLATFORM}
    assert changed_namespaces([], [(7, "ml"), (8, "default")]) == {"ml", "default"}
    assert changed_namespaces([(5, None, None)], []) == {UNATTRIBUTED}  # a scheduler replica's, say


def test_a_limited_reader_is_told_of_its_namespaces_and_the_platforms_changes_only():
    assert wants(None, {"team-b"}) and wants(None, {UNATTRIBUTED})  # unlimited: every change
    assert not wants(frozenset({"a-team"}), {"team-b"})
    assert not wants(frozenset({"a-team"}), {UNATTRIBUTED})
    assert wants(frozenset({"a-team"}), {"team-b", "a-team"})
    assert wants(frozenset({"a-team"}), {PLATFORM})  # a platform pool: on every reader's /pools page
    assert not wants(None, set())
