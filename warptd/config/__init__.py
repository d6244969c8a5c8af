"""One settings model fed by CLI flags, ``WARPTD_*`` environment variables and an optional TOML file.

Each setting is one field of :class:`Settings` (settings.py): its type and bounds, its docstring and
its :class:`Knob` (knob.py); its flag (arguments.py), variable, file key and line in
docs/configuration.md (docs.py) are made from them. ``load_settings`` (loading.py) builds them.
"""

from __future__ import annotations

from warptd.config.knob import Option
from warptd.config.loading import key_text, load_settings, plain_message, problems_text
from warptd.config.settings import (
    DEFAULT_PORT,
    RELOADABLE,
    Settings,
    SettingsError,
    options,
    with_live_settings,
)
from warptd.config.values import SLURM_ROOTS, WINDOW_NAME, WORKLOAD_KINDS, WorkloadKind
from warptd.config.views import SettingsView

__all__ = [
    "DEFAULT_PORT",
    "RELOADABLE",
    "SLURM_ROOTS",
    "WINDOW_NAME",
    "WORKLOAD_KINDS",
    "Option",
    "Settings",
    "SettingsError",
    "SettingsView",
    "WorkloadKind",
    "key_text",
    "load_settings",
    "options",
    "plain_message",
    "problems_text",
    "with_live_settings",
]
