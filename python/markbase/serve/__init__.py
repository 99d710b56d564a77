"""`markbase serve`: an OpenAI-compatible HTTP server over one model (see serve/app.py)."""

from .app import create_app, serve

__all__ = ["create_app", "serve"]
