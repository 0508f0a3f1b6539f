# shellcheck shell=bash
# Shared by the sandbox shims (sourced, never run). The shims stand in for commands that would change
# the machine (mounts, kernel, packages, services, network): each records its argv to the calls log and
# emulates its effect inside the box's sandbox, whose state lives under /var/lib/sim.
#
# Every box has the shims at /run/sim/bin (vendorsim/sandbox/login.sh binds them there), so they source
# this file by that path. The helpers below use bash builtins where a coreutils command would do: a
# self-join calls the shims hundreds of times, and each fork of basename or mkdir costs about a
# millisecond of CPU on a machine whose test suite is CPU-bound.

SIM_STATE=/var/lib/sim
SIM_LOG=/var/log/sim-calls.log
SIM_META=/run/sim/box.env
SIM_REAL_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# A shim's own helper commands (rm, chmod, ...) are the real ones and go unrecorded; the caller's PATH,
# shims first, is kept for the commands a shim runs on the caller's behalf (sudo).
# shellcheck disable=SC2034 # read by the sudo shim
SIM_CALLER_PATH=$PATH
PATH=$SIM_REAL_PATH

# The box's login user and its sudo password hash (written by vendorsim/boxes.py).
SIM_USER=root
# shellcheck disable=SC2034 # read by the sudo shim
SIM_SUDO_SALT='' SIM_SUDO_HASH=''
if [[ -r $SIM_META ]]; then
  # shellcheck source=/dev/null
  . "$SIM_META"
fi

sim_record() {
  local line
  [[ -d ${SIM_LOG%/*} ]] || mkdir -p "${SIM_LOG%/*}"
  printf -v line ' %q' "$@"
  printf '%s%s\n' "${0##*/}" "$line" >>"$SIM_LOG"
}

# The real binary of a passthrough command, skipping the shims directory.
sim_real() {
  local name=$1 dir
  shift
  local IFS=:
  for dir in $SIM_REAL_PATH; do
    if [[ -x $dir/$name ]]; then
      "$dir/$name" "$@"
      return
    fi
  done
  echo "sim: $name: command not found" >&2
  return 127
}

sim_state_dir() {
  [[ -d $SIM_STATE/$1 ]] || mkdir -p "$SIM_STATE/$1"
  printf '%s\n' "$SIM_STATE/$1"
}

# Adds a line to a state list file once.
sim_state_add() {
  local file=$SIM_STATE/$1 line=$2
  [[ -d ${file%/*} ]] || mkdir -p "${file%/*}"
  sim_state_has "$1" "$line" || printf '%s\n' "$line" >>"$file"
}

# Whether a state list file has the line (grep -qxF, without the fork: the lists are a few lines long).
sim_state_has() {
  local file=$SIM_STATE/$1 entry
  [[ -f $file ]] || return 1
  while IFS= read -r entry || [[ -n $entry ]]; do
    [[ $entry == "$2" ]] && return 0
  done <"$file"
  return 1
}

# Whether the caller acts as root: the login user is root, or it runs under the sudo shim.
sim_is_root() {
  [[ $SIM_USER == root || ${SIM_AS_ROOT:-} == 1 ]]
}

sim_need_root() {
  if ! sim_is_root; then
    echo "${0##*/}: $1: Permission denied (are you root?)" >&2
    exit 1
  fi
}
