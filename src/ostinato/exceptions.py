"""`ostinato.exceptions`: the public name of `ostinato.sdk.exceptions` (DESIGN.md §9)."""

from ostinato.sdk.exceptions import *  # noqa: F403
from ostinato.sdk.exceptions import __all__  # noqa: F401
