#!/usr/bin/env bash
# Installs p4c and BMv2 (simple_switch_grpc) from the p4lang project's packages on the
# openSUSE Build Service. Ubuntu 20.04+ only: Debian 12 has no such packages, which is why
# the testbed falls back to its software data plane there.
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "run as root" >&2; exit 2; }
. /etc/os-release
if [ "${ID:-}" != "ubuntu" ]; then
    echo "install-p4lang: p4lang packages exist for Ubuntu only (this is ${PRETTY_NAME:-unknown});" >&2
    echo "the testbed runs on its software data plane here (target 'soft')." >&2
    exit 1
fi
if command -v p4c-bm2-ss >/dev/null && command -v simple_switch_grpc >/dev/null; then
    echo "install-p4lang: p4c-bm2-ss and simple_switch_grpc already installed"
    exit 0
fi
repo="https://download.opensuse.org/repositories/home:/p4lang/xUbuntu_${VERSION_ID}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl gnupg ca-certificates
echo "deb ${repo}/ /" > /etc/apt/sources.list.d/home-p4lang.list
curl -fsSL "${repo}/Release.key" | gpg --dearmor > /etc/apt/trusted.gpg.d/home-p4lang.gpg
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq p4lang-p4c p4lang-bmv2
command -v p4c-bm2-ss && command -v simple_switch_grpc
