"""The web config file (TLS, basic auth): what is wrong with it in one line, never what it holds
(issue 39, finding 7: ``--web-config-file /etc/shadow`` printed the hashes)."""

from __future__ import annotations

import pytest

from warptd.config import SettingsError
from warptd.http.webconfig import load_web_config

pytest.importorskip("yaml")


@pytest.mark.parametrize(
    ("content", "said", "secrets"),
    [
        (  # /etc/shadow: each line one key that is no name
            "root:$6$saltsalt$hashhashhash:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n",
            "2 key(s) that are no web config key's name (is {path} an exporter-toolkit web config?)",
            ("$6$", "saltsalt", "hash", "daemon"),
        ),
        ("root: $6$saltsalt$hashhashhash\n", "root: not a web config key", ("$6$", "hash")),
        (
            "basic_auth_users:\n  alice: 12345\n"
            "tls_server_config:\n  cert_file: a.crt\n  password: hunter2\n",
            "basic_auth_users.alice: Input should be a valid string",
            ("12345", "hunter2"),
        ),
        ("users:\n  - *secretalias\n", "found undefined alias … at line 2", ("secretalias",)),
        ("a: b\n\tsecret: x\n", "found character … that cannot start any token at line 2", ("\\t", "secret")),
    ],
)
def test_a_bad_web_config_says_what_is_wrong_without_its_contents(tmp_path, content, said, secrets):
    path = tmp_path / "web.yml"
    path.write_text(content)
    with pytest.raises(SettingsError) as info:
        load_web_config(path)
    message = str(info.value)
    assert message.startswith("invalid setting web_config_file: ") and "\n" not in message
    assert said.format(path=path) in message
    for secret in secrets:
        assert secret not in message
