"""TLS and basic auth for every endpoint, from a web-config file in the Prometheus exporter-toolkit format.

    tls_server_config:
      cert_file: /etc/warptd/tls.crt
      key_file: /etc/warptd/tls.key
      client_auth_type: RequireAndVerifyClientCert   # optional mTLS
      client_ca_file: /etc/warptd/ca.crt
      min_version: TLS12
    basic_auth_users:
      prometheus: $2y$10$...                         # bcrypt (htpasswd -nBC 10 "" | tr -d ':')

Needs the ``web`` extra (pyyaml, bcrypt).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import ssl
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, ValidationError

from warptd import files
from warptd.config import SettingsError, key_text, plain_message, problems_text
from warptd.install import install_command
from warptd.models import WireModel

ClientAuth = Literal[
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
]
_VERIFY = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}


class TLSServerConfig(WireModel):
    model_config = ConfigDict(extra="forbid")

    cert_file: Path
    key_file: Path
    client_auth_type: ClientAuth = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: Literal["TLS12", "TLS13"] = "TLS12"


class WebConfig(WireModel):
    model_config = ConfigDict(extra="forbid")

    tls_server_config: TLSServerConfig | None = None
    basic_auth_users: dict[str, str] = Field(default_factory=dict)


def load_web_config(path: Path) -> WebConfig:
    """Parse and check the file now, so a mistake fails the start with one line."""
    try:
        import yaml
    except ImportError:
        raise SettingsError(f"web_config_file needs the web extra: {install_command('web')}") from None
    try:
        config = WebConfig.model_validate(yaml.safe_load(files.read_text(path)) or {})
    except OSError as exc:
        raise SettingsError(f"invalid setting web_config_file: {exc.strerror or exc}: {path}") from None
    except yaml.YAMLError as exc:
        raise SettingsError(f"invalid setting web_config_file: {_yaml_problem(exc)}") from None
    except RecursionError:
        raise SettingsError(f"invalid setting web_config_file: {path} is nested too deep") from None
    except ValidationError as exc:
        raise SettingsError(f"invalid setting web_config_file: {_problems(exc, path)}") from None
    if config.tls_server_config is not None:
        ssl_context(config.tls_server_config)  # unreadable or mismatched key/cert: fail now
    if config.basic_auth_users:
        try:
            import bcrypt
        except ImportError:
            raise SettingsError(f"basic_auth_users needs the web extra: {install_command('web')}") from None
        for user, hashed in config.basic_auth_users.items():
            try:
                bcrypt.checkpw(b"", hashed.encode())
            except ValueError:
                raise SettingsError(
                    f"invalid setting web_config_file: user {user!r} has no valid bcrypt hash"
                ) from None
    return config


def _problems(exc: ValidationError, path: Path) -> str:
    """What is wrong with the file, key by key, without its contents: a key is named only where it
    looks like one (the file may be any file the daemon can read, ``/etc/shadow`` included), and no
    value is ever shown (pydantic's messages hold none)."""
    problems, strangers = [], 0
    for error in exc.errors():
        name = key_text(tuple(error["loc"]))
        if name is None:
            strangers += 1
        elif error["type"] == "extra_forbidden":
            problems.append(f"{name}: not a web config key")
        else:
            problems.append(f"{name or 'the file'}: {plain_message(error)}")
    if strangers:
        kind = "an exporter-toolkit web config"
        problems.append(f"{strangers} key(s) that are no web config key's name (is {path} {kind}?)")
    return problems_text(problems)


def _yaml_problem(exc: Exception) -> str:
    """A YAML error in one line: what is wrong and where (PyYAML's own message spans several), with
    what PyYAML quotes of the file left out: the file's contents never reach the log."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if problem and mark is not None:
        return f"{_QUOTED.sub('…', problem)} at line {mark.line + 1}, column {mark.column + 1}"
    return "not YAML"


#: What PyYAML's problems quote of the file (a character, an alias, a tag).
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def ssl_context(tls: TLSServerConfig) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _VERSIONS[tls.min_version]
    try:
        for path in (tls.cert_file, tls.key_file, tls.client_ca_file):
            if path is not None:  # a FIFO would block OpenSSL's own read: checked as any such file
                files.read_bytes(path)
        context.load_cert_chain(tls.cert_file, tls.key_file)
        context.verify_mode = _VERIFY[tls.client_auth_type]
        if tls.client_ca_file is not None:
            context.load_verify_locations(tls.client_ca_file)
        elif tls.client_auth_type != "NoClientCert":
            # Python checks every presented certificate against a trust store: without a CA,
            # these modes would silently lock every client out.
            raise SettingsError(
                f"invalid setting web_config_file: {tls.client_auth_type} needs client_ca_file"
            )
    except (OSError, ssl.SSLError) as exc:
        raise SettingsError(f"invalid setting web_config_file: TLS: {exc}") from None
    return context


#: A valid bcrypt hash (cost 10) of a random string, checked against for unknown users.
_DUMMY_HASH = b"$2b$10$C6UzMDM.H6dfI/f/IKcEe.4WQ8fnMB1KDxVT3b0vzvnMl8m1LQ3Wm"


def _checkpw(password: str, hashed: bytes) -> bool:
    import bcrypt

    try:
        return bool(bcrypt.checkpw(password.encode(), hashed))
    except ValueError:  # e.g. a password over bcrypt's 72 bytes
        return False


class BasicAuth:
    """bcrypt-checked users, with a small cache of successful checks: bcrypt costs ~50 ms a try.
    :meth:`known` answers from the cache alone (microseconds, on the event loop); :meth:`check`
    runs bcrypt where that cannot tell."""

    def __init__(self, users: dict[str, str], cache_size: int = 64) -> None:
        self.users = {name: hashed.encode() for name, hashed in users.items()}
        self._cache: OrderedDict[bytes, bool] = OrderedDict()
        self._size = cache_size
        self._lock = threading.Lock()

    def known(self, header: str) -> bool | None:
        """True for credentials that passed before, False for a header that is no basic auth at all
        (refused without bcrypt, as before), None when only bcrypt can tell."""
        credentials = _credentials(header)
        if credentials is None:
            return False
        key = self._key(*credentials)
        if key is None:
            return None  # an unknown user: refused after the same cost as a wrong password
        with self._lock:
            if self._cache.get(key):
                self._cache.move_to_end(key)
                return True
        return None

    def check(self, header: str) -> bool:
        credentials = _credentials(header)
        if credentials is None:
            return False
        user, password = credentials
        key = self._key(user, password)
        if key is None:
            _checkpw(password, _DUMMY_HASH)  # the same cost, so timing does not tell which users exist
            return False
        if self.known(header):
            return True
        ok = _checkpw(password, self.users[user])
        if ok:
            with self._lock:
                self._cache[key] = True
                if len(self._cache) > self._size:
                    self._cache.popitem(last=False)
        return ok

    def _key(self, user: str, password: str) -> bytes | None:
        """The cache's key (a SHA-256 of hash and password); None for an unknown user."""
        hashed = self.users.get(user)
        if hashed is None:
            return None
        return hashlib.sha256(hashed + b"\0" + password.encode()).digest()


def _credentials(header: str) -> tuple[str, str] | None:
    """(user, password) from a ``Basic`` Authorization header (UTF-8), None when it is not one."""
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep else None
