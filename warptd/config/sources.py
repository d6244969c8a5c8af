"""Where settings come from besides flags and ``WARPTD_*`` variables: the TOML config file."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic_settings import InitSettingsSource, PydanticBaseSettingsSource, TomlConfigSettingsSource

from warptd import files


class TomlFile(TomlConfigSettingsSource):
    """The config file, read as every file that others can shape is (:mod:`warptd.files`); any
    problem with it, nesting too deep for the parser included, is a ``ValueError`` of one line."""

    def _read_file(self, file_path: Path | Any) -> dict[str, Any]:
        try:
            return tomllib.loads(files.read_text(file_path))
        except OSError as exc:
            raise ValueError(exc.strerror or str(exc)) from None
        except RecursionError:
            raise ValueError("nested too deep") from None


def config_file(init_settings: PydanticBaseSettingsSource) -> Path | None:
    """The config file a flag (``--config``) or ``WARPTD_CONFIG`` names, if any."""
    given = init_settings.init_kwargs.get("config") if isinstance(init_settings, InitSettingsSource) else None
    given = given or os.environ.get("WARPTD_CONFIG")
    return Path(given) if given else None
