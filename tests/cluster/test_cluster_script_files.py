"""scripts/cluster.sh's own files survive an interrupted start: ports.env and the service-account keys.

ports.env was written in place, so a start interrupted while writing it left it empty or partial, and
every later start sourced it and died on `APISERVER_PORT: unbound variable`; an interrupt between
`openssl genrsa` and `-pubout` left sa.key without sa.pub for good. The functions run here as
cluster.sh's text has them, against a temporary directory; no control plane starts.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.cluster.test_cluster_script import _functions as shell_functions

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SH = REPO / "scripts" / "cluster.sh"
PORT_VARS = ("ETCD_PORT", "ETCD_PEER_PORT", "APISERVER_PORT", "CONTROLLER_MANAGER_PORT", "SCHEDULER_PORT")


def _functions(*names: str) -> str:
    """The named shell functions of cluster.sh, and its PORT_VARS, as its text has them (the script
    itself runs on load)."""
    text = CLUSTER_SH.read_text()
    start = text.index("\nPORT_VARS=(") + 1
    return text[start : text.index("\n", start) + 1] + shell_functions(*names)


def _bash(script: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    if path:
        env["PATH"] = f"{path}:{env['PATH']}"
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _ports(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


PORTS = _functions("die", "pid_of", "ports_complete", "pick_ports", "pick_free_ports")


@pytest.mark.parametrize("left", ["", "ETCD_PORT=40001\nETCD_PEER_PORT=40002\n"], ids=["empty", "partial"])
def test_a_ports_env_an_interrupted_start_left_is_picked_afresh(tmp_path: Path, left: str):
    (tmp_path / "ports.env").write_text(left)
    done = _bash(PORTS + f'dir={tmp_path}\napiserver_port=\npick_ports\necho "$APISERVER_PORT"\n')
    assert done.returncode == 0, done.stderr
    assert done.stderr == (
        f"cluster: {tmp_path}/ports.env does not set every port (an interrupted start?): "
        "picking them afresh\n"
    )
    ports = _ports((tmp_path / "ports.env").read_text())
    assert sorted(ports) == sorted(PORT_VARS)
    assert all(port.isdigit() for port in ports.values())
    assert done.stdout == f"{ports['APISERVER_PORT']}\n"


def test_a_complete_ports_env_is_kept(tmp_path: Path):
    kept = "".join(f"{name}={40001 + i}\n" for i, name in enumerate(PORT_VARS))
    (tmp_path / "ports.env").write_text(kept)
    done = _bash(PORTS + f'dir={tmp_path}\napiserver_port=\npick_ports\necho "$APISERVER_PORT"\n')
    assert (done.returncode, done.stdout, done.stderr) == (0, "40003\n", "")
    assert (tmp_path / "ports.env").read_text() == kept


def test_ports_env_is_written_whole_or_not_at_all(tmp_path: Path):
    # python3 killed after the first port: nothing named ports.env, and no temporary file, is left.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text("#!/bin/sh\necho ETCD_PORT=40001\nkill -KILL $$\n")
    (fake / "python3").chmod(0o755)
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    done = _bash(PORTS + f"dir={cluster}\npick_free_ports\n", path=str(fake))
    assert done.returncode == 1
    # (after bash's own "Killed" line)
    assert done.stderr.endswith(f"cluster: could not pick free ports for {cluster}\n")
    assert list(cluster.iterdir()) == []


def test_status_reports_an_incomplete_ports_env_instead_of_failing(tmp_path: Path):
    (tmp_path / "ports.env").write_text("ETCD_PORT=40001\n")
    done = subprocess.run(
        ["bash", str(CLUSTER_SH), "status", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (1, "")
    assert done.stdout.splitlines()[0] == (
        f"ports: {tmp_path}/ports.env does not set every port (the next start picks them afresh)"
    )
    assert done.stdout.splitlines()[1:] == [
        f"{name:<26} stopped"
        for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
    ]


# --- the service-account keys ---------------------------------------------------------------------

SA_KEYS = _functions("sa_keys")
# The pair matches: sa.pub is sa.key's public half.
MATCHES = 'cmp -s <(openssl rsa -in "$pki/sa.key" -pubout 2>/dev/null) "$pki/sa.pub" && echo match\n'


def test_a_sa_key_without_its_sa_pub_is_made_afresh(tmp_path: Path):
    (tmp_path / "sa.key").write_text("left by an interrupted start\n")
    done = _bash(SA_KEYS + f"pki={tmp_path}\nsa_keys\n" + MATCHES)
    assert (done.returncode, done.stdout, done.stderr) == (0, "match\n", "")
    assert (tmp_path / "sa.key").stat().st_mode & 0o077 == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sa.key", "sa.pub"]


def test_a_sa_pub_without_its_sa_key_is_made_afresh(tmp_path: Path):
    (tmp_path / "sa.pub").write_text("the half of a pair whose key is gone\n")
    done = _bash(SA_KEYS + f"pki={tmp_path}\nsa_keys\n" + MATCHES)
    assert (done.returncode, done.stdout, done.stderr) == (0, "match\n", "")


def test_an_interrupted_sa_keys_leaves_no_half_pair(tmp_path: Path):
    # openssl fails at -pubout (as if killed between the two): neither key is in place, and the next
    # run makes a matching pair.
    fake = tmp_path / "bin"
    fake.mkdir()
    real = subprocess.run(["bash", "-c", "command -v openssl"], capture_output=True, text=True, check=True)
    (fake / "openssl").write_text(f'#!/bin/sh\n[ "$1" = rsa ] && exit 1\nexec {real.stdout.strip()} "$@"\n')
    (fake / "openssl").chmod(0o755)
    pki = tmp_path / "pki"
    pki.mkdir()
    done = _bash(SA_KEYS + f"pki={pki}\nsa_keys\n", path=str(fake))
    assert done.returncode != 0
    assert not (pki / "sa.key").exists() and not (pki / "sa.pub").exists()
    done = _bash(SA_KEYS + f"pki={pki}\nsa_keys\n" + MATCHES)
    assert (done.returncode, done.stdout, done.stderr) == (0, "match\n", "")


def test_a_whole_pair_is_kept(tmp_path: Path):
    (tmp_path / "sa.key").write_text("key\n")
    (tmp_path / "sa.pub").write_text("pub\n")
    done = _bash(SA_KEYS + f"pki={tmp_path}\nsa_keys\n")
    assert (done.returncode, done.stderr) == (0, "")
    assert ((tmp_path / "sa.key").read_text(), (tmp_path / "sa.pub").read_text()) == ("key\n", "pub\n")
