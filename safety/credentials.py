"""A run's secrets: the P4Runtime CA and certificates, and the software switch's control token.

Issued fresh by every run into its private directory (safety.privdir), so a key of an
earlier run, or one another user saw, opens nothing. The CA signs one server certificate
(for 127.0.0.1 and localhost: every switch of the run serves it) and one client certificate
(the run's controller). The software switch's runtime port has no TLS; it takes a 256-bit
token from secrets, which every request must carry (softswitch.cli). File names: p4rt.tls.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from p4rt import tls
from safety.privdir import PrivateDir

CONTROL_TOKEN = "control.token"
# what a server's switches need (emulation.cluster.serverrun copies these alone to other servers)
SERVER_FILES = (tls.CA_CERT, tls.SERVER_CERT, tls.SERVER_KEY, CONTROL_TOKEN)
VALID_DAYS = 30  # a bench or a lab session lasts hours; the next run issues new ones


@dataclass(frozen=True)
class RunCredentials:
    directory: Path  # holds the files of p4rt.tls and CONTROL_TOKEN
    client: tls.ClientTls
    control_token: str

    @property
    def token_file(self) -> Path:
        return self.directory / CONTROL_TOKEN


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


Signer = tuple[str, ec.EllipticCurvePrivateKey]  # the issuer's name and key


def _cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: Signer | None, *,
          ca: bool = False, server: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    issuer_name, signer = issuer if issuer else (subject, key)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
               .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False)
    if not ca:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(signer, hashes.SHA256())


def issue(rundir: PrivateDir) -> RunCredentials:
    """New CA, server and client certificates and a control token, written 0600 into
    `rundir` (replacing an earlier run's)."""
    run_id = secrets.token_hex(4)
    ca_key, server_key, client_key = (ec.generate_private_key(ec.SECP256R1())
                                      for _ in range(3))
    ca_name = f"mrc-testbed run {run_id} CA"
    ca = _cert(ca_name, ca_key, None, ca=True)
    files = {
        tls.CA_CERT: ca.public_bytes(serialization.Encoding.PEM),
        tls.SERVER_KEY: _key_pem(server_key),
        tls.SERVER_CERT: _cert("127.0.0.1", server_key, (ca_name, ca_key), server=True)
        .public_bytes(serialization.Encoding.PEM),
        tls.CLIENT_KEY: _key_pem(client_key),
        tls.CLIENT_CERT: _cert(f"mrc-testbed run {run_id} controller", client_key,
                               (ca_name, ca_key)).public_bytes(serialization.Encoding.PEM),
        CONTROL_TOKEN: secrets.token_hex(32).encode(),
    }
    for name, data in files.items():
        rundir.write_bytes(name, data)
    return RunCredentials(rundir.path, tls.ClientTls(files[tls.CA_CERT], files[tls.CLIENT_CERT],
                                                     files[tls.CLIENT_KEY]),
                          files[CONTROL_TOKEN].decode())


def withdraw(rundir: PrivateDir) -> None:
    """Delete the run's keys and token when its fabric stops: they open nothing afterwards."""
    for name in (tls.CA_CERT, tls.SERVER_CERT, tls.SERVER_KEY, tls.CLIENT_CERT, tls.CLIENT_KEY,
                 CONTROL_TOKEN):
        rundir.unlink(name)
