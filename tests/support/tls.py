"""A broker certificate for tests: self-signed for 127.0.0.1, made with the JDK's keytool
(Java is there wherever the broker runs), and SCRAM users on a sandbox."""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from sandbox.broker import Tls
from topics.kafka import KafkaConnection


def self_signed(folder: Path, name: str = "broker") -> tuple[Tls, Path]:
    """A PKCS12 key store for the broker and its certificate as PEM (the CA a client trusts:
    the certificate signs itself). Its subject names 127.0.0.1, so both clients' host
    name checks pass."""
    folder.mkdir(parents=True, exist_ok=True)
    keystore, pem, password = folder / f"{name}.p12", folder / f"{name}.pem", secrets.token_hex(12)
    keystore.unlink(missing_ok=True)  # keytool adds to a key store that exists
    subprocess.run(["keytool", "-genkeypair", "-alias", name, "-keyalg", "RSA", "-keysize", "2048", "-validity", "3",
                    "-dname", "CN=127.0.0.1", "-ext", "SAN=ip:127.0.0.1", "-storetype", "PKCS12",
                    "-keystore", str(keystore), "-storepass", password, "-keypass", password],
                   check=True, capture_output=True)
    proc = subprocess.run(["keytool", "-exportcert", "-rfc", "-alias", name, "-keystore", str(keystore),
                           "-storepass", password], check=True, capture_output=True, text=True)
    pem.write_text(proc.stdout)
    return Tls(keystore, password), pem


def add_scram_user(conn: KafkaConnection, user: str, password: str) -> None:
    """A SCRAM-SHA-512 credential for ``user``, set through ``conn`` (a listener that needs no login)."""
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    admin = conn.admin()  # must outlive its futures
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(user, info, password.encode())])
    for future in futures.values():
        future.result()
