"""The web UI served by `ostinato server` at `/` (issue 20): server-rendered pages and htmx, over the HTTP API."""

from ostinato.services.frontend.ui.pages import install

__all__ = ["install"]
