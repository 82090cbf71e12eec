"""`ostinato.testing`: the public name of `ostinato.sdk.testing` (DESIGN.md §9)."""

from ostinato.sdk.testing import *  # noqa: F403
from ostinato.sdk.testing import __all__  # noqa: F401
