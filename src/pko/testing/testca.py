"""A throw-away certificate authority and one serving certificate, for test servers that must speak TLS.

Some clients refuse plain ``http://`` — the Go reference operator accepts only ``https`` and ``ssh`` git URLs for a
Stack — so test servers need real TLS that real clients verify. Each server gets its own CA: clients trust it through
their usual knobs (``GIT_SSL_CAINFO``, ``SSL_CERT_FILE``), and no test ever turns verification off or touches the
machine's trust store. Built with ``cryptography`` (no ``openssl`` binary needed).

The serving certificate names its host the way strict verifiers (Go's crypto/x509, GnuTLS) demand: in the subject
alternative name — an IP address SAN for an IP, a DNS SAN for a name — never only in the common name. Keys are
ECDSA P-256, which Go, GnuTLS and OpenSSL all accept. Private keys are written readable by their owner only and are
never meant to leave the test's directory.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: Long enough for any test session, short enough that a leaked certificate is soon worthless.
VALIDITY = datetime.timedelta(days=7)


@dataclass(frozen=True)
class ServingCertificate:
    """Files of a CA and of a certificate it signed for one host, as servers and clients read them."""

    ca_path: Path
    cert_path: Path
    key_path: Path

    @property
    def ca_pem(self) -> str:
        return self.ca_path.read_text()


def subject_alternative_name(host: str) -> x509.GeneralName:
    """How a certificate names `host`: an IP address SAN for an IP address, a DNS SAN for anything else."""
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pko tests"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def issue(directory: Path, host: str) -> ServingCertificate:
    """Make a new CA and a serving certificate for `host` in `directory`: ``ca.pem``, ``server.pem``,
    ``server-key.pem`` (mode 0600). The CA's key is never written: nothing else may be signed with it."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    not_before, not_after = now - datetime.timedelta(minutes=5), now + VALIDITY  # tolerate a little clock skew

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"pko test CA for {host}")
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (x509.CertificateBuilder()
          .subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(not_before).not_valid_after(not_after)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(ca_ski, critical=False)
          .sign(ca_key, hashes.SHA256()))

    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(_name(host)).issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(not_before).not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName([subject_alternative_name(host)]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
            .sign(ca_key, hashes.SHA256()))

    served = ServingCertificate(directory / "ca.pem", directory / "server.pem", directory / "server-key.pem")
    served.ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    served.cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    served.key_path.unlink(missing_ok=True)  # a fresh file, so no older, wider mode survives
    fd = os.open(served.key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return served
