"""`ostinato.client`: the public name of `ostinato.sdk.client` (DESIGN.md §9)."""

from ostinato.sdk.client import *  # noqa: F403
from ostinato.sdk.client import __all__  # noqa: F401
