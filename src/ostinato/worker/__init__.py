"""`ostinato.worker`: the public name of `ostinato.sdk.worker` (DESIGN.md §9)."""

from ostinato.sdk.worker import *  # noqa: F403
from ostinato.sdk.worker import __all__  # noqa: F401
