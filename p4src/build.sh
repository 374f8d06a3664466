#!/usr/bin/env bash
# Compile p4src/mrc.p4 for BMv2 simple_switch(_grpc) into p4src/build/:
#   build/mrc.json            BMv2 pipeline configuration
#   build/mrc.p4info.txtpb    P4Info (text format), to compare with the committed
#                             p4src/mrc.p4info.txtpb (tests/switch/p4/test_p4_bmv2.py does this)
# Usage: p4src/build.sh [output-dir]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here/build}"

if ! command -v p4c-bm2-ss >/dev/null 2>&1; then
    cat >&2 <<'MSG'
p4c-bm2-ss (the P4 compiler for BMv2) is not on PATH. Neither Debian nor PyPI packages it:
install the toolchain with  sudo scripts/install-p4lang.sh  (docs/lab.md, section "BMv2", says
which route fits your machine and how long it takes).
MSG
    exit 2
fi

mkdir -p "$out"
p4c-bm2-ss --arch v1model --std p4-16 \
    -o "$out/mrc.json" \
    --p4runtime-files "$out/mrc.p4info.txtpb" \
    "$here/mrc.p4"
echo "built $out/mrc.json and $out/mrc.p4info.txtpb"
