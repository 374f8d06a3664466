#!/usr/bin/env bash
# Compile p4src/mrc.p4 for BMv2 simple_switch(_grpc) into p4src/build/:
#   build/mrc.json            BMv2 pipeline configuration
#   build/mrc.p4info.txtpb    P4Info (text format), to compare with the committed
#                             p4src/mrc.p4info.txtpb (tests/test_p4_bmv2.py does this)
# Usage: p4src/build.sh [output-dir]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here/build}"

if ! command -v p4c-bm2-ss >/dev/null 2>&1; then
    cat >&2 <<'MSG'
p4c-bm2-ss (the P4 compiler for BMv2) is not on PATH.
It is packaged neither by Debian nor by PyPI. On Ubuntu 20.04/22.04/24.04 install the
p4lang packages from the openSUSE Build Service:
    . /etc/os-release
    echo "deb https://download.opensuse.org/repositories/home:/p4lang/xUbuntu_${VERSION_ID}/ /" \
        | sudo tee /etc/apt/sources.list.d/home:p4lang.list
    curl -fsSL "https://download.opensuse.org/repositories/home:p4lang/xUbuntu_${VERSION_ID}/Release.key" \
        | gpg --dearmor | sudo tee /etc/apt/trusted.gpg.d/home_p4lang.gpg >/dev/null
    sudo apt-get update && sudo apt-get install -y p4lang-p4c p4lang-bmv2
(p4lang-p4c provides p4c-bm2-ss, p4lang-bmv2 provides simple_switch_grpc and
simple_switch_CLI.) Or build p4c from https://github.com/p4lang/p4c.
MSG
    exit 2
fi

mkdir -p "$out"
p4c-bm2-ss --arch v1model --std p4-16 \
    -o "$out/mrc.json" \
    --p4runtime-files "$out/mrc.p4info.txtpb" \
    "$here/mrc.p4"
echo "built $out/mrc.json and $out/mrc.p4info.txtpb"
