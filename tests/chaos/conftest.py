"""The full chaos forms (`chaos_full`) are deselected unless asked for: `-m chaos_full` or OSTINATO_CHAOS_FULL=1."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "chaos_full" in (config.getoption("markexpr") or "") or os.environ.get("OSTINATO_CHAOS_FULL") == "1":
        return
    full = [item for item in items if item.get_closest_marker("chaos_full") is not None]
    if full:
        config.hook.pytest_deselected(items=full)
        items[:] = [item for item in items if item.get_closest_marker("chaos_full") is None]
