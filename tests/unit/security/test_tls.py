"""floe.security.tls: real TLS handshakes on 127.0.0.1 against server_context(), the
one-line ConfigErrors of bad files, certificate subjects as Java prints them, and
Kafka's ssl.principal.mapping.rules (its own test cases and documented examples)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ssl
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from floe.errors import ConfigError
from floe.security.tls import (
    CLIENT_AUTH,
    NoMatchingRuleError,
    PrincipalMapper,
    peer_principal,
    server_context,
    subject_dn,
)
from helpers.certs import Pki, make_pki

ALICE = "CN=alice,O=Floe Tests"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _server(pki: Pki, client_auth: str = "required") -> ssl.SSLContext:
    return server_context(
        str(pki.server_cert), str(pki.server_key), None, str(pki.ca_cert), client_auth
    )


def _client(
    pki: Pki, cert: tuple[Path, Path] | None = None, *, ca: Path | None = None
) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca or pki.ca_cert))
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT  # the test PKI passes strict checks too
    if cert is not None:
        ctx.load_cert_chain(*cert)
    return ctx


@dataclass
class Outcome:
    """One connection's result: the principals the server's handler saw (empty when
    the handshake failed on its side), and the line the client read or its error."""

    seen: list[str | None]
    reply: str | None
    error: BaseException | None

    @property
    def refused(self) -> bool:
        """The server never served the connection. (The client sees the refusal of its
        certificate as an SSLError or as a bare EOF, depending on timing: TLS 1.3
        finishes the client's handshake before the server has checked it.)"""
        return not self.seen and not self.reply


def connect(
    server: ssl.SSLContext, client: ssl.SSLContext, mapper: PrincipalMapper | None = None
) -> Outcome:
    """Serve one TLS connection on 127.0.0.1 (asyncio, as floe's listeners do): the
    handler answers with peer_principal() of its ssl_object."""
    return asyncio.run(_connect(server, client, mapper or PrincipalMapper()))


async def _connect(
    server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, mapper: PrincipalMapper
) -> Outcome:
    seen: list[str | None] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        principal = peer_principal(writer.get_extra_info("ssl_object"), mapper)
        seen.append(principal)
        writer.write(f"{principal}\n".encode())
        with contextlib.suppress(OSError):
            await writer.drain()
            writer.close()
            await writer.wait_closed()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    reply, error = None, None
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=client_ctx, server_hostname="localhost"),
            10,
        )
        try:
            # TLS 1.3: the client's handshake ends before the server has checked the
            # client's certificate; a refusal shows on the first read.
            reply = (await asyncio.wait_for(reader.readline(), 10)).decode().strip() or None
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
    except OSError as exc:  # ssl.SSLError and connection resets
        error = exc
    finally:
        server.close()
        await server.wait_closed()
    return Outcome(seen, reply, error)


# ---------------------------------------------------------------------------------------
# Handshakes


def test_required_client_certificate_is_the_principal(pki: Pki) -> None:
    out = connect(_server(pki), _client(pki, pki.client("alice")))
    assert out.seen == [ALICE]
    assert out.reply == ALICE


def test_principal_goes_through_the_mapping_rules(pki: Pki) -> None:
    mapper = PrincipalMapper("RULE:^CN=([^,]+),OU=([^,]+),.*$/$1@$2/U,DEFAULT")
    out = connect(_server(pki), _client(pki, pki.client("bob", ou="eng")), mapper)
    assert out.seen == ["BOB@ENG"]
    out = connect(_server(pki), _client(pki, pki.client("alice")), mapper)
    assert out.seen == [ALICE]  # no OU: the first rule does not match, DEFAULT does


def test_required_refuses_a_client_without_certificate(pki: Pki) -> None:
    out = connect(_server(pki, "required"), _client(pki))
    assert out.refused, out


def test_requested_accepts_a_client_without_certificate_as_anonymous(pki: Pki) -> None:
    server = _server(pki, "requested")
    out = connect(server, _client(pki))
    assert out.seen == [None]
    out = connect(server, _client(pki, pki.client("alice")))
    assert out.seen == [ALICE]


def test_none_does_not_ask_for_a_certificate(pki: Pki) -> None:
    out = connect(_server(pki, "none"), _client(pki, pki.client("alice")))
    assert out.seen == [None]


@pytest.mark.parametrize("client_auth", ["required", "requested"])
def test_a_certificate_of_another_ca_is_refused(pki: Pki, client_auth: str) -> None:
    """Same subject as alice's, signed by a CA the server does not trust; a sent
    certificate is verified even when it is only requested."""
    other = (pki.other_client_cert, pki.other_client_key)
    out = connect(_server(pki, client_auth), _client(pki, other))
    assert out.refused, out


def _old_client(pki: Pki, highest: ssl.TLSVersion) -> ssl.SSLContext:
    ctx = _client(pki, pki.client("alice"))
    with warnings.catch_warnings():  # ssl deprecates TLS 1.0/1.1 themselves
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ssl.TLSVersion.TLSv1
        ctx.maximum_version = highest
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # let OpenSSL 3 really offer TLS 1.1
    return ctx


def test_tls_1_1_clients_are_refused_and_1_2_accepted(pki: Pki) -> None:
    out = connect(_server(pki), _old_client(pki, ssl.TLSVersion.TLSv1_1))
    assert out.refused, out
    out = connect(_server(pki), _old_client(pki, ssl.TLSVersion.TLSv1_2))
    assert out.seen == [ALICE]
    # the control: the same TLS 1.1 client is served once the server allows TLS 1.1,
    # so the refusal above is the server's minimum version, not the client's OpenSSL
    lax = _server(pki)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        lax.minimum_version = ssl.TLSVersion.TLSv1
    lax.set_ciphers("DEFAULT:@SECLEVEL=0")
    assert connect(lax, _old_client(pki, ssl.TLSVersion.TLSv1_1)).seen == [ALICE]


def test_encrypted_key_and_certificate_chain(pki: Pki, tmp_path: Path) -> None:
    chain = tmp_path / "chain.pem"
    chain.write_bytes(pki.server_cert.read_bytes() + pki.ca_cert.read_bytes())
    server = server_context(
        str(chain),
        str(pki.server_key_encrypted),
        pki.server_key_password,
        str(pki.ca_cert),
        "required",
    )
    assert server.minimum_version == ssl.TLSVersion.TLSv1_2
    assert server.verify_mode == ssl.CERT_REQUIRED
    assert server.options & ssl.OP_NO_COMPRESSION
    assert connect(server, _client(pki, pki.client("alice"))).seen == [ALICE]


def test_verify_modes_follow_client_auth(pki: Pki) -> None:
    modes = [_server(pki, auth).verify_mode for auth in CLIENT_AUTH]
    assert modes == [ssl.CERT_NONE, ssl.CERT_OPTIONAL, ssl.CERT_REQUIRED]
    plain = server_context(str(pki.server_cert), str(pki.server_key), None, None, "none")
    assert plain.verify_mode == ssl.CERT_NONE


def test_peer_principal_of_a_plaintext_connection_is_none() -> None:
    assert peer_principal(None, PrincipalMapper()) is None


# ---------------------------------------------------------------------------------------
# Configuration errors: one line, naming the file, never the password


def _config_error(
    pki: Pki,
    *,
    cert: Path | str | None = None,
    key: Path | str | None = None,
    password: str | None = None,
    ca: Path | str | None = None,
    client_auth: str = "required",
) -> str:
    with pytest.raises(ConfigError) as info:
        server_context(
            str(cert or pki.server_cert),
            str(key or pki.server_key),
            password,
            str(ca or pki.ca_cert),
            client_auth,
        )
    message = str(info.value)
    assert "\n" not in message
    assert pki.server_key_password not in message
    return message


def test_wrong_key_password(pki: Pki) -> None:
    key = pki.server_key_encrypted
    message = _config_error(pki, key=key, password="not-" + pki.server_key_password)
    assert message == f"TLS key file {key}: the key password does not decrypt it"


def test_encrypted_key_without_password(pki: Pki) -> None:
    key = pki.server_key_encrypted
    message = _config_error(pki, key=key)
    assert message == f"TLS key file {key}: the key is encrypted, but no key password is set"


def test_password_for_a_plain_key(pki: Pki) -> None:
    message = _config_error(pki, password=pki.server_key_password)
    assert message == (
        f"TLS key file {pki.server_key}: the key is not encrypted, but a key password is set"
    )


def test_missing_files(pki: Pki, tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    assert _config_error(pki, cert=missing) == (
        f"TLS certificate file {missing}: No such file or directory"
    )
    assert _config_error(pki, key=missing) == f"TLS key file {missing}: No such file or directory"
    assert _config_error(pki, ca=missing) == f"TLS CA file {missing}: No such file or directory"


def test_key_of_another_certificate(pki: Pki) -> None:
    _, alice_key = pki.client("alice")
    message = _config_error(pki, key=alice_key)
    assert message == (
        f"TLS key file {alice_key}: not the key of the certificate in {pki.server_cert}"
    )


def test_files_that_are_not_pem(pki: Pki, tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    assert _config_error(pki, ca=junk) == f"TLS CA file {junk}: no PEM certificate in it"
    assert _config_error(pki, cert=pki.server_key) == (
        f"TLS certificate file {pki.server_key}: no PEM certificate in it"
    )
    assert _config_error(pki, key=pki.server_cert) == (
        f"TLS key file {pki.server_cert}: not a PEM private key"
    )


def test_client_auth_settings(pki: Pki) -> None:
    assert _config_error(pki, client_auth="sometimes") == (
        "ssl.client.auth: 'sometimes' is not one of none, requested, required"
    )
    with pytest.raises(ConfigError, match="needs a CA file"):
        server_context(str(pki.server_cert), str(pki.server_key), None, None, "requested")


# ---------------------------------------------------------------------------------------
# Certificate subjects as Java's X500Principal.getName() prints them (every expected
# string below was checked against OpenJDK 17 on the same certificates)


def _der(*rdns: x509.NameAttribute[str] | x509.RelativeDistinguishedName) -> bytes:
    """A self-signed certificate whose subject has ``rdns`` (most general first)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [r if isinstance(r, x509.RelativeDistinguishedName) else x509.RelativeDistinguishedName([r])
         for r in rdns]
    )  # fmt: skip
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.DER)


def _attr(oid: x509.ObjectIdentifier, value: str) -> x509.NameAttribute[str]:
    return x509.NameAttribute(oid, value)


def test_subject_most_specific_first() -> None:
    der = _der(
        _attr(NameOID.COUNTRY_NAME, "US"),
        _attr(NameOID.STATE_OR_PROVINCE_NAME, "CA"),
        _attr(NameOID.LOCALITY_NAME, "Palo Alto"),
        _attr(NameOID.ORGANIZATION_NAME, "acme"),
        _attr(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
        _attr(NameOID.COMMON_NAME, "alice"),
    )
    assert subject_dn(der) == "CN=alice,OU=eng,O=acme,L=Palo Alto,ST=CA,C=US"


def test_subject_keywords_java_knows() -> None:
    der = _der(
        _attr(NameOID.DOMAIN_COMPONENT, "com"),
        _attr(NameOID.DOMAIN_COMPONENT, "example"),
        _attr(NameOID.STREET_ADDRESS, "1 Main St"),
        _attr(NameOID.USER_ID, "u42"),
    )
    assert subject_dn(der) == "UID=u42,STREET=1 Main St,DC=example,DC=com"


def test_subject_other_attributes_are_oid_and_hex() -> None:
    """emailAddress, serialNumber, title...: Java has no RFC 2253 keyword for them, so
    it prints the dotted OID and the value's DER (an IA5String here) in hex."""
    der = _der(_attr(NameOID.EMAIL_ADDRESS, "a@b.c"), _attr(NameOID.COMMON_NAME, "alice"))
    assert subject_dn(der) == "CN=alice,1.2.840.113549.1.9.1=#16056140622e63"
    der = _der(
        _attr(NameOID.SERIAL_NUMBER, "123"),
        _attr(NameOID.TITLE, "boss"),
        _attr(NameOID.GIVEN_NAME, "Al"),
        _attr(NameOID.SURNAME, "Ice"),
    )
    assert subject_dn(der) == (
        "2.5.4.4=#0c03496365,2.5.4.42=#0c02416c,2.5.4.12=#0c04626f7373,2.5.4.5=#1303313233"
    )


def test_subject_escaping_like_java() -> None:
    """Java escapes , = + < > # ; " \\ anywhere (RFC 2253 needs only some of them),
    NUL as \\00, and each leading and trailing space."""
    cases = {
        'a,b+c=d#e;f"g\\h<i>j': 'a\\,b\\+c\\=d\\#e\\;f\\"g\\\\h\\<i\\>j',
        "#x": "\\#x",
        "  two  ": "\\ \\ two\\ \\ ",
        "a\0b": "a\\00b",
        " \r x \r": "\\ \\\r\\ x\\ \\\r",  # carriage returns count as spaces
        "=": "\\=",
        "caf\u00e9 \u00fcber": "caf\u00e9 \u00fcber",  # UTF-8 kept as it is
    }
    for value, printed in cases.items():
        assert subject_dn(_der(_attr(NameOID.COMMON_NAME, value))) == f"CN={printed}"


def test_subject_multi_valued_rdn() -> None:
    rdn = x509.RelativeDistinguishedName(
        [_attr(NameOID.COMMON_NAME, "alice"), _attr(NameOID.USER_ID, "a1")]
    )
    der = _der(_attr(NameOID.ORGANIZATION_NAME, "acme"), rdn)
    parsed = x509.load_der_x509_certificate(der).subject.rdns[-1]
    names = {NameOID.COMMON_NAME: "CN=alice", NameOID.USER_ID: "UID=a1"}
    inner = "+".join(names[a.oid] for a in parsed)  # in the certificate's (DER) order
    assert subject_dn(der) == f"{inner},O=acme"


def test_subject_of_a_test_pki_client(pki: Pki) -> None:
    cert, _ = pki.client("carol", ou="ops")
    der = x509.load_pem_x509_certificate(cert.read_bytes()).public_bytes(serialization.Encoding.DER)
    assert subject_dn(der) == "CN=carol,OU=ops,O=Floe Tests"


# ---------------------------------------------------------------------------------------
# ssl.principal.mapping.rules (Kafka's SslPrincipalMapperTest cases and docs examples)


def test_default_is_the_whole_subject() -> None:
    assert PrincipalMapper().name("CN=alice,O=acme") == "CN=alice,O=acme"
    assert PrincipalMapper("DEFAULT").name("CN=a\\,b,O=x") == "CN=a\\,b,O=x"


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    ],
)
def test_kafka_valid_rules(rules: str) -> None:
    PrincipalMapper(rules)


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    ],
)
def test_kafka_invalid_rules(rules: str) -> None:
    with pytest.raises(ConfigError) as info:
        PrincipalMapper(rules)
    assert str(info.value).startswith("ssl.principal.mapping.rules: ")
    assert "\n" not in str(info.value)


def test_kafka_mapper_examples() -> None:
    mapper = PrincipalMapper(
        ", ".join(
            [
                "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
                "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
                "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
                "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
                "DEFAULT",
            ]
        )
    )
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    dn = "OU=JavaSoft,O=Sun Microsystems,C=US"
    assert mapper.name(dn) == dn


def test_kafka_documented_example() -> None:
    """docs/security.html, "Customizing SSL User Name", one rule per line as written."""
    mapper = PrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,\n"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,\n"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,\n"
        "DEFAULT"
    )
    unknown = "O=Unknown,L=Unknown,ST=Unknown,C=Unknown"
    assert mapper.name(f"CN=serviceuser,OU=ServiceUsers,{unknown}") == "serviceuser"
    assert mapper.name(f"CN=adminUser,OU=Admin,{unknown}") == "adminuser@admin"


def test_kafka_comma_with_whitespace() -> None:
    mapper = PrincipalMapper("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


@pytest.mark.parametrize(
    ("rules", "shown"),
    [
        ("DEFAULT", "DEFAULT"),
        ("RULE://", "RULE:/"),
        ("RULE:/.*/", "RULE:/.*"),
        ("RULE:/.*/L", "RULE:/.*/L"),
        ("RULE://,DEFAULT", "RULE:/, DEFAULT"),
        ("  RULE:// ,  DEFAULT  ", "RULE:/, DEFAULT"),
        ("  RULE:   /     / ,  DEFAULT  ", "RULE:   /     , DEFAULT"),
        ("  RULE:  /     /U   ,DEFAULT  ", "RULE:  /     /U, DEFAULT"),
        (
            "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
            "RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT",
        ),
        (",,RULE://,,,DEFAULT,,", "RULE:/, DEFAULT"),
        (",  , RULE: /   /    ,,,   DEFAULT, ,   ", "RULE: /   , DEFAULT"),
        ("     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,", "RULE:   /  /U, DEFAULT"),
        ("RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//", "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/"),
        ("RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/", "RULE:\\**\\/+/*/L, RULE:\\/*\\**/**"),
        (
            "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, "
            "/DEFAULT/,DEFAULT",
            "RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, "
            "/DEFAULT, DEFAULT",
        ),
    ],
)
def test_kafka_rules_splitting(rules: str, shown: str) -> None:
    assert repr(PrincipalMapper(rules)) == f"PrincipalMapper(rules=[{shown}])"


@pytest.mark.parametrize("rules", ["", "  ", ",   , , ,      , , ,   "])
def test_no_rules_at_all_is_refused(rules: str) -> None:
    """Kafka accepts these and then fails every TLS client; Floe refuses at start."""
    with pytest.raises(ConfigError, match="no rules"):
        PrincipalMapper(rules)


def test_no_matching_rule_fails_the_name() -> None:
    """Kafka: NoMatchingRule, the connection's authentication fails."""
    mapper = PrincipalMapper("RULE:^CN=([^,]+),OU=ops,.*$/$1/")
    assert mapper.name("CN=alice,OU=ops,O=acme") == "alice"
    with pytest.raises(NoMatchingRuleError):
        mapper.name("CN=alice,OU=dev,O=acme")


def test_first_matching_rule_wins() -> None:
    mapper = PrincipalMapper("RULE:^CN=admin,.*$/root/,RULE:^CN=([^,]+),.*$/$1/U,DEFAULT")
    assert mapper.name("CN=admin,O=acme") == "root"
    assert mapper.name("CN=alice,O=acme") == "ALICE"
    assert mapper.name("O=acme") == "O=acme"


@pytest.mark.parametrize(
    ("replacement", "name"),
    [
        ("$1", "alice"),
        ("$2@$1", "acme@alice"),
        ("$3", "$3"),  # no such group: literal text, as Kafka escapes it
        ("$21", "acme1"),  # Java takes the digits that name a group, the rest is text
        ("\\$1", "$1"),  # \x is x
        ("a\\/b", "a/b"),
        ("$0", "CN=alice,O=acme"),
        ("${who}", "alice"),
    ],
)
def test_replacement_syntax_is_java(replacement: str, name: str) -> None:
    mapper = PrincipalMapper(f"RULE:^CN=(?P<who>[^,]+),O=(.*)$/{replacement}/")
    assert mapper.name("CN=alice,O=acme") == name


def test_every_match_is_replaced_as_java_replace_all() -> None:
    assert PrincipalMapper("RULE:a*/x/").name("aaa") == "xx"
    assert PrincipalMapper("RULE:.*/<$0>/").name("CN=a") == "<CN=a><>"


@pytest.mark.parametrize(
    ("rules", "problem"),
    [
        ("RULE:^CN=(.*)$/$x/", "not followed by a group number"),
        ("RULE:^CN=(.*)$/tail$/", "not followed by a group number"),
        ("RULE:^CN=(.*)$/${nope}/", "names no group"),
        ("RULE:^CN=(.*$/$1/", "bad pattern"),
        ("RULE:^CN=(\\p{L}+)$/$1/", "bad pattern"),  # Java-only syntax
        ("RULE:^CN=(?<who>.*)$/${who}/", "bad pattern"),
        ("RULE:^CN=([a-z&&[^x]]+)$/$1/", "bad pattern"),  # Java's class intersection
    ],
)
def test_malformed_rules_are_refused(rules: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as info:
        PrincipalMapper(rules)
    assert "\n" not in str(info.value)


def test_patterns_are_ascii_like_java() -> None:
    """Java's \\w is [a-zA-Z0-9_]: a non-ASCII letter does not match it."""
    mapper = PrincipalMapper("RULE:^CN=(\\w+),.*$/$1/,DEFAULT")
    assert mapper.name("CN=bob,O=x") == "bob"
    assert mapper.name("CN=b\u00f6b,O=x") == "CN=b\u00f6b,O=x"
