#!/usr/bin/env bash
# Posts BODY_FILE as the pull request's one preview comment: updates the comment that carries the
# marker (scripts/ci/preview.py writes it on the first line) or creates it, so a PR keeps a single
# comment that each push rewrites. Uses the GitHub CLI (on every GitHub-hosted runner).
# Usage: GH_TOKEN=... GITHUB_REPOSITORY=owner/repo PR_NUMBER=123 bash scripts/ci/pr-comment.sh BODY_FILE
set -euo pipefail
body_file=${1:?usage: pr-comment.sh BODY_FILE}
: "${GITHUB_REPOSITORY:?set GITHUB_REPOSITORY (owner/repo)}"
: "${PR_NUMBER:?set PR_NUMBER (the pull request number)}"
marker=$(head -n 1 "$body_file")
case $marker in
    "<!--"*"-->") ;;
    *) echo "pr-comment: $body_file does not start with its <!-- marker -->" >&2; exit 1 ;;
esac

# The first comment of the PR whose body starts with the marker, if any.
existing=$(gh api --paginate "repos/$GITHUB_REPOSITORY/issues/$PR_NUMBER/comments" \
    --jq ".[] | select(.body | startswith(\"$marker\")) | .id" | head -n 1)
if [ -n "$existing" ]; then
    gh api --method PATCH "repos/$GITHUB_REPOSITORY/issues/comments/$existing" -F "body=@$body_file" >/dev/null
    echo "updated comment $existing on #$PR_NUMBER"
else
    gh api --method POST "repos/$GITHUB_REPOSITORY/issues/$PR_NUMBER/comments" -F "body=@$body_file" >/dev/null
    echo "created the preview comment on #$PR_NUMBER"
fi
