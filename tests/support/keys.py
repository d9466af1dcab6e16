"""Key pairs for remote object format v2's encryption (issue 29): PEM files as an operator would make them
(``openssl genpkey -algorithm RSA``), and the ``rsm.config.`` settings that use them."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa


def write_key_pair(directory: Path, key_id: str, private: bool = True) -> dict[str, str]:
    """A 2048-bit RSA key pair under ``directory``; its ``encryption.key.pairs.<id>.*`` settings."""
    directory.mkdir(parents=True, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = directory / f"{key_id}.pub.pem"
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    props = {f"encryption.key.pairs.{key_id}.public.key.file": str(public)}
    if private:
        secret = directory / f"{key_id}.pem"
        secret.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()))
        props[f"encryption.key.pairs.{key_id}.private.key.file"] = str(secret)
    return props


def v2_configs(directory: Path, chunk_size: int = 16384, key_id: str = "k1") -> dict[str, str]:
    """Object format v2 with compression and encryption on (a fresh key pair under ``directory``), in chunks
    small enough that a test's segment spans several. Keys without the ``rsm.config.`` prefix."""
    return {"compression.enabled": "true", "encryption.enabled": "true", "encryption.key.pair.id": key_id,
            "encryption.key.pairs": key_id, "chunk.size": str(chunk_size), **write_key_pair(directory, key_id)}


def v2_broker_props(directory: Path, **kw: int | str) -> dict[str, str]:
    """:func:`v2_configs` as broker properties (``rsm.config.`` prefixed)."""
    return {f"rsm.config.{k}": v for k, v in v2_configs(directory, **kw).items()}  # type: ignore[arg-type]
