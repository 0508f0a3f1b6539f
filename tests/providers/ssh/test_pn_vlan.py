"""The Private Network VLAN script run as rendered, by bash, as a login without passwordless sudo: the
box's commands are shims in a folder of the test's own (id, sudo, ip), so nothing touches this
machine's network or /etc. The sudo password reaches sudo on stdin and never the script's output,
which a failed step carries into errors and the MachineClaim's status."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from providers.ssh.privnet import PrivateNetworkParams, render_pn_vlan_script

PASSWORD = "it's-a-sudo-secret"  # a quote: xtrace would print it re-quoted, past an exact-match scrub

SHIMS = {
    "id": 'case "$1" in -u) echo 1000 ;; -un) echo ubuntu ;; *) exit 1 ;; esac\n',
    # sudo: -n fails (no passwordless sudo); -S reads the password, records it and the command, and
    # answers as the command would without running it (cmp: the netplan file differs).
    "sudo": (
        '[ "$1" = -n ] && exit 1\n'
        "IFS= read -r given\n"
        'printf "%s\\n" "$given" >>"$SHIM_LOG.passwords"\n'
        "shift 3\n"
        'printf "%s\\n" "$*" >>"$SHIM_LOG"\n'
        '[ "$1" = cmp ] && exit 1\n'
        "exit 0\n"
    ),
    "ip": (
        'case "$*" in\n'
        '  "-o route show default") echo "default via 192.0.2.1 dev enp1s0 proto static" ;;\n'
        '  "-d link show pn0") echo "5: pn0@enp1s0: mtu 1500 vlan protocol 802.1Q id 42 <HDR>" ;;\n'
        "  *) exit 1 ;;\n"
        "esac\n"
    ),
}


def test_the_sudo_password_goes_to_sudo_and_never_to_the_output(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in SHIMS.items():
        shim = bin_dir / name
        shim.write_text("#!/bin/sh\n" + body)
        shim.chmod(0o755)
    log = tmp_path / "sudo.log"
    done = subprocess.run(
        ["bash", "-c", render_pn_vlan_script(PrivateNetworkParams(vlan=42))],
        env={
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "SHIM_LOG": str(log),
            "SUDO_PASSWORD": PASSWORD,
            "TMPDIR": str(tmp_path),
        },
        capture_output=True,
        text=True,
        timeout=30,
    )

    assert done.returncode == 0, done.stderr
    assert "pn-vlan: pn0 is VLAN 42 on enp1s0" in done.stdout
    output = done.stdout + done.stderr
    assert "sudo-secret" not in output, output
    # Traced all the same, by hand, without it.
    assert "+ sudo -S netplan apply" in done.stderr
    ran = log.read_text().splitlines()
    assert [line.split()[0] for line in ran] == ["cmp", "mkdir", "install", "netplan"]
    assert (tmp_path / "sudo.log.passwords").read_text().splitlines() == [PASSWORD] * 4
