"""TLS material: a cluster CA, serving certificates and client certificates (CN = user, O = groups).

Generated with ``cryptography`` on first start and kept in the data directory, so a restarted server
keeps its identity and existing kubeconfigs stay valid. EC P-256 keys: fast to generate and accepted by
every client we drive (kubectl, the Python clients, browsers).
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=3650)


@dataclass(frozen=True)
class CertPair:
    cert_pem: bytes
    key_pem: bytes

    def write(self, cert_path: Path, key_path: Path) -> None:
        cert_path.parent.mkdir(parents=True, exist_ok=True)
        cert_path.write_bytes(self.cert_pem)
        key_path.write_bytes(self.key_pem)
        key_path.chmod(0o600)

    @classmethod
    def read(cls, cert_path: Path, key_path: Path) -> CertPair:
        return cls(cert_path.read_bytes(), key_path.read_bytes())


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)


def make_ca(common_name: str) -> CertPair:
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now())
        .not_valid_after(_now() + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _issue(
    ca: CertPair,
    subject: x509.Name,
    *,
    server_names: list[str] | None = None,
    client: bool = False,
) -> CertPair:
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = _key()
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now())
        .not_valid_after(_now() + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if server_names:
        alt: list[x509.GeneralName] = []
        for entry in server_names:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(entry)))
            except ValueError:
                alt.append(x509.DNSName(entry))
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return CertPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue_serving(ca: CertPair, names: list[str]) -> CertPair:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0] if names else "vplane")])
    return _issue(ca, subject, server_names=names)


def certificate_names(cert_pem: bytes) -> list[str]:
    """The DNS names and IP addresses a certificate's subjectAltName lists."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [
        *alt.get_values_for_type(x509.DNSName),
        *(str(a) for a in alt.get_values_for_type(x509.IPAddress)),
    ]


def issue_client(ca: CertPair, user: str, groups: list[str] | tuple[str, ...] = ()) -> CertPair:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, user))
    return _issue(ca, x509.Name(attrs), client=True)


def server_context(
    serving: CertPair, cert_path: Path, key_path: Path, client_ca_pem: bytes
) -> ssl.SSLContext:
    """A server context that asks for (but does not require) client certificates signed by our CA."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert_path, key_path)
    ctx.load_verify_locations(cadata=client_ca_pem.decode())
    ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def client_context(
    ca_pem: bytes, client: CertPair | None = None, workdir: Path | None = None
) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    if client is not None:
        if workdir is None:
            raise ValueError("a client certificate needs a directory to be loaded from")
        cert_path, key_path = workdir / "client.crt", workdir / "client.key"
        client.write(cert_path, key_path)
        ctx.load_cert_chain(cert_path, key_path)
    return ctx


def subject_identity(peercert: dict[str, object] | None) -> tuple[str, list[str]] | None:
    """(user, groups) from a verified peer certificate as ``ssl`` reports it (CN = user, O = groups)."""
    if not peercert:
        return None
    user = ""
    groups: list[str] = []
    subject = peercert.get("subject")
    if not isinstance(subject, tuple):
        return None
    for rdn in subject:
        for attr in rdn:
            if not isinstance(attr, tuple) or len(attr) != 2:
                continue
            name, value = attr
            if name == "commonName":
                user = str(value)
            elif name == "organizationName":
                groups.append(str(value))
    return (user, groups) if user else None


_SSL_NAMES = {
    NameOID.COMMON_NAME: "commonName",
    NameOID.ORGANIZATION_NAME: "organizationName",
    NameOID.ORGANIZATIONAL_UNIT_NAME: "organizationalUnitName",
    NameOID.COUNTRY_NAME: "countryName",
    NameOID.STATE_OR_PROVINCE_NAME: "stateOrProvinceName",
    NameOID.LOCALITY_NAME: "localityName",
}


def ssl_subject(cert_pem: bytes) -> tuple[tuple[tuple[str, str], ...], ...]:
    """A certificate's subject in the shape ``ssl.getpeercert()`` reports names (to compare issuers)."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    return tuple(
        tuple((_SSL_NAMES.get(attr.oid, attr.oid.dotted_string), str(attr.value)) for attr in rdn)
        for rdn in cert.subject.rdns
    )


def unique_ca_name(prefix: str) -> str:
    """CA names with a random suffix, so issuers of different servers never look alike."""
    import secrets

    return f"{prefix}-{secrets.token_hex(4)}"
