"""The Private Network VLAN script run as rendered, by bash, as a login without passwordless sudo: the
box's commands are shims in a folder of the test's own (id, sudo, ip), so nothing touches this
machine's network or /etc. The sudo password reaches sudo on stdin and never the script's output,
which a failed step carries into errors and the MachineClaim's status."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from providers.ssh.privnet import PrivateNetworkParams, render_pn_down_script, render_pn_vlan_script

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


# --- a VLAN that changed, and the Private Network taken away ---------------------------------------------
#
# The box as these shims show it: pn0 is VLAN $PN_OLD on enp1s0 until the sudo log shows it deleted
# (`ip link delete pn0`); after a `netplan apply` it is the VLAN the netplan file names ($PN_NEW), or,
# when the file was removed first, nothing: real netplan creates only what its files describe and
# leaves an existing link as it is, so the script must delete it itself. sudo answers `test -e` as
# $FILE_THERE says and `cmp` as different; mktemp always names $TMPDIR/want, so every command the
# script runs as root is known to the byte.

FILE = "/etc/netplan/60-tuist-private-network.yaml"

BOX_SHIMS = {
    "id": SHIMS["id"],
    "mktemp": ': >"$TMPDIR/want"\necho "$TMPDIR/want"\n',
    "sudo": (
        '[ "$1" = -n ] && exit 1\n'
        "IFS= read -r given\n"
        'printf "%s\\n" "$given" >>"$SHIM_LOG.passwords"\n'
        "shift 3\n"
        'printf "%s\\n" "$*" >>"$SHIM_LOG"\n'
        'case "$1" in\n'
        '  cmp) [ "$CMP_SAME" = yes ] ;;\n'
        '  test) [ "$FILE_THERE" = yes ] ;;\n'
        "  *) exit 0 ;;\n"
        "esac\n"
    ),
    "ip": (
        'log() { grep -qx "$1" "$SHIM_LOG" 2>/dev/null; }\n'
        'case "$*" in\n'
        '  "-o route show default") echo "default via 192.0.2.1 dev enp1s0 proto static"; exit 0 ;;\n'
        "esac\n"
        'if log "netplan apply"; then\n'
        '  log "rm -f ' + FILE + '" && exit 1\n'
        "  id=$PN_NEW\n"
        'elif log "ip link delete pn0" || [ -z "$PN_OLD" ]; then\n'
        "  exit 1\n"
        "else\n"
        "  id=$PN_OLD\n"
        "fi\n"
        'case "$*" in\n'
        '  "link show pn0") echo "5: pn0@enp1s0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500" ;;\n'
        '  "-d link show pn0") echo "5: pn0@enp1s0: mtu 1500 vlan protocol 802.1Q id $id <HDR>" ;;\n'
        "  *) exit 1 ;;\n"
        "esac\n"
    ),
}


def run_on_box(tmp_path: Path, script: str, **box: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in BOX_SHIMS.items():
        shim = bin_dir / name
        shim.write_text("#!/bin/sh\n" + body)
        shim.chmod(0o755)
    log = tmp_path / "sudo.log"
    done = subprocess.run(
        ["bash", "-c", script],
        env={
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "SHIM_LOG": str(log),
            "SUDO_PASSWORD": PASSWORD,
            "TMPDIR": str(tmp_path),
            "PN_OLD": "",
            "PN_NEW": "",
            "FILE_THERE": "no",
            "CMP_SAME": "no",
            **box,
        },
        capture_output=True,
        text=True,
        timeout=30,
    )
    ran = log.read_text().splitlines() if log.exists() else []
    return done, ran


def test_a_pn0_of_another_vlan_is_deleted_before_netplan_makes_the_new_one(tmp_path: Path) -> None:
    done, ran = run_on_box(
        tmp_path, render_pn_vlan_script(PrivateNetworkParams(vlan=42)), PN_OLD="7", PN_NEW="42"
    )

    assert done.returncode == 0, done.stderr
    assert ran == [
        f"cmp -s {tmp_path}/want {FILE}",
        "mkdir -p /etc/netplan",
        f"install -m 0600 {tmp_path}/want {FILE}",
        "ip link delete pn0",
        "netplan apply",
    ]
    assert "pn-vlan: pn0 is VLAN 42 on enp1s0" in done.stdout
    assert "sudo-secret" not in done.stdout + done.stderr


def test_a_pn0_of_the_right_vlan_is_left_in_place(tmp_path: Path) -> None:
    # The file differs (say a comment changed): written and applied, but pn0 is already VLAN 42.
    done, ran = run_on_box(
        tmp_path, render_pn_vlan_script(PrivateNetworkParams(vlan=42)), PN_OLD="42", PN_NEW="42"
    )

    assert done.returncode == 0, done.stderr
    assert ran == [
        f"cmp -s {tmp_path}/want {FILE}",
        "mkdir -p /etc/netplan",
        f"install -m 0600 {tmp_path}/want {FILE}",
        "netplan apply",
    ]


def test_a_file_in_place_without_pn0_is_applied_again(tmp_path: Path) -> None:
    # An earlier run wrote the file and its netplan apply failed: the file compares equal, and no pn0
    # exists. Applying only on a changed file would fail this run, and every later one, unapplied.
    done, ran = run_on_box(
        tmp_path, render_pn_vlan_script(PrivateNetworkParams(vlan=42)), PN_NEW="42", CMP_SAME="yes"
    )

    assert done.returncode == 0, done.stderr
    assert ran == [f"cmp -s {tmp_path}/want {FILE}", "netplan apply"]
    assert "pn-vlan: pn0 is VLAN 42 on enp1s0" in done.stdout


def test_down_removes_the_file_and_pn0_then_applies(tmp_path: Path) -> None:
    script = render_pn_down_script()
    assert script.startswith(
        "# parameters, rendered by providers/ssh/privnet.py\nPN_STATE=down\nPN_INTERFACE=pn0\n"
    )
    done, ran = run_on_box(tmp_path, script, PN_OLD="1000", FILE_THERE="yes")

    assert done.returncode == 0, done.stderr
    assert ran == [f"test -e {FILE}", f"rm -f {FILE}", "ip link delete pn0", "netplan apply"]
    assert "pn-vlan: pn0 is down (no Private Network)" in done.stdout
    assert (tmp_path / "sudo.log.passwords").read_text().splitlines() == [PASSWORD] * 4
    assert "sudo-secret" not in done.stdout + done.stderr


def test_down_with_nothing_there_changes_nothing(tmp_path: Path) -> None:
    done, ran = run_on_box(tmp_path, render_pn_down_script())

    assert done.returncode == 0, done.stderr
    assert ran == [f"test -e {FILE}"]  # no file, no pn0: nothing removed, nothing applied
    assert "pn-vlan: pn0 is down (no Private Network)" in done.stdout


def test_down_fails_when_pn0_is_still_there(tmp_path: Path) -> None:
    # A box whose netplan file is not where the script removes it (another file still declares pn0):
    # apply makes pn0 again, and the step says so instead of reporting it down.
    done, ran = run_on_box(tmp_path, render_pn_down_script(), PN_OLD="1000", PN_NEW="1000")

    assert done.returncode == 1
    assert ran == [f"test -e {FILE}", "ip link delete pn0", "netplan apply"]
    still = "pn-vlan: pn0 is still there after netplan apply: 5: pn0@enp1s0: mtu 1500 vlan protocol 802.1Q"
    assert f"{still} id 1000 <HDR>" in done.stderr
