"""Typed views of a group of settings, for the parts of the daemon that read them (HTTP, windows)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Self

from warptd.config.settings import Settings


class SettingsView:
    """A frozen dataclass of settings under short names: each field without a value of its own is the
    setting ``prefix`` + its name, with that setting's default; ``of(settings)`` reads them all. The
    part that reads the settings declares which, typed, and never copies a default or a field by hand.

    ``class HttpLimits(SettingsView, prefix="http_"): header_timeout: float`` reads ``http_header_timeout``.
    """

    prefix: ClassVar[str] = ""

    def __init_subclass__(cls, prefix: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.prefix = prefix
        for name in vars(cls).get("__annotations__", {}):
            if name not in vars(cls):  # a ClassVar with a value is the view's own
                setattr(cls, name, Settings.model_fields[prefix + name].default)
        dataclass(frozen=True)(cls)

    @classmethod
    def of(cls, settings: Settings) -> Self:
        """The view of these settings."""
        return cls(**{field.name: getattr(settings, cls.prefix + field.name) for field in fields(cls)})
