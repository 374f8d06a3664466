#!/usr/bin/env bash
# Gets the P4 toolchain the testbed's BMv2 target needs onto this machine: p4c (p4c-bm2-ss)
# and BMv2 1.15.1 or newer (simple_switch_grpc with --priority-queues, simple_switch_CLI).
#
#   sudo scripts/install-p4lang.sh [--method auto|archive|packages|source] [--dry-run] [--check]
#                                  [--stop-at-external]
#
# Routes (auto picks the first that fits):
#   archive   Debian 12 amd64 with the prebuilt archive next to the checkout
#             (../shared/p4lang/install.sh, or P4LANG_ARCHIVE=DIR): about a minute.
#   packages  Ubuntu 22.04/24.04: the p4lang packages from the openSUSE Build Service
#             (home:p4lang:latest, which carries the latest tagged releases, for 22.04;
#             home:p4lang otherwise): a few minutes.
#   source    anything else: p4c v1.2.4.15, PI v0.1.1 and behavioral-model 1.15.1 built
#             from their GitHub tags into /opt/p4: about 33 minutes on 2 cores, 1.2 GB of
#             RAM per p4c compile job (the job count is chosen from this machine's RAM).
#             The source route also wants about 6 GB free under SRC_DIR (an estimate; checked).
# Whatever the route, the result is checked: a simple_switch_grpc without --priority-queues
# (BMv2 before 1.15.1) is refused, because the MRC program needs two priority queues.
# --stop-at-external does everything that needs only the distribution's package archive, then
# stops (exit 3) before the first download from anywhere else, naming it: the openSUSE Build
# Service on the packages route, GitHub on the source route; the archive route has none.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
ARCHIVE="${P4LANG_ARCHIVE:-$repo/../shared/p4lang}"
PREFIX="${PREFIX:-/opt/p4}"
# Root builds and runs what is here: never a fixed name in a world-writable directory, where
# another user could plant sources first (checked by private_src before use).
SRC="${SRC_DIR:-/var/cache/mrc-testbed/p4lang-src}"
P4C_TAG=v1.2.4.15 PI_TAG=v0.1.1 BMV2_TAG=1.15.1
method=auto dry=0 check_only=0 stop_ext=0
# Where the system is described; tests point it at another file to see another system's route.
OS_RELEASE=${OS_RELEASE:-/etc/os-release}

die() { echo "install-p4lang: $*" >&2; exit 2; }

# The source tree must be ours, closed to others, and reached through no link: else refuse.
private_src() {
    local p=$SRC owner mode
    while [ "$p" != / ]; do
        [ ! -L "$p" ] || die "refusing $SRC: $p is a symbolic link (set SRC_DIR elsewhere)"
        p=$(dirname "$p")
    done
    owner=$(stat -c %u "$SRC") mode=$(stat -c %a "$SRC")
    [ "$owner" = "$(id -u)" ] || die "refusing $SRC: it belongs to uid $owner, not $(id -u)"
    [ $(( 8#$mode & 8#022 )) -eq 0 ] || die "refusing $SRC: mode $mode lets others write"
}
say() { echo "install-p4lang: $*"; }
run() { if [ "$dry" = 1 ]; then echo "would run: $*"; else "$@"; fi; }

while [ $# -gt 0 ]; do
    case $1 in
        --method) method=${2:-}; shift 2 ;;
        --dry-run) dry=1; shift ;;
        --check) check_only=1; shift ;;
        --stop-at-external) stop_ext=1; shift ;;
        -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
case $method in auto|archive|packages|source) ;; *) die "--method must be auto, archive, packages or source" ;; esac

# ---- the check every route ends with -------------------------------------------------
check() {
    local missing=()
    for tool in p4c-bm2-ss simple_switch_grpc simple_switch_CLI; do
        command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
    done
    [ ${#missing[@]} -eq 0 ] || { echo "install-p4lang: missing: ${missing[*]}" >&2; return 1; }
    if ! simple_switch_grpc --help 2>&1 | grep -q -- '--priority-queues'; then
        echo "install-p4lang: $(command -v simple_switch_grpc) has no --priority-queues" \
             "option: it is BMv2 older than 1.15.1. The MRC program puts trimmed headers and" \
             "control traffic on a second priority queue, which needs that option. Remove this" \
             "BMv2 and install 1.15.1 or newer (--method source builds it)." >&2
        return 1
    fi
    local cli interp
    cli=$(command -v simple_switch_CLI)
    interp=$(head -1 "$cli" | sed -n 's/^#! *//p')
    if [ -n "$interp" ] && ! $interp -c 'import thrift' 2>/dev/null; then
        say "warning: '$interp' (the interpreter simple_switch_CLI starts with) has no 'thrift'" \
            "module: the testbed runs the CLI with an interpreter that has it, but by hand" \
            "you need python3-thrift (apt) for that interpreter"
    fi
    say "ok: $(p4c-bm2-ss --version 2>&1 | grep -m1 -i version), simple_switch_grpc" \
        "$(simple_switch_grpc --version 2>&1 | head -1)"
}

if [ "$check_only" = 1 ]; then check; exit; fi
[ "$(id -u)" -eq 0 ] || [ "$dry" = 1 ] || die "run as root (sudo $0): it installs packages"
if [ "$method" = auto ] && [ "$dry" = 0 ] && check >/dev/null 2>&1; then check; exit 0; fi

# ---- choose a route ----------------------------------------------------------------------
. "$OS_RELEASE"
arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
if [ "$method" = auto ]; then
    if [ "${ID:-}" = debian ] && [ "${VERSION_ID:-}" = 12 ] && [ "$arch" = amd64 ] &&
       [ -f "$ARCHIVE/install.sh" ]; then
        method=archive
    elif [ "${ID:-}" = ubuntu ] && { [ "${VERSION_ID:-}" = 22.04 ] || [ "${VERSION_ID:-}" = 24.04 ]; }; then
        method=packages
    else
        method=source
    fi
fi
say "route: $method (${PRETTY_NAME:-unknown system}, $arch)"

# The boundary --stop-at-external stops at: $1 is what would be fetched, $2 where from.
external() {
    [ "$stop_ext" = 1 ] || return 0
    if [ "$dry" = 1 ]; then
        say "dry run: --stop-at-external would stop here, before fetching $1 from $2"
    else
        say "stopped before fetching $1 from $2 (--stop-at-external): up to here only the" \
            "distribution's package archive was used"
    fi
    exit 3
}

install_archive() {
    [ -f "$ARCHIVE/install.sh" ] || die "no prebuilt archive at $ARCHIVE (set P4LANG_ARCHIVE)"
    run bash "$ARCHIVE/install.sh"
}

install_packages() {
    [ "${ID:-}" = ubuntu ] || die "the p4lang packages exist for Ubuntu only; use --method source"
    local obs="https://download.opensuse.org/repositories" repo_path
    if [ "${VERSION_ID:-}" = 22.04 ]; then
        repo_path="home:/p4lang:/latest/xUbuntu_22.04"
    else
        repo_path="home:/p4lang/xUbuntu_${VERSION_ID}"
    fi
    run apt-get update -qq
    run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl gnupg ca-certificates \
        python3-thrift
    external "the p4lang apt repository's key and package lists" "$obs/$repo_path/"
    if [ "$dry" = 1 ]; then
        echo "would add: deb $obs/$repo_path/ /"
    else
        echo "deb $obs/$repo_path/ /" > /etc/apt/sources.list.d/home-p4lang.list
        curl -fsSL "$obs/$repo_path/Release.key" | gpg --dearmor > /etc/apt/trusted.gpg.d/home-p4lang.gpg
    fi
    run apt-get update -qq
    run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq p4lang-p4c p4lang-bmv2
}

install_source() {
    local mem_gb jobs
    # an existing tree is checked before anything else (--dry-run too): it is what root builds
    if [ -e "$SRC" ] || [ -L "$SRC" ]; then private_src; fi
    mem_gb=$(awk '/MemTotal/ {print int($2 / 1048576)}' /proc/meminfo)
    jobs=$(( mem_gb * 10 / 12 )); [ "$jobs" -ge 1 ] || jobs=1
    [ "$jobs" -le "$(nproc)" ] || jobs=$(nproc)
    say "building p4c $P4C_TAG, PI $PI_TAG, behavioral-model $BMV2_TAG into $PREFIX with" \
        "$jobs jobs (${mem_gb} GB RAM): about 33 minutes on 2 cores"
    local parent=$SRC free_gb
    while [ ! -d "$parent" ]; do parent=$(dirname "$parent"); done
    free_gb=$(df -Pk "$parent" | awk 'NR == 2 {print int($4 / 1048576)}')
    if [ "$free_gb" -lt 6 ]; then
        local short="the source build wants about 6 GB free under $SRC (sources, build trees);"
        short="$short $parent has ${free_gb} GB: free some, or set SRC_DIR to a larger file system"
        if [ "$dry" = 1 ]; then say "warning: $short"; else die "$short"; fi
    fi
    run apt-get update -qq
    run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        build-essential cmake bison flex libfl-dev git pkg-config autoconf automake libtool \
        python3 python3-dev python3-thrift libboost-dev libboost-program-options-dev \
        libboost-system-dev libboost-filesystem-dev libboost-thread-dev \
        libboost-iostreams-dev libboost-graph-dev libboost-test-dev libgc-dev libgmp-dev \
        libprotobuf-dev libprotoc-dev protobuf-compiler libgrpc++-dev libgrpc-dev \
        protobuf-compiler-grpc libthrift-dev thrift-compiler libnanomsg-dev libpcap-dev \
        libjudy-dev libreadline-dev libssl-dev zlib1g-dev uthash-dev
    run mkdir -p -m 0700 "$SRC"
    [ "$dry" = 1 ] || private_src
    local gh=https://github.com/p4lang
    if [ ! -d "$SRC/PI" ] || [ ! -d "$SRC/behavioral-model" ] || [ ! -d "$SRC/p4c" ]; then
        external "the sources of PI $PI_TAG, behavioral-model $BMV2_TAG and p4c $P4C_TAG" "$gh"
    fi
    [ -d "$SRC/PI" ] || run git clone -q --depth 1 --branch "$PI_TAG" --recurse-submodules \
        --shallow-submodules "$gh/PI" "$SRC/PI"
    [ -d "$SRC/behavioral-model" ] || run git clone -q --depth 1 --branch "$BMV2_TAG" \
        "$gh/behavioral-model" "$SRC/behavioral-model"
    [ -d "$SRC/p4c" ] || run git clone -q --depth 1 --branch "$P4C_TAG" --recurse-submodules \
        --shallow-submodules "$gh/p4c" "$SRC/p4c"
    # PI first (BMv2's P4Runtime server links it), then BMv2 and its gRPC target, then p4c.
    run sh -c "cd '$SRC/PI' && ./autogen.sh && ./configure --prefix='$PREFIX' --with-proto \
        --without-internal-rpc --without-cli --without-bmv2 && make -j$jobs && make install"
    run sh -c "cd '$SRC/behavioral-model' && ./autogen.sh && ./configure --prefix='$PREFIX' \
        --with-pi --with-thrift --with-nanomsg CPPFLAGS=-I'$PREFIX/include' \
        LDFLAGS=-L'$PREFIX/lib' && make -j$jobs && make install && cd targets/simple_switch_grpc \
        && ./autogen.sh && ./configure --prefix='$PREFIX' --with-thrift \
        CPPFLAGS=-I'$PREFIX/include' LDFLAGS=-L'$PREFIX/lib' && make -j$jobs && make install"
    # Debian's protobuf has no CMake config package: let p4c fall back to FindProtobuf.
    run sed -i 's/find_package(Protobuf REQUIRED CONFIG/find_package(Protobuf REQUIRED/' \
        "$SRC/p4c/cmake/Protobuf.cmake"
    run sh -c "mkdir -p '$SRC/p4c/build' && cd '$SRC/p4c/build' && cmake .. \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX='$PREFIX' -DCMAKE_UNITY_BUILD=ON \
        -DENABLE_BMV2=ON -DENABLE_EBPF=OFF -DENABLE_UBPF=OFF -DENABLE_DPDK=OFF \
        -DENABLE_P4TC=OFF -DENABLE_P4TEST=OFF -DENABLE_P4C_GRAPHS=OFF -DENABLE_GTESTS=OFF \
        -DENABLE_TEST_TOOLS=OFF -DENABLE_DOCS=OFF -DP4C_USE_PREINSTALLED_PROTOBUF=ON \
        -DP4C_USE_PREINSTALLED_BDWGC=ON -DP4C_USE_PREINSTALLED_ABSEIL=OFF \
        && make -j$jobs && make install"
    for tool in p4c-bm2-ss simple_switch_grpc simple_switch simple_switch_CLI; do
        run ln -sf "$PREFIX/bin/$tool" "/usr/local/bin/$tool"
    done
    if [ "$dry" = 1 ]; then
        echo "would add $PREFIX/lib to /etc/ld.so.conf.d/p4lang.conf and run ldconfig"
    else
        echo "$PREFIX/lib" > /etc/ld.so.conf.d/p4lang.conf && ldconfig
    fi
}

"install_$method"
if [ "$dry" = 1 ]; then say "dry run: nothing was changed"; exit 0; fi
check
