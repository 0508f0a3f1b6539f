# shellcheck shell=bash
# Shared by the macOS shims (sourced): the Linux shims' helpers plus what the box's platform says.
# shellcheck source=/dev/null
. /run/sim/bin/sim-lib.sh
# shellcheck disable=SC2034 # read by the shims that source this file
SIM_OS_VERSION=26.0 SIM_OS_BUILD=25A354 SIM_HW_MODEL=Mac14,12 SIM_CPU='Apple M2 Pro' SIM_NCPU=12
# shellcheck disable=SC2034
SIM_MEMSIZE=34359738368
if [[ -r /run/sim/platform ]]; then
  # shellcheck source=/dev/null
  . /run/sim/platform
fi

# What SystemVersion.plist on the box's disk says (a reinstall with another image changes it).
mac_plist_value() {
  local key=$1 plist=/System/Library/CoreServices/SystemVersion.plist
  [[ -r $plist ]] || return 1
  sed -n "/<key>$key<\/key>/{n;s/.*<string>\(.*\)<\/string>.*/\1/p;}" "$plist" | head -n 1
}

mac_version() { mac_plist_value ProductVersion || echo "$SIM_OS_VERSION"; }
mac_build() { mac_plist_value ProductBuildVersion || echo "$SIM_OS_BUILD"; }

# Darwin's release for a macOS version: 26 (Tahoe) runs Darwin 25, 15 (Sequoia) 24, 14 (Sonoma) 23.
mac_darwin_release() {
  local major
  major=$(mac_version | cut -d. -f1)
  if ((major >= 26)); then echo "$((major - 1)).0.0"; else echo "$((major + 9)).0.0"; fi
}

mac_need_root() {
  if ! sim_is_root; then
    printf '%s\n' "$1" >&2
    exit "${2:-1}"
  fi
}
