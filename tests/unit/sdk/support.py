"""What the SDK's tests share."""

from __future__ import annotations

import asyncio
import functools
from typing import Any


def run_async(fn: Any) -> Any:
    """Run an async test on a fresh event loop (the suite has no asyncio plugin)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(fn(*args, **kwargs))

    return wrapper
