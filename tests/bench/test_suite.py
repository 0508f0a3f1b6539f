"""bench/suite.py: every process sampled from /proc, its CPU summed by kind of process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.suite import REPO, Sampler, Seen, kind_of, measure, report

CLUSTER_SH = "control plane: scripts/cluster.sh"
# A process that spends `seconds` of CPU, then says so.
BURN = "import sys, time\nwhile time.process_time() < float(sys.argv[1]): pass\nprint('burnt', flush=True)\n"


@pytest.mark.parametrize(
    ("cmdline", "kind"),
    [
        # Command lines as the suite's processes have them (a run's /proc, shortened).
        (
            "kube-apiserver --advertise-address=127.0.0.1 --client-ca-file=/tmp/pytest-of-root/p/pki/ca.crt",
            "control plane: kube-apiserver",
        ),
        (
            "etcd --name default --data-dir /tmp/pytest-of-root/pytest-1/popen-gw0/cluster0/etcd",
            "control plane: etcd",
        ),
        (
            "/work/main/.venv/bin/python -u -c import sys;exec(eval(sys.stdin.readline()))",
            "pytest workers (and children no reading saw)",
        ),
        ("python -m pytest -n 4 --dist loadfile", "pytest workers (and children no reading saw)"),
        (
            "pulumi up -s dev --yes --skip-preview --non-interactive",
            "pulumi CLI: up, preview, destroy, refresh, import",
        ),
        ("/work/main/.toolchain/bin/pulumi stack export --stack dev", "pulumi CLI: other commands"),
        ("/work/main/.toolchain/bin/pulumi-resource-kubernetes 127.0.0.1:41073", "pulumi kubernetes plugin"),
        (
            "/tmp/p/e2e0/project/.venv/bin/python -u -m pulumi.dynamic 127.0.0.1:41073",
            "dynamic providers (machines, claims)",
        ),
        ("/tmp/p/e2e0/project/.venv/bin/python -u /tmp/p/e2e0/project/policy 127.0.0.1:1", "policy pack"),
        (
            '/tmp/p/.venv/bin/python -u -c import os\nfd = os.environ.pop("PULUMI_CONFIG_FD", None)',
            "programs (__main__.py) and their language host",
        ),
        ("/work/main/.venv/bin/python -m vendorsim --inventory /tmp/p/ops-sim0/inventory.yaml", "vendorsim"),
        ("sshd: ubuntu@notty", "boxes: sshd and their scripts"),
        (
            "/run/sim/kubelet --bootstrap-kubeconfig=/var/lib/kubelet/bootstrap-kubeconfig",
            "kubelets (stand-ins, boxes')",
        ),
        ("/work/main/.venv/bin/python /work/main/.venv/bin/moto_server -H 127.0.0.1 -p 55415", "moto (S3)"),
        ("/work/main/.venv/bin/python /work/main/.venv/bin/tuist-ops orphans -s runbook", "tuist-ops"),
        ("/work/main/.venv/bin/python /work/main/scripts/generate_kube_api.py --check", "other python"),
        ("bash /work/main/scripts/cluster.sh stop --dir /tmp/p/cluster0", CLUSTER_SH),
        ("openssl genrsa -out /tmp/p/cluster0/pki/sa.key.tmp 2048", "shells and tools"),
        ("", "kernel threads (no command line)"),
        ("/usr/local/bin/something --else", "other"),
    ],
)
def test_each_process_of_the_suite_is_of_its_kind(cmdline: str, kind: str) -> None:
    assert kind_of(cmdline) == kind


def test_a_run_counts_its_processes_cpu_and_not_what_others_spent_before_it() -> None:
    # Already running when the measure starts: a second of CPU before it, none during it.
    before = subprocess.Popen(
        [sys.executable, "-c", BURN + "import time; time.sleep(60)\n", "1.0", "already-running-marker"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert before.stdout is not None and before.stdout.readline() == "burnt\n"
        result = measure([sys.executable, "-c", BURN, "1.5", "bench-suite-marker"], interval=0.1, top=10_000)
    finally:
        before.kill()
        before.wait()
    assert result["returncode"] == 0

    # The sampler reads the whole machine, and the suite's other workers run Python of their own meanwhile,
    # so the figures are read per process: by the markers on the two command lines.
    def spent(marker: str) -> float:
        return sum(row["cpu_s"] for row in result["costliest"] if marker in row["cmdline"])

    # The measured command burnt 1.5 CPU-s; a process is read every 0.1 s, so at most that is missed.
    assert 1.0 <= spent("bench-suite-marker") <= 2.5, result["costliest"]
    # The process that burnt its second before the measure started adds nothing.
    assert spent("already-running-marker") < 0.3, result["costliest"]
    assert result["kinds"]["other python"]["cpu_s"] >= spent("bench-suite-marker")
    assert result["busy_cpu_s"] >= 1.0
    assert result["sampled_cpu_s"] == pytest.approx(sum(row["cpu_s"] for row in result["kinds"].values()))
    text = report(result)
    assert "other python" in text and "floor" in text and "sampled" in text


def test_the_command_line_refuses_a_command_with_extra_arguments_and_a_bad_interval() -> None:
    def bench(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "bench", "suite", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )

    both = bench("--command", "true", "--", "-x")
    assert both.returncode == 2
    assert "--command takes its arguments in its own string; nothing goes after --" in both.stderr
    interval = bench("--interval", "0", "--command", "true")
    assert interval.returncode == 2
    assert "--interval must be above 0 seconds, not 0" in interval.stderr


def test_a_parent_is_credited_with_the_children_no_reading_saw_and_never_twice_with_a_grandchild() -> None:
    sampler = Sampler()
    sampler.seen = {
        # A box's sshd listener reaped a session whose last reading came before its bash exited: the
        # listener's figure holds the bash's 2.1 CPU-s, the session's reading none of it.
        "10:1": Seen("sshd: /usr/sbin/sshd -D [listener]", 10, 1, 1, own=0.0, waited=2.5, alive=False),
        "11:2": Seen("sshd: ubuntu@notty", 11, 10, 2, own=0.0, waited=0.0, alive=False),
        "12:3": Seen("bash -c eval", 12, 11, 3, own=0.1, waited=2.0, alive=False),
        # A parent whose only child lived less than an interval: never read, in its waited figure only.
        "20:4": Seen("pulumi up -s dev", 20, 1, 4, own=3.0, waited=1.0, alive=True),
        # A pid reused later by another process: its parent is the one that started before it.
        "30:5": Seen("bash first", 30, 1, 5, own=0.5, waited=0.0, alive=False),
        "31:6": Seen("sleep", 31, 30, 6, own=0.2, waited=0.0, alive=False),
        "30:9": Seen("bash second", 30, 1, 9, own=0.3, waited=0.0, alive=True),
    }
    cpu = {key: seconds for key, (_, seconds) in sampler.cpu_by_process().items()}
    assert cpu == pytest.approx(
        {"10:1": 0.4, "11:2": 0.0, "12:3": 2.1, "20:4": 4.0, "30:5": 0.5, "31:6": 0.2, "30:9": 0.3}
    )


def test_a_shell_or_tool_under_a_box_or_the_cluster_script_is_of_their_kind() -> None:
    sampler = Sampler()
    sampler.seen = {
        "1:1": Seen("python -u -c import sys;exec(eval(sys.stdin.readline()))", 1, 0, 1, own=1.0, waited=0.0),
        "2:2": Seen("sshd: ubuntu@notty", 2, 1, 2, own=0.0, waited=0.0),
        "3:3": Seen("bash -c IFS= read -r SUDO_PASSWORD && eval", 3, 2, 3, own=0.1, waited=0.0),
        "4:4": Seen("/bin/bash /run/sim/bin/sudo install -D -m 0600 x y", 4, 3, 4, own=0.0, waited=0.0),
        "5:5": Seen("install -D -m 0600 x y", 5, 4, 5, own=0.0, waited=0.0),
        "6:6": Seen("bash /work/main/scripts/cluster.sh start --dir /tmp/c", 6, 1, 6, own=0.1, waited=0.0),
        "7:7": Seen("openssl genrsa -out /tmp/c/pki/ca.key 2048", 7, 6, 7, own=0.1, waited=0.0),
        "8:8": Seen(
            "/work/main/.toolchain/bin/kubectl --kubeconfig /tmp/c/admin.kubeconfig apply",
            8,
            6,
            8,
            own=0.1,
            waited=0.0,
        ),
        # A worker's own tools and Python stay theirs.
        "9:9": Seen("python -c import socket", 9, 1, 9, own=0.1, waited=0.0),
        "10:10": Seen("ssh-keygen -t ed25519", 10, 1, 10, own=0.1, waited=0.0),
    }
    boxes = "boxes: sshd and their scripts"
    assert sampler.kinds() == {
        "1:1": "pytest workers (and children no reading saw)",
        "2:2": boxes,
        "3:3": boxes,
        "4:4": boxes,
        "5:5": boxes,
        "6:6": CLUSTER_SH,
        "7:7": CLUSTER_SH,
        "8:8": CLUSTER_SH,
        "9:9": "other python",
        "10:10": "shells and tools",
    }


def test_a_command_that_spent_no_cpu_still_gets_a_report() -> None:
    idle = {
        "command": ["true"],
        "returncode": 0,
        "wall_s": 0.0,
        "cores": 2,
        "busy_cpu_s": 0.0,
        "sampled_cpu_s": 0.0,
        "sampler_cpu_s": 0.0,
        "kinds": {},
        "costliest": [],
    }
    text = report(idle)
    assert "`true` exited 0" in text and "busy" in text
