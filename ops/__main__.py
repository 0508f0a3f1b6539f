"""`python -m ops`: the operator's CLI (ops/cli.py); `tuist-ops` is the same entry point."""

from ops.cli import main

main()
