#!/usr/bin/env bash
# Regenerates requirements.lock (every Python dependency, transitive ones too,
# pinned with hashes) from pyproject.toml. Run it after changing a pin there;
# scripts/bootstrap.sh installs only from the lock.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
python3 -m venv "$tools"
"$tools/bin/pip" install -q --disable-pip-version-check pip==25.3 pip-tools==7.6.2
cd "$root"
"$tools/bin/pip-compile" -q --generate-hashes --allow-unsafe --strip-extras --extra dev \
    --no-emit-index-url --no-emit-find-links -o requirements.lock pyproject.toml
echo "requirements.lock: $(grep -c '^[a-zA-Z]' requirements.lock) packages"
