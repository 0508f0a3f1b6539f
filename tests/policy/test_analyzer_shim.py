"""The `pulumi-analyzer-policy-python` shim starts the pack the way the engine's legacy path calls it.

The engine uses the shim when it finds no Python language host: it runs it from the pack directory
as `pulumi-analyzer-policy-python <engine address> . -virtualenv=../.venv` (PulumiPolicy.yaml's
runtime options become `-key=value` arguments), reads the port the pack prints and talks gRPC to it.
This test does the same and asks the served pack for its policies. (With a language host, as with
the toolchain's own, the host's RunPlugin starts the pack instead: test_pack_engine.py.)
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import grpc
import pytest
from google.protobuf import empty_pb2
from pulumi.runtime.proto import analyzer_pb2_grpc

from policy.tuist_policy.pack import POLICIES

REPO = Path(__file__).resolve().parents[2]
SHIM = REPO / ".toolchain" / "bin" / "pulumi-analyzer-policy-python"


def test_the_shim_serves_the_pack_with_the_engine_s_legacy_arguments() -> None:
    if not SHIM.exists():
        pytest.fail(
            "the analyzer shim is not installed: run `bash scripts/bootstrap.sh` (scripts/test.sh does)"
        )
    pack = subprocess.Popen(
        [str(SHIM), "127.0.0.1:1", ".", "-virtualenv=../.venv", "-toolchain=pip"],
        cwd=REPO / "policy",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert pack.stdout is not None
        port = pack.stdout.readline().strip()
        assert port.isdigit(), (
            f"the pack printed {port!r}, not its port; stderr: {pack.stderr.read() if pack.stderr else ''}"
        )
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            info = analyzer_pb2_grpc.AnalyzerStub(channel).GetAnalyzerInfo(empty_pb2.Empty(), timeout=30)
        assert info.name == "tuist-infra"
        assert [p.name for p in info.policies] == [p.name for p in POLICIES]
        assert all(p.description for p in info.policies)
    finally:
        pack.kill()
        pack.wait(timeout=30)


def test_the_shim_says_which_virtualenv_is_missing(tmp_path: Path) -> None:
    if not SHIM.exists():
        pytest.fail(
            "the analyzer shim is not installed: run `bash scripts/bootstrap.sh` (scripts/test.sh does)"
        )
    done = subprocess.run(
        [str(SHIM), "127.0.0.1:1", ".", "-virtualenv=no-such-venv"],
        cwd=tmp_path,
        text=True,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1
    assert f"no virtualenv at {tmp_path}/no-such-venv" in done.stderr
