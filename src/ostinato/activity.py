"""`ostinato.activity`: the public name of `ostinato.sdk.activity` (DESIGN.md §9)."""

from ostinato.sdk.activity import *  # noqa: F403
from ostinato.sdk.activity import __all__  # noqa: F401
