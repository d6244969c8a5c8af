"""Settings loaded from flags, ``WARPTD_*`` variables and the config file, and what is wrong with them in
one line that shows no file's contents and no secret."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from warptd.config.settings import Settings, SettingsError


def load_settings(**overrides: object) -> Settings:
    """Build the settings, raising :class:`SettingsError` with a one-line message on any bad value."""
    values = {k: v for k, v in overrides.items() if v is not None}
    config_file = values.get("config") or os.environ.get("WARPTD_CONFIG")
    if config_file and not Path(str(config_file)).is_file():
        what = "not a regular file" if Path(str(config_file)).exists() else "no such file"
        raise SettingsError(f"invalid setting config: {what} {config_file}")
    try:
        return Settings(**values)
    except ValidationError as exc:
        raise SettingsError(_one_line(exc, set(values), config_file)) from None
    except ValueError as exc:  # e.g. a TOML syntax error: tomllib names the line, never its text
        raise SettingsError(f"invalid config file {config_file}: {exc}") from None
    except RecursionError:  # a value nested past what validation recurses through
        raise SettingsError(f"invalid config file {config_file}: nested too deep") from None


#: Words that make a key's value a secret wherever it is read (settings, the config file, the web
#: config): a message never shows such a value, whatever it is.
SECRET_WORDS = ("pass", "token", "secret", "key", "credential", "auth", "cookie", "private", "session")
#: A key a message may name: one that looks like a setting's (a file whose keys are not names is no
#: config file, and its keys are its contents).
_NAMED_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
#: Problems one message lists; a file of another kind would otherwise make one line of hundreds.
MOST_PROBLEMS = 5


def is_secret(name: str) -> bool:
    """A key whose value is never shown: its name holds a :data:`SECRET_WORDS` word."""
    lowered = name.lower()
    return any(word in lowered for word in SECRET_WORDS)


def key_text(location: tuple[object, ...]) -> str | None:
    """A key's dotted path as a message shows it; None where a part does not look like a key's name
    (a list position is shown as its number)."""
    parts = [str(part) for part in location]
    if not all(_NAMED_KEY.fullmatch(part) or part.isdigit() for part in parts):
        return None
    return ".".join(parts)


def problems_text(problems: list[str]) -> str:
    """At most :data:`MOST_PROBLEMS` problems in one line, and how many more there were."""
    shown = "; ".join(problems[:MOST_PROBLEMS])
    more = len(problems) - MOST_PROBLEMS
    return f"{shown}; and {more} more" if more > 0 else shown


def _one_line(exc: ValidationError, given: set[str], config_file: object) -> str:
    """Each bad setting, named, with what is wrong with it. A value is shown only where a flag or a
    ``WARPTD_*`` variable gave it, and never a secret's: a config file's contents never reach the log
    (``config`` may point at any file the daemon can read)."""
    parts, strangers = [], 0
    for err in exc.errors():
        location = tuple(err["loc"])
        name = key_text(location)
        if err["type"] == "extra_forbidden":
            if name is None:
                strangers += 1
            else:
                parts.append(f"{name}: no such setting")
            continue
        name = name or "settings"
        setting = str(location[0]) if location else ""
        typed = setting in given or f"WARPTD_{setting.upper()}" in os.environ
        value = err.get("input")
        secret = any(is_secret(str(part)) for part in location)
        shown = f"={_shown(value)}" if typed and not secret and not isinstance(value, dict) else ""
        parts.append(f"{name}{shown}: {plain_message(err)}")
    if strangers:
        where = f" in {config_file}" if config_file else ""
        parts.append(f"{strangers} key(s){where} that are no setting's name (is it warptd's config file?)")
    return "invalid setting " + problems_text(parts)


def _shown(value: object) -> str:
    """A value a flag or variable gave, as a message shows it: its repr, at most 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:79] + "…"


#: What pydantic puts before the message of an exception raised in a validator.
_PYDANTIC_PREFIXES = ("Value error, ", "Assertion failed, ")


def plain_message(error: Mapping[str, Any]) -> str:
    """One pydantic error's message without the library's own prefix (``Value error, ``)."""
    message = str(error["msg"])
    for prefix in _PYDANTIC_PREFIXES:
        message = message.removeprefix(prefix)
    return message
