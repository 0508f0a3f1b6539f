"""scripts/bootstrap.sh, its functions sourced in a shell of their own (sourced, it runs no stage).

Nothing here touches the host: apt-get is a fake on PATH, the policy-rc.d path is moved into the
test's directory (TUIST_POLICY_RC_D), builds are shell functions, and the toolchain cache and the
work tree's .toolchain/bin are temporary directories.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BOOTSTRAP_SH = REPO / "scripts" / "bootstrap.sh"
LIB_SH = REPO / "scripts" / "lib.sh"

# apt-get: records each call with what the policy-rc.d at $TUIST_POLICY_RC_D answers during it (101:
# refuses service starts), then does what $APT_INSTALL says for `install`: ok, fail, or interrupt (a
# SIGTERM to the shell that runs it, as from a Ctrl-C or a killed set-up).
FAKE_APT_GET = """#!/bin/sh
if [ -x "$TUIST_POLICY_RC_D" ]; then "$TUIST_POLICY_RC_D"; answer=$?; else answer=none; fi
echo "$1 policy=$answer" >>"$APT_LOG"
[ "$1" = install ] || exit 0
case $APT_INSTALL in
    ok) exit 0 ;;
    fail) echo "E: Unable to locate package nosuch" >&2; exit 100 ;;
    interrupt) kill -TERM "$PPID"; exit 0 ;;
esac
"""


def _bash(script: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture
def apt(tmp_path: Path) -> dict[str, str]:
    fakebin = tmp_path / "fakebin"
    fakebin.mkdir()
    (fakebin / "apt-get").write_text(FAKE_APT_GET)
    (fakebin / "apt-get").chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{fakebin}:{os.environ['PATH']}",
        "TUIST_POLICY_RC_D": str(tmp_path / "policy-rc.d"),
        "APT_LOG": str(tmp_path / "apt.log"),
    }


def _apt_install(env: dict[str, str], how: str) -> subprocess.CompletedProcess[str]:
    return _bash(f'source "{BOOTSTRAP_SH}"; apt_install nosuch', {**env, "APT_INSTALL": how})


@pytest.mark.parametrize("how", ["ok", "fail", "interrupt"])
def test_a_policy_rc_d_the_install_created_is_gone_however_it_ends(
    tmp_path: Path, apt: dict[str, str], how: str
):
    done = _apt_install(apt, how)
    assert (done.returncode == 0) == (how == "ok"), done.stderr
    # In place (refusing every service start) while apt-get ran, gone afterwards.
    assert (tmp_path / "apt.log").read_text() == "update policy=101\ninstall policy=101\n"
    assert not (tmp_path / "policy-rc.d").exists()


@pytest.mark.parametrize("how", ["ok", "fail"])
def test_a_policy_rc_d_that_was_there_before_is_left_as_it_was(tmp_path: Path, apt: dict[str, str], how: str):
    policy = tmp_path / "policy-rc.d"
    policy.write_text("#!/bin/sh\n# the operator's own\nexit 101\n")
    policy.chmod(0o750)
    done = _apt_install(apt, how)
    assert (done.returncode == 0) == (how == "ok"), done.stderr
    assert policy.read_text() == "#!/bin/sh\n# the operator's own\nexit 101\n"
    assert stat.S_IMODE(policy.stat().st_mode) == 0o750


# --- cached builds --------------------------------------------------------------------------------

# Each stage that builds, and the build function it caches.
BUILDING_STAGES = {
    "pulumi_cli": "build_langhost",
    "kubernetes_plugin": "build_kubernetes_plugin",
    "actionlint_tool": "build_actionlint",
    "kube_control_plane": "build_kube",
}


@pytest.mark.parametrize("stage_fn", sorted(BUILDING_STAGES))
def test_a_stage_whose_build_fails_fails(tmp_path: Path, stage_fn: str):
    # Every build but the failing one makes a stand-in binary; `go` is a function, so the stage
    # never looks for a real toolchain; the work tree is a temporary one, and PATH (which env.sh
    # starts with the real .toolchain/bin) holds no pulumi.
    root = tmp_path / "root"
    root.mkdir()
    failing = BUILDING_STAGES[stage_fn]
    script = f"""
source "{BOOTSTRAP_SH}"
TUIST_ROOT={root}
root={root}
PATH=/usr/bin:/bin
go() {{ :; }}
stand_in() {{ printf '#!/bin/sh\\necho v%s\\n' "$PULUMI_VERSION" >"$1/bin/$2"; chmod +x "$1/bin/$2"; }}
build_pulumi() {{ stand_in "$1" pulumi; }}
build_langhost() {{ stand_in "$1" pulumi-language-python; }}
build_kubernetes_plugin() {{ mkdir -p "$1/bin"; stand_in "$1" pulumi-resource-kubernetes; }}
build_actionlint() {{ stand_in "$1" actionlint; }}
build_kube() {{ stand_in "$1" kube-apiserver; }}
{failing}() {{ echo "go: the build failed" >&2; return 1; }}
stage "{stage_fn}" {stage_fn}
"""
    env = {
        **os.environ,
        "TUIST_TOOLCHAIN_CACHE": str(tmp_path / "cache"),
        "HOME": str(tmp_path),
    }
    done = _bash(script, env)
    assert done.returncode != 0, done.stderr
    assert "go: the build failed" in done.stderr
    assert re.search(r"^set-up: building \S+ failed", done.stderr, re.M), done.stderr
    assert f"<== {stage_fn}: FAILED" in done.stderr
    assert not any(p.name == "pulumi-language-python" for p in (root / ".toolchain" / "bin").glob("*"))


def test_no_cached_build_or_its_key_is_an_argument():
    # A command substitution given as an argument loses its status (a failed build went on as an
    # empty directory): each is assigned to a variable, on a line of its own, first.
    text = BOOTSTRAP_SH.read_text()
    calls = [line.strip() for line in text.splitlines() if re.search(r"\$\((cached_build|inputs_key) ", line)]
    assert sum("$(cached_build " in line for line in calls) == 5, calls
    for line in calls:
        assert re.fullmatch(r"[a-z]+=\$\((cached_build|inputs_key) .*\)", line), line


def test_a_cached_build_is_keyed_by_its_recipe_and_go_as_well_as_its_inputs(tmp_path: Path):
    # The same inputs key, built by: the recipe; the recipe again; an edited recipe; the recipe under
    # another Go. Each build counts itself in $builds.
    script = f"""
set -euo pipefail
source "{LIB_SH}"
builds={tmp_path}/builds
go() {{ echo "go version go1.26.8 linux/amd64"; }}
build_x() {{ echo built >>"$builds"; printf '#!/bin/sh\\n' >"$1/bin/x"; }}
first=$(cached_build x 0123456789abcdef build_x)
again=$(cached_build x 0123456789abcdef build_x)
build_x() {{ echo built >>"$builds"; printf '#!/bin/sh\\necho -trimpath\\n' >"$1/bin/x"; }}
edited=$(cached_build x 0123456789abcdef build_x)
go() {{ echo "go version go1.27.3 linux/amd64"; }}
other_go=$(cached_build x 0123456789abcdef build_x)
printf '%s\\n' "$first" "$again" "$edited" "$other_go"
"""
    done = _bash(script, {**os.environ, "TUIST_TOOLCHAIN_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr
    first, again, edited, other_go = done.stdout.split()
    assert first == again and len({first, edited, other_go}) == 3, done.stdout
    assert (tmp_path / "builds").read_text().count("built") == 3  # the second call reused the first


@pytest.mark.parametrize("what", ["no directory", "a missing directory", "an empty directory"])
def test_link_bins_refuses_nothing_to_link(tmp_path: Path, what: str):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / ".complete").touch()
    arg = {
        "no directory": "",
        "a missing directory": str(tmp_path / "missing"),
        "an empty directory": str(empty),
    }
    script = (
        f'set -euo pipefail; source "{LIB_SH}"; TUIST_ROOT={tmp_path}; link_bins "{arg[what]}"; echo linked'
    )
    done = _bash(script, {**os.environ})
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr.startswith("set-up: link_bins: ")
