# shellcheck shell=bash
# The state backend, from scripts/ci/backend.env: source this file, then
#   backend_url            prints the pulumi login URL (s3://<bucket>?endpoint=...&region=...)
#   backend_login          `pulumi login`s to it (S3 credentials from AWS_ACCESS_KEY_ID /
#                          AWS_SECRET_ACCESS_KEY in the environment, never in the URL)
# Values already in the environment win over the file, so a test can point every setting at a
# local S3 server (tests/e2e/test_s3_backend.py) through exactly this code.
_ci_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

_backend_defaults() {
    local line key value
    while IFS= read -r line || [ -n "$line" ]; do
        line=${line%%#*}
        line=${line%"${line##*[![:space:]]}"}
        [ -n "$line" ] || continue
        key=${line%%=*}
        value=${line#*=}
        # `export` only what the environment does not set already.
        if [ -z "${!key+x}" ]; then
            export "$key=$value"
        fi
    done < "$_ci_dir/backend.env"
}
_backend_defaults

backend_url() {
    local query="region=${TUIST_STATE_REGION}&endpoint=${TUIST_STATE_ENDPOINT}"
    if [ "${TUIST_STATE_PATH_STYLE}" = true ]; then
        query="$query&use_path_style=true"
    fi
    printf 's3://%s?%s\n' "$TUIST_STATE_BUCKET" "$query"
}

backend_login() {
    pulumi login --non-interactive "$(backend_url)"
}
