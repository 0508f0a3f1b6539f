#!/bin/bash
# Runs in Hetzner's rescue system (providers/robot_install.py, INSTALLIMAGE state). It only unpacks its
# two inputs, given base64 in a header the provider prepends (INSTALLIMAGE_CONFIG_B64: the rendered
# installimage.conf.tmpl; POSTINSTALL_B64: robot-postinstall.sh with its artifact pins), and hands
# them to installimage, which lives outside PATH in the rescue system.
set -euo pipefail
: "${INSTALLIMAGE_CONFIG_B64:?the provider renders the installimage config into the header}"
: "${POSTINSTALL_B64:?the provider renders the post-install script into the header}"
printf '%s' "$INSTALLIMAGE_CONFIG_B64" | base64 -d >/root/tuist-installimage.conf
printf '%s' "$POSTINSTALL_B64" | base64 -d >/root/tuist-postinstall.sh
chmod 0700 /root/tuist-postinstall.sh
installimage_bin=$(command -v installimage || echo /root/.oldroot/nfs/install/installimage)
"$installimage_bin" -a -c /root/tuist-installimage.conf -x /root/tuist-postinstall.sh
sync
