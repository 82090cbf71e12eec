"""`ostinato.workflow`: the public name of `ostinato.sdk.workflow` (DESIGN.md §9)."""

from ostinato.sdk.workflow import *  # noqa: F403
from ostinato.sdk.workflow import __all__  # noqa: F401
