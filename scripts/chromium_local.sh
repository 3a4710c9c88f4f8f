#!/usr/bin/env bash
# Debian's Chromium for the run page's browser tests (tests/support/browser.py), installed once (root).
#
#   chromium_local.sh install    apt-get install chromium when /usr/bin/chromium is missing
#
# Two test processes (pytest-xdist workers) may get here at once: one installs, the other waits
# for it and then finds it installed.
set -euo pipefail

installed() {
    command -v chromium >/dev/null
}

case "${1:-}" in
install)
    installed && exit 0
    exec 9>/tmp/mtcore-chromium-install.lock
    flock -w 900 9
    installed && exit 0
    if [ "$(id -u)" != 0 ]; then
        echo "chromium is not installed and installing it needs root: apt-get install chromium" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    for try in $(seq 30); do  # another apt-get (setup, slurm_local.sh) may hold apt's locks
        apt-get update -qq 9>&- && break
        sleep 5
    done
    # with a Japanese font, or the screenshots show Japanese and Chinese pairs as boxes
    apt-get install -y -qq -o DPkg::Lock::Timeout=600 chromium fonts-ipafont-gothic 9>&- >/dev/null
    installed
    ;;
*)
    echo "usage: $0 install" >&2
    exit 2
    ;;
esac
