"""Resolves ``module:attribute`` strings, the form entry points and built-in tables use."""

from __future__ import annotations

import importlib


def resolve_target(target: str) -> object:
    """Import ``module`` and return its ``attribute``; ImportError/AttributeError name the target."""
    module_name, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module_name), attribute)
