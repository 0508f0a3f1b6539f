#!/bin/bash
# macOS bootstrap: turns a prepped Scaleway Mac mini into a runner node, over SSH, the way the
# reference does for its Tart fleet (tuist-anchor.md sections 1.3 and 7): the node agent (tart-kubelet,
# a kubelet for macOS that runs each pod as a Tart VM) under launchd, and the pf anchor that keeps
# sshd reachable under brute force, re-armed every minute. A Mac never gets the Linux self-join.
#
# Delivered by providers/ssh/runner.py: the secrets SUDO_PASSWORD (the one Scaleway set at the last
# install) and BOOTSTRAP_TOKEN (empty when the agent registers no Node) arrive as shell variables
# read from stdin, the parameters below as a header rendered by providers/ssh/macos.py. Written for
# the bash 3.2 every Mac ships. Running it again converges: files are rewritten only when their
# content changes, and the agent is restarted only then.
set -euo pipefail

: "${NODE_NAME:?NODE_NAME is required}"
: "${NODE_IP:?NODE_IP is required}"
: "${PROVIDER_ID:?PROVIDER_ID is required}"
: "${NODE_LABELS:?NODE_LABELS is required}"
: "${NODE_TAINTS=}"
: "${AGENT_URL:?AGENT_URL is required}"
: "${AGENT_SHA256:?AGENT_SHA256 is required}"
: "${REGISTERS_NODE:?REGISTERS_NODE is required}"
: "${API_SERVER=}"
: "${CA_BUNDLE_B64=}"
: "${CLUSTER_DNS=}"
: "${CLUSTER_DOMAIN:=cluster.local}"
: "${SSH_PORT:=22}"
: "${SSHGUARD_PF_B64:?SSHGUARD_PF_B64 is required}"
: "${SSHGUARD_REARM_B64:?SSHGUARD_REARM_B64 is required}"
: "${AGENT_SETTLE_SECONDS:=3}"
: "${SUDO_PASSWORD=}"
: "${BOOTSTRAP_TOKEN=}"

AGENT_LABEL=dev.tuist.node-agent
GUARD_LABEL=dev.tuist.sshguard
LIBEXEC=/usr/local/libexec/tuist
ETC=/usr/local/etc/tuist
AGENT=$LIBEXEC/tart-kubelet
AGENT_PLIST=/Library/LaunchDaemons/$AGENT_LABEL.plist
GUARD_PLIST=/Library/LaunchDaemons/$GUARD_LABEL.plist

# 0. This is a Mac: the Linux self-join must never run here, nor this script on Linux.
if [ "$(uname -s)" != Darwin ] || ! command -v sw_vers >/dev/null; then
  echo "macos-bootstrap: $(uname -s) is not macOS; Linux boxes self-join (self-join.sh)" >&2
  exit 1
fi
echo "macos-bootstrap: $(sw_vers -productName) $(sw_vers -productVersion) ($(sw_vers -buildVersion)), $(uname -m)"

# 1. Passwordless sudo first, so nothing later needs the password (tracing stays off around it).
if [ "$(id -u)" -ne 0 ] && ! sudo -n true 2>/dev/null; then
  if [ -z "$SUDO_PASSWORD" ]; then
    echo "macos-bootstrap: $(id -un) has no passwordless sudo and no sudo password was given" >&2
    exit 1
  fi
  login=$(id -un)
  printf '%s\n' "$SUDO_PASSWORD" | sudo -S -p '' sh -c \
    "printf '%s\n' '$login ALL=(ALL) NOPASSWD:ALL' >/etc/sudoers.d/90-$login-nopasswd && chmod 0440 /etc/sudoers.d/90-$login-nopasswd"
fi
unset SUDO_PASSWORD

set -x

if [ "$(id -u)" -eq 0 ]; then
  as_root() { "$@"; }
else
  as_root() { sudo -n "$@"; }
fi

CHANGED=""
# What a changed file asks of its launchd job. A run that changes one and stops before the reload (a
# later step failed, the session dropped) leaves the reload owed on disk: the next run finds the
# files in place, and must still reload the job onto them.
PENDING=/usr/local/var/tuist/bootstrap
owe() { as_root mkdir -p "$PENDING" && as_root touch "$PENDING/reload-$1"; }
owed() { as_root test -e "$PENDING/reload-$1"; }
paid() { as_root rm -f "$PENDING/reload-$1"; }
# put PATH MODE < content: install the content at PATH unless it is already there; records changes.
# The temporary copy may hold a secret (the bootstrap kubeconfig): removed even when a step fails.
PUT_TMP=
trap 'rm -f "${PUT_TMP:-}"' EXIT
put() {
  local path=$1 mode=$2
  PUT_TMP=$(mktemp)
  cat >"$PUT_TMP"
  if as_root cmp -s "$PUT_TMP" "$path"; then
    as_root chmod "$mode" "$path"
  else
    case $path in
      "$GUARD_PLIST" | "$LIBEXEC/sshguard-rearm.sh") owe guard ;;
      "$AGENT_PLIST" | "$AGENT") owe agent ;;
    esac
    as_root mkdir -p "$(dirname "$path")"
    as_root install -m "$mode" "$PUT_TMP" "$path"
    CHANGED="$CHANGED $path "
  fi
  rm -f "$PUT_TMP"
  PUT_TMP=
}
changed() { case $CHANGED in *" $1 "*) return 0 ;; esac; return 1; }

xml() { # the text, escaped for a plist <string>
  printf '%s' "$1" | sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g'
}

# 2. The Mac's names are the Node's (scutil: what the agent and Bonjour report).
for key in HostName LocalHostName ComputerName; do
  if [ "$(scutil --get "$key" 2>/dev/null || true)" != "$NODE_NAME" ]; then
    as_root scutil --set "$key" "$NODE_NAME"
  fi
done

# 3. The pf guard of sshd: the anchor's rules, the re-arm script and its launchd job (every 60 s).
as_root mkdir -p "$LIBEXEC" "$ETC" /etc/pf.anchors
# (put reads a process substitution, never a pipe: a pipe would run it in a subshell that forgets
# what changed.)
put /etc/pf.anchors/tuist.sshguard 0644 < <(printf '%s' "$SSHGUARD_PF_B64" | base64 --decode | sed "s/__SSH_PORT__/$SSH_PORT/g")
put "$LIBEXEC/sshguard-rearm.sh" 0755 < <(printf '%s' "$SSHGUARD_REARM_B64" | base64 --decode)
as_root pfctl -n -f /etc/pf.anchors/tuist.sshguard # the syntax, before anything is loaded
put "$GUARD_PLIST" 0644 <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
	<key>Label</key>
	<string>$GUARD_LABEL</string>
	<key>ProgramArguments</key>
	<array>
		<string>/bin/bash</string>
		<string>$LIBEXEC/sshguard-rearm.sh</string>
	</array>
	<key>RunAtLoad</key>
	<true/>
	<key>StartInterval</key>
	<integer>60</integer>
	<key>StandardOutPath</key>
	<string>/var/log/tuist-sshguard.log</string>
	<key>StandardErrorPath</key>
	<string>/var/log/tuist-sshguard.log</string>
</dict>
</plist>
EOF
# Armed now, not in a minute: the new rules replace the old ones when they changed.
if changed /etc/pf.anchors/tuist.sshguard; then
  as_root pfctl -q -a com.apple/tuist.sshguard -F rules
fi
as_root /bin/bash "$LIBEXEC/sshguard-rearm.sh"

# 4. The node agent: downloaded, checked against its pin, installed only when it differs.
download=$(mktemp)
# Bounded: a mirror that accepts the connection and stalls fails this step, not the whole step budget.
curl -fsSL --connect-timeout 20 --retry 3 --retry-delay 5 --speed-limit 1024 --speed-time 60 \
  -o "$download" "$AGENT_URL"
got=$(shasum -a 256 "$download" | awk '{print $1}')
if [ "$got" != "$AGENT_SHA256" ]; then
  rm -f "$download"
  echo "macos-bootstrap: $AGENT_URL has sha256 $got, not the pinned $AGENT_SHA256" >&2
  exit 1
fi
put "$AGENT" 0755 <"$download"
rm -f "$download"

# 5. Its bootstrap kubeconfig (the token's identity TLS-bootstraps the agent's own certificate), when
#    it registers a Node; without one, no credential of the cluster is left on the Mac.
bootstrap_kubeconfig=$ETC/bootstrap-kubeconfig
if [ "$REGISTERS_NODE" = true ]; then
  # Tracing off first: the check itself would print the token.
  set +x
  : "${BOOTSTRAP_TOKEN:?BOOTSTRAP_TOKEN is required when the agent registers a Node}"
  put "$bootstrap_kubeconfig" 0600 <<EOF
apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster:
    server: $API_SERVER
    certificate-authority-data: $CA_BUNDLE_B64
users:
- name: tls-bootstrap
  user:
    token: $BOOTSTRAP_TOKEN
contexts:
- name: tls-bootstrap
  context: {cluster: cluster, user: tls-bootstrap}
current-context: tls-bootstrap
EOF
  set -x
else
  as_root rm -f "$bootstrap_kubeconfig"
fi
unset BOOTSTRAP_TOKEN

# 6. The agent's launchd job: the kubelet's flags, as tart-kubelet takes them.
args="--node-name=$NODE_NAME --node-ip=$NODE_IP --provider-id=$PROVIDER_ID --node-labels=$NODE_LABELS"
args="$args --cluster-domain=$CLUSTER_DOMAIN --root-dir=/usr/local/var/lib/tart-kubelet"
if [ -n "$NODE_TAINTS" ]; then args="$args --register-with-taints=$NODE_TAINTS"; fi
if [ -n "$CLUSTER_DNS" ]; then args="$args --cluster-dns=$CLUSTER_DNS"; fi
if [ "$REGISTERS_NODE" = true ]; then
  args="$args --bootstrap-kubeconfig=$bootstrap_kubeconfig --kubeconfig=$ETC/kubeconfig"
else
  args="$args --register-node=false"
fi
program="		<string>$(xml "$AGENT")</string>"
for arg in $args; do
  program="$program
		<string>$(xml "$arg")</string>"
done
put "$AGENT_PLIST" 0644 <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
	<key>Label</key>
	<string>$AGENT_LABEL</string>
	<key>ProgramArguments</key>
	<array>
$program
	</array>
	<key>RunAtLoad</key>
	<true/>
	<key>KeepAlive</key>
	<true/>
	<key>ThrottleInterval</key>
	<integer>5</integer>
	<key>StandardOutPath</key>
	<string>/var/log/tuist-node-agent.log</string>
	<key>StandardErrorPath</key>
	<string>/var/log/tuist-node-agent.log</string>
</dict>
</plist>
EOF

# 7. Load (or reload) both jobs. launchd answers a second bootstrap of a loaded job with an I/O
#    error, so a loaded job whose plist or program changed is booted out first.
load() { # load LABEL PLIST [RELOAD]
  if as_root launchctl print "system/$1" >/dev/null 2>&1; then
    [ "${3:-}" = reload ] || return 0
    as_root launchctl bootout "system/$1"
  fi
  as_root launchctl enable "system/$1"
  as_root launchctl bootstrap system "$2"
}
guard_reload='' agent_reload=''
if owed guard; then guard_reload=reload; fi
# The bootstrap kubeconfig is no trigger (as on Linux): each run brings a new token, the agent reads it
# only until it holds its own certificate, and a reload ends the runner VMs the agent is running.
if owed agent; then agent_reload=reload; fi
load "$GUARD_LABEL" "$GUARD_PLIST" "$guard_reload"
paid guard
load "$AGENT_LABEL" "$AGENT_PLIST" "$agent_reload"
paid agent

# 8. The agent runs, the guard ran cleanly, pf is on and the anchor holds its rules; else fail saying which is not. (Outputs
#    are read whole before grep: `grep -q` closing a pipe early fails the pipeline under pipefail.)
job_print() { as_root launchctl print "system/$1" 2>&1 || true; }
job_field() { # job_field DUMP NAME: the job's own `NAME = value` (one tab in; nested blocks have more)
  awk -v key="\t$2 = " 'index($0, key) == 1 { print substr($0, length(key) + 1); exit }' <<<"$1"
}
job_failed() { # job_failed LABEL DUMP WHY: the dump, the agent's log tail and why, then exit 1
  { set +x; } 2>/dev/null # the failure's last lines are its own, untraced
  printf '%s\n' "$2" >&2
  as_root tail -n 20 /var/log/tuist-node-agent.log >&2 2>/dev/null || true
  echo "macos-bootstrap: launchd job $1 $3" >&2
  exit 1
}
# The guard's re-arm is no daemon: launchd runs it at load and every StartInterval, and it exits.
# Between runs its job reads `state = not running`; it must be loaded and its last run clean.
job=$(job_print "$GUARD_LABEL")
state=$(job_field "$job" state) last_exit=$(job_field "$job" "last exit code")
if [ "$state" != running ] && { [ "$state" != "not running" ] || [ "$last_exit" != 0 ]; }; then
  job_failed "$GUARD_LABEL" "$job" "has not run cleanly (state = ${state:-unknown}, last exit code = ${last_exit:-none})"
fi
# The agent is looked at twice, AGENT_SETTLE_SECONDS apart: a crash-looping agent may be caught in
# one of its short lives, but launchd gives each life a new pid and counts it in `runs`. An agent that
# cannot start exits within a second or two, and its plist's ThrottleInterval keeps launchd from
# respawning it sooner than 5 s after the last spawn, so the second look sees it down or in a new life.
first=$(job_print "$AGENT_LABEL")
[ "$(job_field "$first" state)" = running ] || job_failed "$AGENT_LABEL" "$first" "is not running"
sleep "$AGENT_SETTLE_SECONDS"
second=$(job_print "$AGENT_LABEL")
state=$(job_field "$second" state)
if [ "$state" != running ]; then
  job_failed "$AGENT_LABEL" "$second" \
    "is not running at the second look, $AGENT_SETTLE_SECONDS s after the first (state = ${state:-unknown})"
fi
pid1=$(job_field "$first" pid) pid2=$(job_field "$second" pid)
runs1=$(job_field "$first" runs) runs2=$(job_field "$second" runs)
restarted=''
if [ "$pid1" != "$pid2" ]; then restarted="pid $pid1 then pid $pid2"; fi
if [ "$runs1" != "$runs2" ]; then restarted="${restarted:+$restarted, }runs $runs1 then $runs2"; fi
if [ -n "$restarted" ]; then
  job_failed "$AGENT_LABEL" "$second" "restarted in the $AGENT_SETTLE_SECONDS s between two looks: $restarted"
fi
info=$(as_root pfctl -s info 2>&1 || true)
grep -q '^Status: Enabled' <<<"$info" || { echo "macos-bootstrap: pf is not enabled" >&2; exit 1; }
anchor_rules=$(as_root pfctl -a com.apple/tuist.sshguard -s rules 2>&1 || true)
grep -q 'overload <sshguard>' <<<"$anchor_rules" || {
  echo "macos-bootstrap: the com.apple/tuist.sshguard anchor holds no rules" >&2
  exit 1
}
echo "macos-bootstrap: $NODE_NAME ready (node agent $AGENT_LABEL, sshd guarded by com.apple/tuist.sshguard)"
