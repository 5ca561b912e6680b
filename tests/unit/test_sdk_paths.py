"""Jobs written against the old import paths keep working: `dagline.client` and `dagline.streaming`
are the `dagline.sdk` modules, imported with a DeprecationWarning that names the new path."""

from __future__ import annotations

import importlib
import sys

import pytest

from dagline.sdk import client, streaming


@pytest.mark.parametrize(("old", "new"), [("dagline.client", client), ("dagline.streaming", streaming)])
def test_the_old_path_warns_and_gives_the_same_functions(old, new):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=new.__name__):
        module = importlib.import_module(old)
    assert module.__all__ == new.__all__
    assert all(getattr(module, name) is getattr(new, name) for name in new.__all__)
