"""What a setting says of itself beyond its type and bounds: its flag, its line in docs/configuration.md,
whether a reload applies it. Every way of giving or showing a setting is made from these."""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import Field
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

#: The groups of settings, as ``--help`` titles their flags ("serving options"); each command takes some.
SERVING = "serving"
METRICS = "metric selection"
SAMPLING = "sampling"
RECORDING = "recording"
LOADING = "backends and logging"
#: The value's name of a size in bytes, which may be typed with a unit (16MiB).
SIZE = "SIZE"


@dataclass(frozen=True)
class Knob:
    """A setting's own metadata, beside pydantic's in its field (:func:`setting` puts it there).

    A setting with ``help`` has a flag: ``--`` and its name in hyphens (``--no-`` and its name for a
    switch that is on by default) unless ``flag`` names another; one without has only its ``WARPTD_*``
    variable and its key in the config file.
    """

    help: str = ""  # its flag's --help line, which ends with the default
    metavar: str | None = None  # its value's name in --help
    flag: str | None = None  # the flag, where it is not the setting's name (--backend sets backends)
    repeatable: bool = False  # a flag of one value, given again for more (--backend a --backend b)
    example: str | None = None  # docs: a value beside its variable (WARPTD_BACKENDS=nvidia,cpu)
    default_text: str | None = None  # docs: the default in words, where the value would not say it (all)
    live: bool = False  # a reload (SIGHUP) applies it to the running daemon


def setting(
    default: Any = PydanticUndefined,
    help: str = "",
    metavar: str | None = None,
    *,
    flag: str | None = None,
    repeatable: bool = False,
    example: str | None = None,
    default_text: str | None = None,
    live: bool = False,
    **bounds: Any,
) -> Any:
    """A setting's field, declared in one line: pydantic's ``Field(default, **bounds)`` (``gt``, ``le``,
    ``default_factory``) with the setting's :class:`Knob` in its metadata, where ``Annotated`` puts it:
    ``interval: float = setting(1.0, "between two samples", "SECONDS", gt=0, le=3600)``."""
    field = Field(default, **bounds)
    field.metadata.append(Knob(help, metavar, flag, repeatable, example, default_text, live))
    return field


@dataclass(frozen=True)
class Option:
    """One setting as its users give it: a flag, a ``WARPTD_*`` variable, a key of the config file."""

    name: str
    field: FieldInfo
    group: str  # the title of its flag's group in --help

    @property
    def knob(self) -> Knob:
        return next(meta for meta in self.field.metadata if isinstance(meta, Knob))

    @property
    def switch(self) -> bool:
        """A yes/no setting: its flag takes no value."""
        return self.field.annotation is bool

    @property
    def flag(self) -> str | None:
        """Its flag (``--no-`` and its name for a switch that is on by default), None if it has none."""
        knob = self.knob
        if not knob.help:
            return None
        off = self.switch and self.field.default is True
        return knob.flag or ("--no-" if off else "--") + self.name.replace("_", "-")

    @property
    def variable(self) -> str:
        return f"WARPTD_{self.name.upper()}"

    @property
    def kind(self) -> Any:
        """Its type without ``None`` (``float`` for ``float | None``)."""
        annotation = self.field.annotation
        if get_origin(annotation) in (Union, types.UnionType):
            (annotation,) = (arg for arg in get_args(annotation) if arg is not type(None))
        return annotation

    @property
    def choices(self) -> tuple[str, ...]:
        """The words it takes where it takes fixed ones (a ``Literal``), else none."""
        return get_args(self.kind) if get_origin(self.kind) is Literal else ()

    @property
    def typed_default(self) -> str:
        """Its default as one would type it: ``1`` for 1.0, ``8MiB`` for a size, ``a,b`` for a list."""
        value = self.field.default
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        if isinstance(value, int) and self.knob.metavar == SIZE:
            for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
                if value and value % size == 0:
                    return f"{value // size}{unit}"
        if isinstance(value, list):
            return ",".join(str(one) for one in value)
        return str(value)
