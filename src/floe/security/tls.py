"""TLS for the SSL and SASL_SSL listeners: the server's ``SSLContext`` from PEM files,
and the principal of a client certificate as Kafka names it.

Invariants:

- :func:`server_context` checks every file itself before OpenSSL reads it, so a bad
  setting stops ``floe`` with one line naming the file and the problem, never a stack of
  OpenSSL text, and never the key password.
- A certificate's name is its subject exactly as Java's ``X500Principal.getName()``
  prints it (:func:`subject_dn`), and :class:`PrincipalMapper` rewrites it exactly as
  Kafka's ``SslPrincipalMapper`` does, so ACLs written for a Kafka cluster's mTLS users
  name the same principals here.

Where this differs from Kafka (each on purpose, each fails at start rather than
per connection):

- Rule patterns are Python ``re`` patterns compiled with ``re.ASCII`` (Java's ``\\w``,
  ``\\d``, ``\\s`` and case folding are ASCII too). The constructs rules are written
  with (groups, classes, lazy and possessive quantifiers, anchors, ``(?i)`` at the
  start) mean the same; Java-only syntax (``\\p{...}``, ``\\Q...\\E``, ``(?<name>...)``,
  ``[a&&b]``, flags in the middle) is refused as a malformed rule, where Kafka would
  accept it.
- A replacement with a ``$`` not followed by a group number or ``{name}``, or a trailing
  ``\\``, is refused when the rules are read; Kafka accepts the rule and then fails
  every connection it matches. ``$n`` naming a group the pattern lacks is literal text
  (Kafka's intent; Kafka itself fails at match time when the pattern has no group, or
  when two such references are in one replacement).
- An empty rule list (``""``, ``" , "``) is refused: in Kafka it makes every
  certificate fail authentication.
"""

from __future__ import annotations

import re
import ssl
import warnings
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes

from floe.errors import ConfigError, FloeError

__all__ = [
    "CLIENT_AUTH",
    "NoMatchingRuleError",
    "PrincipalMapper",
    "peer_principal",
    "server_context",
    "subject_dn",
]

CLIENT_AUTH = ("none", "requested", "required")
"""Kafka's ``ssl.client.auth``: never ask for a client certificate, ask for one and
verify it when sent, or refuse a client without a trusted one."""

_VERIFY = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


class NoMatchingRuleError(FloeError):
    """No principal mapping rule matched a certificate's subject.

    Kafka fails the connection's authentication then (``NoMatchingRule``): the server
    closes the connection.
    """


# ---------------------------------------------------------------------------------------
# The server context


def server_context(
    cert_file: str,
    key_file: str,
    key_password: str | None,
    ca_file: str | None,
    client_auth: str,
) -> ssl.SSLContext:
    """The ``SSLContext`` of a TLS listener.

    ``cert_file`` holds the broker's certificate first, then any intermediates;
    ``key_file`` its private key, encrypted when ``key_password`` is set; ``ca_file``
    the CA certificates client certificates must chain to. TLS 1.2 at least, no
    compression, no renegotiation; ``client_auth`` (one of :data:`CLIENT_AUTH`) decides
    whether a client certificate is not asked for, verified when sent, or required.

    Raises:
        ConfigError: one line naming the file and what is wrong with it: missing or
            unreadable, not PEM, a key that does not decrypt with ``key_password`` (or
            needs one), a key that is not the certificate's, a bad CA file, a missing
            CA file when client certificates are asked for, or an unknown
            ``client_auth``.
    """
    if client_auth not in CLIENT_AUTH:
        raise ConfigError(
            f"ssl.client.auth: {client_auth!r} is not one of {', '.join(CLIENT_AUTH)}"
        )
    if client_auth != "none" and not ca_file:
        raise ConfigError(
            f"ssl.client.auth={client_auth} needs a CA file to verify client certificates"
        )
    chain = _certificates(cert_file, "certificate file")
    key = _private_key(key_file, key_password)
    if _spki(chain[0].public_key()) != _spki(key.public_key()):
        raise ConfigError(f"TLS key file {key_file}: not the key of the certificate in {cert_file}")
    if ca_file:
        _certificates(ca_file, "CA file")

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_COMPRESSION
    ctx.options |= getattr(ssl, "OP_NO_RENEGOTIATION", 0)
    # The callable keeps OpenSSL from ever prompting on a terminal for a password.
    password = (key_password or "").encode()
    try:
        ctx.load_cert_chain(cert_file, key_file, password=lambda: password)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise ConfigError(
            f"TLS certificate file {cert_file} with key {key_file}: OpenSSL refused them "
            f"({_reason(exc)})"
        ) from None
    if ca_file:
        try:
            ctx.load_verify_locations(cafile=ca_file)
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"TLS CA file {ca_file}: OpenSSL refused it ({_reason(exc)})"
            ) from None
    ctx.verify_mode = _VERIFY[client_auth]
    return ctx


def _read(path: str, what: str) -> bytes:
    """The bytes of ``path``.

    Raises:
        ConfigError: the file is missing or unreadable.
    """
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"TLS {what} {path}: {exc.strerror or exc}") from None


def _certificates(path: str, what: str) -> list[x509.Certificate]:
    """The PEM certificates in ``path``, in file order.

    Raises:
        ConfigError: the file is missing, unreadable or holds no PEM certificate.
    """
    data = _read(path, what)
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        certs = []
    if not certs:
        raise ConfigError(f"TLS {what} {path}: no PEM certificate in it")
    return certs


def _private_key(path: str, password: str | None) -> PrivateKeyTypes:
    """The PEM private key in ``path``, decrypted with ``password``.

    Raises:
        ConfigError: the file is missing or unreadable, is not a PEM private key, is
            encrypted and ``password`` is empty or wrong, or is not encrypted and a
            password is set.
    """
    data = _read(path, "key file")
    encrypted = b"ENCRYPTED" in data
    try:
        return serialization.load_pem_private_key(data, password.encode() if password else None)
    except TypeError:  # a password for a plain key, or none for an encrypted one
        problem = (
            "the key is encrypted, but no key password is set"
            if encrypted
            else "the key is not encrypted, but a key password is set"
        )
    except ValueError:
        problem = (
            "the key password does not decrypt it"
            if encrypted and password
            else "not a PEM private key"
        )
    except UnsupportedAlgorithm:
        problem = "not a private key of a supported type"
    raise ConfigError(f"TLS key file {path}: {problem}")


def _spki(key: PublicKeyTypes) -> bytes:
    """The DER SubjectPublicKeyInfo of a public key (equal bytes: the same key)."""
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _reason(exc: BaseException) -> str:
    """One line of an OpenSSL error: its reason code (e.g. KEY_VALUES_MISMATCH) when it
    has one."""
    lines = str(getattr(exc, "reason", None) or exc).splitlines()
    return lines[0] if lines else type(exc).__name__


# ---------------------------------------------------------------------------------------
# The peer's principal


def peer_principal(
    ssl_object: ssl.SSLObject | ssl.SSLSocket | None, mapper: PrincipalMapper
) -> str | None:
    """The mapped subject of the certificate the peer sent, after the handshake.

    None when the connection is not TLS (``ssl_object`` None) or the peer sent no
    certificate (``ssl.client.auth`` none or requested): Kafka's ANONYMOUS.

    Raises:
        NoMatchingRuleError: no rule of ``mapper`` matches the subject (the connection
            must be closed, as Kafka fails its authentication).
    """
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    return mapper.name(subject_dn(der))


# The keywords Java prints in RFC 2253 names (sun.security.x509.AVAKeyword); any other
# attribute is printed as its dotted OID with the value's DER bytes in hex.
_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
# The string types Java prints as text (AVA.isDerString, non-canonical): PrintableString,
# T61String, IA5String, GeneralString, BMPString, UTF8String.
_STRING_TAGS = frozenset({0x13, 0x14, 0x16, 0x1B, 0x1E, 0x0C})
_ESCAPED = frozenset(',=+<>#;"\\')


def subject_dn(der_cert: bytes) -> str:
    """A DER certificate's subject as Kafka shows it: Java's ``X500Principal.getName()``
    (RFC 2253), most specific RDN first, e.g. ``CN=alice,OU=eng,O=acme,C=US``.

    Java's rules, kept here byte for byte because the principal is what ACLs name:
    the keywords CN, C, L, ST, O, OU, STREET, DC and UID; any other attribute (such as
    emailAddress) as its dotted OID and ``#`` plus the hex of its DER value
    (``1.2.840.113549.1.9.1=#1611...``); in text values ``, = + < > # ; " \\`` are
    escaped with a backslash, NUL as ``\\00``, and leading and trailing spaces (and
    carriage returns) one by one. A value is read as UTF-8 whatever its string type,
    as Java does (a BMPString comes out with ``\\00`` between its characters).
    Checked against OpenJDK 17 on the unit tests' certificates. ``cryptography``'s
    ``Name.rfc4514_string()`` is not the same: it prints other attributes' values as
    text, escapes neither ``=`` nor ``#`` inside a value, escapes only the first
    leading and the last trailing space, and decodes BMPStrings as UTF-16; hence this
    walk over the DER subject.

    Raises:
        ValueError: ``der_cert`` is not a DER certificate.
    """
    tbs = x509.load_der_x509_certificate(der_cert).tbs_certificate_bytes
    fields = _children(tbs, 0)
    if tbs[fields[0]] == 0xA0:  # [0] version
        fields = fields[1:]
    # serialNumber, signature, issuer, validity, subject
    rdns = []
    for rdn in _children(tbs, fields[4]):
        avas = []
        for ava in _children(tbs, rdn):
            oid, value = _children(tbs, ava)
            _, oid_start, oid_end = _tlv(tbs, oid)
            tag, content, end = _tlv(tbs, value)
            avas.append(_ava(_oid(tbs[oid_start:oid_end]), tag, tbs[content:end], tbs[value:end]))
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


def _ava(oid: str, tag: int, content: bytes, encoded: bytes) -> str:
    """One attribute as Java's ``AVA.toRFC2253String()`` prints it."""
    keyword = _KEYWORDS.get(oid)
    if keyword is None or tag not in _STRING_TAGS:
        return f"{keyword or oid}=#{encoded.hex()}"
    chars = [
        "\\" + c if c in _ESCAPED else "\\00" if c == "\0" else c
        for c in content.decode("utf-8", "replace")
    ]
    lead = next((i for i, c in enumerate(chars) if c not in " \r"), len(chars))
    trail = next((i for i in range(len(chars) - 1, -1, -1) if chars[i] not in " \r"), -1)
    return (
        keyword
        + "="
        + "".join("\\" + c if i < lead or i > trail else c for i, c in enumerate(chars))
    )


def _tlv(data: bytes, at: int) -> tuple[int, int, int]:
    """The DER element at ``at``: its tag, where its content starts and where it ends.

    Raises:
        ValueError: the element runs past the end of ``data``.
    """
    tag, first = data[at], data[at + 1]
    if first < 0x80:
        content, length = at + 2, first
    else:
        n = first & 0x7F
        content, length = at + 2 + n, int.from_bytes(data[at + 2 : at + 2 + n], "big")
    if content + length > len(data):
        raise ValueError("truncated DER element")
    return tag, content, content + length


def _children(data: bytes, at: int) -> list[int]:
    """Where each element inside the constructed DER element at ``at`` starts.

    Raises:
        ValueError: an element runs past its parent.
    """
    _, start, end = _tlv(data, at)
    out = []
    while start < end:
        out.append(start)
        start = _tlv(data, start)[2]
    if start != end:
        raise ValueError("DER element runs past its parent")
    return out


def _oid(content: bytes) -> str:
    """The dotted form of a DER OBJECT IDENTIFIER's content."""
    arcs, value = [], 0
    for byte in content:
        value = value << 7 | byte & 0x7F
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    first = min(arcs[0] // 40, 2)
    return ".".join(map(str, [first, arcs[0] - 40 * first, *arcs[1:]]))


# ---------------------------------------------------------------------------------------
# ssl.principal.mapping.rules

# Kafka's own rule grammar (SslPrincipalMapper.RULE_PATTERN), so that rules split and
# parse here exactly as there: a pattern and a replacement may hold commas and escaped
# slashes; "DEFAULT" is the whole subject; anything else is a malformed rule.
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)", re.ASCII)
_PARSER = re.compile(_RULE, re.ASCII)
_DIGITS = "0123456789"


@dataclass(frozen=True)
class _Rule:
    """One mapping rule: ``pattern`` None is DEFAULT; ``parts`` is the replacement as
    literal text (str) and group numbers (int); ``case`` is "", "L" or "U"."""

    pattern: re.Pattern[str] | None
    parts: tuple[str | int, ...] = ()
    case: str = ""
    text: tuple[str, str] = ("", "")  # the pattern and replacement as written

    def apply(self, dn: str) -> str | None:
        """The mapped name, or None when the pattern does not match all of ``dn``."""
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        # Java's String.replaceAll: every match of the pattern in dn is replaced.
        name = self.pattern.sub(
            lambda m: "".join(p if isinstance(p, str) else m.group(p) or "" for p in self.parts),
            dn,
        )
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name

    def __str__(self) -> str:
        """The rule as Kafka's ``Rule.toString()`` shows it."""
        if self.pattern is None:
            return "DEFAULT"
        pattern, replacement = self.text
        return f"RULE:{pattern}/{replacement}" + (f"/{self.case}" if self.case else "")


class PrincipalMapper:
    """Kafka's ``ssl.principal.mapping.rules``: certificate subjects to user names.

    ``rules`` is a comma-separated list of ``RULE:pattern/replacement/`` (optionally
    ``/L`` or ``/U`` for lower or upper case instead of the last ``/``) and ``DEFAULT``
    (the whole subject). :meth:`name` applies the first rule whose pattern matches the
    whole subject: every match of the pattern is replaced by the replacement, where
    ``$1``... are the groups and ``\\`` escapes a character (Java's ``replaceAll``).
    Immutable once built; safe to share between connections.
    """

    def __init__(self, rules: str = "DEFAULT") -> None:
        """Parse ``rules``.

        Raises:
            ConfigError: a malformed rule (one line naming it), a pattern Python's
                ``re`` cannot compile as Java would, or no rule at all.
        """
        self._rules = tuple(_parse(item) for item in _split(rules) if item)
        if not self._rules:
            raise ConfigError(
                "ssl.principal.mapping.rules: no rules (every client certificate would be "
                "refused); DEFAULT is the whole subject"
            )

    def name(self, dn: str) -> str:
        """The principal name of the subject ``dn`` (as :func:`subject_dn` prints it).

        Raises:
            NoMatchingRuleError: no rule matches ``dn``.
        """
        for rule in self._rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRuleError(f"no principal mapping rule matches {dn!r}")

    def __repr__(self) -> str:
        return f"PrincipalMapper(rules=[{', '.join(map(str, self._rules))}])"


def _split(rules: str) -> list[str]:
    """The rules of a rules string, as Kafka splits them (empty items included)."""
    return [m.group(1) for m in _SPLITTER.finditer(rules.strip())]


def _parse(item: str) -> _Rule:
    """One rule of the list.

    Raises:
        ConfigError: ``item`` is not DEFAULT or RULE:pattern/replacement/[LU], its
            pattern does not compile, or its replacement is malformed.
    """
    m = _PARSER.match(item)
    if m is None or m.end() != len(item):  # an item matching neither form stops early
        raise ConfigError(
            f"ssl.principal.mapping.rules: {item!r} is not DEFAULT or "
            "RULE:pattern/replacement/[L|U]"
        )
    if m.group(1) is not None:
        return _Rule(None)
    pattern_text, replacement = m.group(2), m.group(4)
    try:
        with warnings.catch_warnings():
            # Python warns about what it reads differently from Java ([a&&b], [[a]]).
            warnings.simplefilter("error", FutureWarning)
            pattern = re.compile(pattern_text, re.ASCII)
    except (re.error, FutureWarning) as exc:
        raise ConfigError(f"ssl.principal.mapping.rules: {item!r}: bad pattern ({exc})") from None
    parts = _replacement(replacement, pattern, item)
    return _Rule(pattern, parts, m.group(6), (pattern_text, replacement))


def _replacement(text: str, pattern: re.Pattern[str], item: str) -> tuple[str | int, ...]:
    """A replacement in Java's ``Matcher.appendReplacement`` syntax as literal text and
    group numbers: ``\\x`` is ``x``; ``$n`` is group n, taking as many digits as name a
    group; ``${name}`` a named group; ``$n`` past the pattern's groups is literal text
    (Kafka escapes those references before Java sees them).

    Raises:
        ConfigError: a trailing backslash, a ``$`` followed by neither a digit nor
            ``{name}``, or an unknown group name.
    """
    parts: list[str | int] = []
    literal: list[str] = []
    groups, i = pattern.groups, 0

    def refuse(problem: str) -> ConfigError:
        return ConfigError(f"ssl.principal.mapping.rules: {item!r}: replacement {problem}")

    def group(number: int) -> None:
        if literal:
            parts.append("".join(literal))
            literal.clear()
        parts.append(number)

    while i < len(text):
        c = text[i]
        i += 1
        if c == "\\":
            if i == len(text):
                raise refuse("ends with a lone backslash")
            literal.append(text[i])
            i += 1
        elif c != "$":
            literal.append(c)
        elif text[i : i + 1] == "{":
            end = text.find("}", i)
            name = text[i + 1 : end] if end > 0 else ""
            if name not in pattern.groupindex:
                raise refuse(f"names no group of the pattern ({text[i - 1 :]!r})")
            group(pattern.groupindex[name])
            i = end + 1
        elif text[i : i + 1] and text[i] in _DIGITS:
            run = len(text[i:]) - len(text[i:].lstrip(_DIGITS))
            number = int(text[i])
            if number > groups:
                literal.append("$" + text[i : i + run])
                i += run
                continue
            taken = 1
            while taken < run and number * 10 + int(text[i + taken]) <= groups:
                number = number * 10 + int(text[i + taken])
                taken += 1
            group(number)
            i += taken
        else:
            raise refuse("has a '$' that is not followed by a group number or {name}")
    if literal:
        parts.append("".join(literal))
    return tuple(parts)
