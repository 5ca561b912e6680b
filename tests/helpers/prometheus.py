"""Reading a `/metrics` page in tests: the value of one sample, parsed with prometheus_client's own parser."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def samples(page: str) -> dict[tuple[str, frozenset], float]:
    """{(sample name, frozenset of label items): value} for every sample on the page."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(page) for s in family.samples}


def value(page: str, name: str, **labels: str) -> float | None:
    """The sample `name{labels}` (None when the page has no such sample)."""
    return samples(page).get((name, frozenset(labels.items())))


def scrape(port: int, host: str = "127.0.0.1") -> str:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
        return response.read().decode()
