"""Ostinato: durable workflows on Apache Kafka.

`from ostinato import workflow, activity, RetryPolicy` loads the SDK on first use, so the server and the command
line do not pay for it.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"
__all__ = ["RetryPolicy", "activity", "workflow"]


def __getattr__(name: str) -> Any:
    if name in ("workflow", "activity"):
        return importlib.import_module(f"ostinato.{name}")
    if name == "RetryPolicy":
        from ostinato.sdk.common import RetryPolicy

        return RetryPolicy
    raise AttributeError(f"module 'ostinato' has no attribute {name!r}")
