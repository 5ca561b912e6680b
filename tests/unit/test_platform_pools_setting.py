"""`DAGLINE_PLATFORM_POOLS` (the chart's `pools`): the platform's shared pools, parsed once and
refused with the variable named when malformed (docs/adr/0050)."""

from __future__ import annotations

import pytest

from dagline.errors import InvalidInput
from dagline.k8s.settings import OperatorSettings


def test_platform_pools_are_read_as_name_and_slots():
    settings = OperatorSettings.from_env({"DAGLINE_PLATFORM_POOLS": '{"spark": 32, "default": 256}'})
    assert settings.platform_pools == (("default", 256), ("spark", 32))
    assert OperatorSettings.from_env({}).platform_pools == ()


@pytest.mark.parametrize("raw, why", [
    ("[1, 2]", "must be a JSON object"),
    ("{not json", "must be a JSON object"),
    ('{"spark": -1}', "slots must be a whole number"),
    ('{"spark": "4"}', "slots must be a whole number"),
    ('{"bad name!": 4}', "is not a pool name"),
])
def test_a_malformed_value_names_the_variable(raw, why):
    with pytest.raises(InvalidInput) as refused:
        OperatorSettings.from_env({"DAGLINE_PLATFORM_POOLS": raw})
    assert refused.value.field == "DAGLINE_PLATFORM_POOLS" and why in refused.value.reason
