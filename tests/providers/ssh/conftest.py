"""Real OpenSSH boxes (vendorsim.boxes) on loopback for the SSH runner and script tests."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from providers.ssh.runner import SshTarget
from vendorsim.boxes import BoxFarm, BoxInfo

SUDO_PASSWORD = "correct-horse-battery-9"
BOOTSTRAP_TOKEN = "abcdef.0123456789abcdef"


@dataclass(frozen=True)
class KeyPair:
    private: str  # OpenSSH private key text
    public: str  # "ssh-ed25519 AAAA..."


def new_key() -> KeyPair:
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    return KeyPair(private, public)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Box:
    farm: BoxFarm
    key: str
    user: str
    info: BoxInfo

    @property
    def target(self) -> SshTarget:
        return SshTarget("127.0.0.1", self.info.ssh_port, self.user)

    @property
    def root(self) -> Path:
        return self.info.sandbox_root

    def calls(self) -> list[str]:
        return (self.root / "var/log/sim-calls.log").read_text().splitlines()


@pytest.fixture(scope="session")
def fleet_key() -> KeyPair:
    return new_key()


@pytest.fixture(scope="module")
def farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BoxFarm]:
    farm = BoxFarm(tmp_path_factory.mktemp("boxes"))
    yield farm
    farm.stop_all()


@pytest.fixture
def make_box(
    farm: BoxFarm, fleet_key: KeyPair, request: pytest.FixtureRequest
) -> Iterator[Callable[..., Box]]:
    """make_box(user=..., data_is_separate=..., sudo_password=...) -> Box; each box is fresh."""
    made: list[str] = []

    def make(
        user: str = "ubuntu", *, data_is_separate: bool = False, sudo_password: str | None = SUDO_PASSWORD
    ) -> Box:
        key = f"t{len(made)}-{abs(hash(request.node.nodeid)) % 10**8}"
        info = farm.ensure(
            key,
            ssh_port=free_port(),
            user=user,
            authorized_key=fleet_key.public,
            sudo_password=sudo_password,
            data_is_separate=data_is_separate,
        )
        made.append(key)
        return Box(farm, key, user, info)

    yield make
    for key in made:
        farm.stop(key)
