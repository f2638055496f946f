"""The client's security properties: parsing, JAAS strings, reconciliation, masking."""

from __future__ import annotations

import logging
import pickle

import pytest

from kayak.client.config import AdminConfig, ConsumerConfig, ProducerConfig
from kayak.client.security import Secret, parse_jaas_config
from kayak.client.security.channel import ConnectionSecurity
from kayak.errors import ConfigError
from tests.fixtures.certs import KEY_PASSWORD, TlsFiles

BOOT = {"bootstrap.servers": "broker:9093"}
PASSWORD = "pa55-w0rd!"
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    f'username="alice" password="{PASSWORD}";'
)
SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    f'username="alice" password="{PASSWORD}";'
)


def producer(**settings: object) -> ProducerConfig:
    return ProducerConfig.from_user(BOOT, **settings)


# --------------------------------------------------------------------------------------------
# JAAS
# --------------------------------------------------------------------------------------------


def test_plain_and_scram_login_modules_are_parsed() -> None:
    plain = parse_jaas_config(PLAIN_JAAS)
    assert (plain.family, plain.flag) == ("PLAIN", "required")
    assert plain.option("username") == "alice"
    assert plain.option("password") == PASSWORD
    scram = parse_jaas_config(SCRAM_JAAS.replace("required", "REQUIRED"))
    assert scram.family == "SCRAM"
    # Shaded class names (Databricks' kafkashaded.) and unquoted values, escapes in quotes.
    shaded = parse_jaas_config(
        "kafkashaded.org.apache.kafka.common.security.plain.PlainLoginModule  required\n"
        '  username=bob password="a \\"quoted\\" ;secret" ;'
    )
    assert shaded.family == "PLAIN"
    assert shaded.option("username") == "bob"
    assert shaded.option("password") == 'a "quoted" ;secret'


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "is empty"),
        ('org.apache.kafka.common.security.plain.PlainLoginModule username="a";', "control flag"),
        (
            'org.apache.kafka.common.security.plain.PlainLoginModule required username="a"',
            "does not end with ';'",
        ),
        (
            'org.apache.kafka.common.security.plain.PlainLoginModule required username="a;',
            "unclosed quote",
        ),
        (
            "org.apache.kafka.common.security.plain.PlainLoginModule required username;",
            "option 'username' has no '=value'",
        ),
        ('com.example.MyLoginModule required user="a";', "which kayak does not know"),
        ("com.sun.security.auth.module.Krb5LoginModule required;", "GSSAPI"),
        (PLAIN_JAAS + " " + PLAIN_JAAS, "more than one login module"),
    ],
)
def test_bad_jaas_strings_say_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as info:
        producer(security_protocol="SASL_SSL", sasl_jaas_config=text)
    assert info.value.name == "sasl.jaas.config"
    assert PASSWORD not in str(info.value)


# --------------------------------------------------------------------------------------------
# Reconciliation
# --------------------------------------------------------------------------------------------


def test_sasl_credentials_from_librdkafka_names_or_jaas() -> None:
    direct = producer(
        security_protocol="sasl_ssl",
        **{"sasl.mechanisms": "scram-sha-256"},  # librdkafka's plural spelling
        sasl_username="alice",
        sasl_password=PASSWORD,
    ).security
    assert direct.protocol == "SASL_SSL" and direct.uses_tls and direct.uses_sasl
    assert direct.sasl is not None and direct.sasl.mechanism == "SCRAM-SHA-256"
    from_jaas = producer(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_jaas_config=SCRAM_JAAS,
    ).security
    assert not from_jaas.uses_tls
    assert from_jaas.sasl is not None
    assert from_jaas.sasl.username == "alice"
    assert from_jaas.sasl.password == Secret(PASSWORD)


@pytest.mark.parametrize(
    ("settings", "name", "problem"),
    [
        ({"sasl.mechanism": "PLAIN"}, "sasl.username", "needs sasl.username and sasl.password"),
        ({"sasl.username": "alice"}, "sasl.password", "needs sasl.username and sasl.password"),
        ({"sasl.jaas.config": SCRAM_JAAS}, "sasl.mechanism", "SCRAM-SHA-256 or SCRAM-SHA-512"),
        (
            {"sasl.mechanism": "SCRAM-SHA-256", "sasl.jaas.config": PLAIN_JAAS},
            "sasl.mechanism",
            "logs in with PlainLoginModule",
        ),
        (
            {"sasl.jaas.config": PLAIN_JAAS, "sasl.password": "other"},
            "sasl.password",
            "differ",
        ),
        ({"sasl.mechanism": "OAUTHBEARER"}, "oauth_cb", "token callback"),
        ({"sasl.mechanism": "GSSAPI"}, "sasl.mechanism", "Kerberos"),
    ],
)
def test_missing_or_contradicting_sasl_settings_are_named(
    settings: dict[str, object], name: str, problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem) as info:
        ProducerConfig.from_user({**BOOT, "security.protocol": "SASL_SSL", **settings})
    assert info.value.name == name
    assert PASSWORD not in str(info.value)


def test_tls_settings_and_their_contradictions(tls_files: TlsFiles) -> None:
    tls = producer(
        security_protocol="SSL",
        ssl_ca_location=str(tls_files.ca),
        ssl_endpoint_identification_algorithm="",  # Java's way to turn the check off
    ).security.tls
    assert tls is not None and tls.ca_location == str(tls_files.ca) and not tls.check_hostname
    pem = producer(
        security_protocol="SSL",
        ssl_truststore_location=str(tls_files.ca),
        ssl_truststore_type="PEM",
    ).security.tls
    assert pem is not None and pem.ca_location == str(tls_files.ca) and pem.check_hostname
    with pytest.raises(ConfigError, match="kayak reads only PEM") as info:
        producer(security_protocol="SSL", ssl_truststore_location="/x.jks")
    assert info.value.name == "ssl.truststore.type"
    with pytest.raises(ConfigError, match="needs the certificate too") as info:
        producer(security_protocol="SSL", ssl_key_location=str(tls_files.client_key))
    assert info.value.name == "ssl.key.location"


def test_unused_settings_get_one_warning_line(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "kayak.client.config"):
        config = producer(ssl_ca_location="/ca.pem", sasl_username="alice")
        ProducerConfig.from_user(config.as_dict())  # rebuilt: defaults are not "set"
    warnings = [r.getMessage() for r in caplog.records if "no effect" in r.getMessage()]
    assert warnings == [
        "ssl.ca.location, sasl.username set but security.protocol is PLAINTEXT: they have "
        "no effect",
        "ssl.ca.location, sasl.username set but security.protocol is PLAINTEXT: they have "
        "no effect",
    ]
    assert config.security.tls is None and config.security.sasl is None


# --------------------------------------------------------------------------------------------
# Secrets never show
# --------------------------------------------------------------------------------------------


def test_secrets_are_masked_in_reprs_dicts_and_errors(tls_files: TlsFiles) -> None:
    for kind in (ProducerConfig, ConsumerConfig, AdminConfig):
        config = kind.from_user(
            BOOT,
            security_protocol="SASL_SSL",
            sasl_jaas_config=PLAIN_JAAS,
            ssl_key_password=KEY_PASSWORD,
            ssl_certificate_location=str(tls_files.client_cert),
            ssl_key_location=str(tls_files.client_encrypted_key),
        )
        shown = [repr(config), str(config.as_dict()), repr(config.security)]
        shown.append(str(config.sasl_jaas_config))
        for text in shown:
            assert PASSWORD not in text and KEY_PASSWORD not in text
            assert "********" in text
        # Rebuilding from as_dict keeps the real secrets (the consumer does that).
        again = kind.from_user(config.as_dict())
        assert again.security == config.security
        assert pickle.loads(pickle.dumps(again.security)) == config.security
    with pytest.raises(ConfigError, match="must be a string") as info:
        producer(sasl_password=12345)
    assert "12345" not in str(info.value)


def test_oauth_cb_is_a_callable_property() -> None:
    def token() -> tuple[str, float]:
        return "t", 0.0

    config = producer(security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER", oauth_cb=token)
    assert config.security.sasl is not None
    assert config.security.sasl.token_callback is token
    with pytest.raises(ConfigError, match="must be a callable") as info:
        producer(oauth_cb="not callable")
    assert info.value.name == "oauth_cb"
    unsecured = producer(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        sasl_jaas_config="org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
        'required unsecuredLoginStringClaim_sub="alice";',
    )
    assert unsecured.security.sasl is not None
    assert unsecured.security.sasl.unsecured_subject == "alice"


# --------------------------------------------------------------------------------------------
# Certificate and key files are loaded once, errors name the property
# --------------------------------------------------------------------------------------------


def test_tls_files_are_checked_when_the_client_is_made(tls_files: TlsFiles) -> None:
    def security(**settings: object) -> ConnectionSecurity:
        return ConnectionSecurity.from_config(
            producer(
                security_protocol="SSL", ssl_ca_location=str(tls_files.ca), **settings
            ).security
        )

    mutual = security(
        ssl_certificate_location=str(tls_files.client_cert),
        ssl_key_location=str(tls_files.client_encrypted_key),
        ssl_key_password=KEY_PASSWORD,
    )
    assert mutual.ssl_context is not None
    for password, problem in ((None, "is not set"), ("wrong", "does not decrypt")):
        with pytest.raises(ConfigError, match=problem) as info:
            security(
                ssl_certificate_location=str(tls_files.client_cert),
                ssl_key_location=str(tls_files.client_encrypted_key),
                ssl_key_password=password,
            )
        assert info.value.name == "ssl.key.password"
    with pytest.raises(ConfigError, match="cannot be read as PEM") as info:
        ConnectionSecurity.from_config(
            producer(security_protocol="SSL", ssl_ca_location="/nonexistent/ca.pem").security
        )
    assert info.value.name == "ssl.ca.location"
    with pytest.raises(ConfigError, match="does not exist") as info:
        security(ssl_certificate_location="/nonexistent/client.pem")
    assert info.value.name == "ssl.certificate.location"
