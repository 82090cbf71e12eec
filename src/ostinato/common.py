"""`ostinato.common`: the public name of `ostinato.sdk.common` (DESIGN.md §9)."""

from ostinato.sdk.common import *  # noqa: F403
from ostinato.sdk.common import __all__  # noqa: F401
