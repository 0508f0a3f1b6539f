#!/usr/bin/env python3
"""Pull-request previews: `pulumi preview --diff` with the policy pack, per stack, as one PR comment.

    python3 scripts/ci/preview.py baseline STACK          the pack config: what the stack holds now
    python3 scripts/ci/preview.py run STACK --out DIR     preview one stack; DIR/STACK.{txt,json}
    python3 scripts/ci/preview.py comment DIR             the comment body for every stack in DIR
    python3 scripts/ci/preview.py verify STACK --approved DIR
                                                          preview STACK again; fail unless it plans
                                                          the steps of DIR/STACK.txt (deploy.sh)

`run` exits with the preview's own exit code (a mandatory policy violation fails it) after writing
its result, so the comment job can still report it. The policy pack compares the program with the
machines the stack holds (its `fleets` output, docs/outputs.md) to flag a shrinking fleet or a
release in production; `baseline` reads them. Standard library only: the comment job needs no venv.

`verify` guards production's approval: the reviewers approve the preview the deploy workflow made
before they were asked, and the deploy previews again and stops if the steps differ (a deploy of an
earlier run, or a vendor-side change, moved the state in between): what is applied is what was shown.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MARKER = "<!-- tuist-infra-preview -->"
# GitHub refuses comments over 65536 characters; leave room for the table and the notes.
COMMENT_LIMIT = 65536
ADVISORY_POLICIES = ("fleet-shrinking", "production-release")


def pulumi(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["pulumi", *args], cwd=REPO, text=True, capture_output=True, check=False)


def deployed_machines(stack: str) -> dict[str, list[str]] | None:
    """Fleet name -> machine names the stack holds now, from its outputs; None for a stack without them."""
    shown = pulumi("stack", "output", "fleets", "--json", "--stack", stack, "--non-interactive")
    if shown.returncode != 0 or not shown.stdout.strip():
        return None
    fleets = json.loads(shown.stdout)
    if not isinstance(fleets, dict):
        return None
    return {name: [m["name"] for m in fleet.get("machines") or []] for name, fleet in sorted(fleets.items())}


def policy_config(deployed: dict[str, list[str]] | None) -> dict[str, Any]:
    if deployed is None:
        return {}
    return {policy: {"deployed_machines": deployed} for policy in ADVISORY_POLICIES}


@dataclass
class Result:
    stack: str
    exit_code: int
    command: str
    baseline: bool  # whether the stack's deployed machines were known (the advisory comparisons ran)


def run(stack: str, out: Path, *, echo: bool = True) -> int:
    out.mkdir(parents=True, exist_ok=True)
    config = policy_config(deployed_machines(stack))
    command = [
        "preview",
        "--diff",
        "--color",
        "never",
        "--non-interactive",
        "--policy-pack",
        "policy",
        "--stack",
        stack,
    ]
    with tempfile.TemporaryDirectory() as tmp:
        if config:
            path = Path(tmp) / "policy-config.json"
            path.write_text(json.dumps(config, indent=2))
            command += ["--policy-pack-config", str(path)]
        shown = pulumi(*command)
    text = shown.stdout + (f"\n{shown.stderr}" if shown.stderr.strip() else "")
    (out / f"{stack}.txt").write_text(text)
    result = Result(
        stack,
        shown.returncode,
        "pulumi " + " ".join(c for c in command if "policy-config" not in c),
        bool(config),
    )
    (out / f"{stack}.json").write_text(json.dumps(asdict(result), indent=2) + "\n")
    if echo:
        print(text)
    return shown.returncode


# --- the approved plan ----------------------------------------------------------------------------

# A resource's step under --diff: `    ~ kubernetes:apps/v1:Deployment: (update)`, then its `[urn=...]`.
_STEP = re.compile(r"^\s*(?:[-+~<>=]+\s*)?[\w.:/-]+: \((?P<op>[\w-]+)\)")
_URN = re.compile(r"^\s*\[urn=(?P<urn>[^\]]+)\]")


def planned_steps(text: str) -> list[str]:
    """`<op> <urn>` of every resource a `pulumi preview --diff` would change, sorted."""
    steps: list[str] = []
    op: str | None = None
    for line in text.splitlines():
        if step := _STEP.match(line):
            op = step["op"]
        elif op is not None and (urn := _URN.match(line)):
            if op != "same":
                steps.append(f"{op} {urn['urn']}")
            op = None
    return sorted(steps)


def verify(stack: str, approved: Path) -> int:
    try:
        shown = (approved / f"{stack}.txt").read_text()
        result = json.loads((approved / f"{stack}.json").read_text())
    except (OSError, ValueError) as error:
        print(f"verify: no approved preview of {stack} in {approved}: {error}", file=sys.stderr)
        return 2
    if (approved_code := result.get("exit_code")) != 0:
        print(f"verify: the approved preview of {stack} failed (exit {approved_code})", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        code = run(stack, Path(tmp), echo=False)
        now = (Path(tmp) / f"{stack}.txt").read_text()
    if code != 0:
        print(now)
        print(f"verify: the preview of {stack} failed (exit {code})", file=sys.stderr)
        return 1
    before, after = planned_steps(shown), planned_steps(now)
    if before == after:
        print(f"verify: {stack} plans the approved steps ({changes(now) or 'no changes'})")
        return 0
    print(now)
    lines = [f"verify: {stack}'s plan is not the one approved; nothing was deployed."]
    lines += [f"  approved, no longer planned: {s}" for s in before if s not in after]
    lines += [f"  planned now, not approved:   {s}" for s in after if s not in before]
    lines.append("  Re-run the deploy workflow: its production-preview job shows the plan to approve.")
    print("\n".join(lines), file=sys.stderr)
    return 1


# --- the comment ----------------------------------------------------------------------------------

_CHANGE = re.compile(r"^\s+(?:[+~\-]|\+-|-\+|<=|>-?)?\s*(\d+) (to \w+|unchanged)\s*$")
# A violation as the CLI prints it: `- [mandatory]  <policy>  (<type>: <name>)` in the Policies
# section, or `<pack>@v<version> [advisory]  <policy>  (<type>: <name>)<description>` inline under
# --diff; the message follows on the next line(s).
_VIOLATION = re.compile(
    r"(?:^\s+- |@v\S+ )\[(?P<level>mandatory|advisory)\]\s+(?P<policy>\S+)\s+\((?P<resource>[^)]*)\)"
)


@dataclass(frozen=True)
class Violation:
    level: str
    policy: str
    resource: str  # `<type>: <name>`
    message: str  # the message's first line


def changes(text: str) -> str:
    """The `Resources:` summary as one line: `3 to update, 1 to delete, 80 unchanged`."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Resources:")
    except StopIteration:
        return "-"
    parts = []
    for line in lines[start + 1 :]:
        m = _CHANGE.match(line)
        if not m:
            break
        parts.append(f"{m[1]} {m[2]}")
    return ", ".join(parts) or "-"


def violations(text: str) -> list[Violation]:
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        m = _VIOLATION.search(line)
        if m:
            # Under --diff the description ends the match's line; otherwise it is the next line.
            after = i + 1 if m.group(0).startswith("@") or "@v" in m.group(0) else i + 2
            message = lines[after].strip() if after < len(lines) else ""
            found.append(Violation(m["level"], m["policy"], m["resource"], message))
    return found


def _status(result: Result, found: list[Violation]) -> str:
    if result.exit_code == 0:
        return "✅ previewed"
    if any(v.level == "mandatory" for v in found):
        return "❌ policy violation"
    return "❌ preview failed"


def _policy_cell(found: list[Violation]) -> str:
    cells = []
    for level in ("mandatory", "advisory"):
        names = sorted({v.policy for v in found if v.level == level})
        count = sum(1 for v in found if v.level == level)
        if names:
            cells.append(f"{count} {level}: {', '.join(names)}")
    return "; ".join(cells) or "none"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def comment(results_dir: Path) -> str:
    results = [
        (Result(**json.loads(p.read_text())), (results_dir / f"{p.stem}.txt").read_text())
        for p in sorted(results_dir.glob("*.json"))
    ]
    head = [MARKER, "### `pulumi preview` of this pull request", ""]
    if not results:
        return "\n".join([*head, "No stack was previewed (see the workflow run)."]) + "\n"
    head += ["| stack | result | changes | policy violations |", "|---|---|---|---|"]
    listed = []
    for result, text in results:
        found = violations(text)
        head.append(
            f"| `{result.stack}` | {_status(result, found)} | {changes(text)} | {_policy_cell(found)} |"
        )
        listed += [
            f"- `{result.stack}` **{v.level}** `{v.policy}` on `{v.resource}`: {_cell(v.message)}"
            for v in found
        ]
    if listed:
        head += ["", *listed]
    unbased = [r.stack for r, _ in results if not r.baseline]
    if unbased:
        head += [
            "",
            f"No deployed outputs for {', '.join(unbased)}: fleet-shrinking and production-release "
            "had nothing to compare with.",
        ]
    head.append("")
    budget = (COMMENT_LIMIT - len("\n".join(head)) - 400 * len(results)) // len(results)
    body = []
    for result, text in results:
        shown = (
            text
            if len(text) <= budget
            else text[: max(budget, 0)] + "\n... (truncated: the job log has it all)"
        )
        body += [
            f"<details><summary><code>{result.stack}</code>: <code>{result.command}</code></summary>",
            "",
            "```",
            shown.replace("```", "'''").rstrip(),
            "```",
            "</details>",
            "",
        ]
    return "\n".join(head + body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    base = sub.add_parser("baseline", help="print the policy pack config for STACK")
    base.add_argument("stack")
    one = sub.add_parser("run", help="preview STACK with the policy pack")
    one.add_argument("stack")
    one.add_argument("--out", type=Path, required=True)
    body = sub.add_parser("comment", help="render the PR comment from a results directory")
    body.add_argument("results", type=Path)
    check = sub.add_parser("verify", help="fail unless STACK's preview plans the approved steps")
    check.add_argument("stack")
    check.add_argument("--approved", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "baseline":
        print(json.dumps(policy_config(deployed_machines(args.stack)), indent=2))
        return 0
    if args.command == "run":
        return run(args.stack, args.out)
    if args.command == "verify":
        return verify(args.stack, args.approved)
    sys.stdout.write(comment(args.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
