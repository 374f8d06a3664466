#!/usr/bin/env bash
# Turns this machine into an MRC testbed lab. It is the only recipe: the Vagrant VM runs it
# (Vagrantfile) and so does a bare-metal Debian 12 or Ubuntu 22.04/24.04 machine (docs/lab.md,
# "Vagrant lab"). Safe to run twice.
#
#   sudo scripts/provision.sh [--p4-method auto|archive|packages|source] [--no-p4]
#                             [--stop-at-external] [--ignore-resources]
#
# Steps:
#   1. resources: this machine against the needs below; too little stops here, naming what
#      is short (--ignore-resources: warn and go on).
#   2. ./testbed setup: the distribution's packages (Mininet, python3-venv, ...) and the project
#      virtualenv .venv from requirements.txt (PyPI).
#   3. scripts/install-p4lang.sh: p4c and BMv2 by the route that fits the machine (docs/lab.md,
#      "BMv2"); building from source, it picks the compile job count from the RAM.
#      --no-p4 skips it (the software switch needs no P4 toolchain).
#   4. a closing check: the virtualenv imports the testbed's packages and the project's own,
#      and p4c/BMv2 pass install-p4lang.sh --check.
#   5. only with MRC_CLUSTER_DIR set (the Vagrantfile's lab cluster, MRC_SERVERS > 1): the
#      lab's ssh material from scripts/cluster-keys.sh installed for root under
#      /etc/mrc-testbed/cluster, the lab's host key presented by sshd, the lab's key
#      accepted for root, so the first VM reaches every VM as docs/several-machines.md asks.
#
# Needs (M: measured, E: estimate; where and how in docs/lab.md, "Vagrant lab"):
#   cores   2 or more (checked). The suite's and the demo's figures are from 2-core machines.
#   memory  4 GB or more (checked; E, not measured: the suite runs up to 16 switch processes
#           and their agents at once). Building p4c from source: 1.2 GB per compile job on
#           top (install-p4lang.sh sets the job count from this machine's RAM).
#   disk    3 GB free (checked) on / and on the checkout's file system. M, fresh Debian 12
#           root, archive route: 1.1 GB in all (packages 0.4 GB with the P4 runtime
#           libraries, .venv 0.3 GB, /opt/p4 0.15 GB, apt's download cache 0.2 GB). Building
#           from source: about 6 GB more (E; install-p4lang.sh checks).
#   time    M, fresh Debian 12 root, 2 cores, a fast mirror: steps 1-2 about 30 s, the
#           archive route 6 s more, a second run 2 s. E: the p4lang packages (Ubuntu, the VM)
#           a few minutes; building from source about 33 minutes on 2 cores (M, docs/lab.md "BMv2").
#   network the distribution's package archive and PyPI; after those the P4 step fetches from
#           the openSUSE Build Service (packages route, Ubuntu: the VM) or GitHub (source
#           route). --stop-at-external stops right before that download, says what and from
#           where, and exits 3 (the archive route downloads nothing: it runs to the end).
set -euo pipefail

repo="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)"
cd "$repo"
MIN_CORES=2
MIN_MEM_KB=$((3584 * 1024))   # "4 GB": a 4096 MB VM shows about 3.8 GiB as MemTotal
MIN_DISK_GB=3
p4_method=auto p4=1 stop_ext=0 ignore_resources=0

die() { echo "provision: $*" >&2; exit 2; }
say() { echo "provision: $*"; }

while [ $# -gt 0 ]; do
    case $1 in
        --p4-method) p4_method=${2:-}; shift 2 ;;
        --no-p4) p4=0; shift ;;
        --stop-at-external) stop_ext=1; shift ;;
        --ignore-resources) ignore_resources=1; shift ;;
        -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
[ "$(id -u)" -eq 0 ] || die "run as root (sudo $0): it installs packages"

# ---- 1. resources ------------------------------------------------------------------------
resources() {
    local short=() cores mem_kb m free_gb
    cores=$(nproc)
    mem_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
    say "this machine: $cores cores, $((mem_kb / 1048576)) GiB memory"
    [ "$cores" -ge "$MIN_CORES" ] || short+=("$cores cores (needs $MIN_CORES)")
    [ "$mem_kb" -ge "$MIN_MEM_KB" ] || short+=("$((mem_kb / 1024)) MB memory (needs 4 GB)")
    # / holds the packages and /opt/p4; the checkout holds .venv. Count a file system once.
    for m in $(df -P / "$repo" | awk 'NR > 1 {print $6}' | sort -u); do
        free_gb=$(df -Pk "$m" | awk 'NR == 2 {print int($4 / 1048576)}')
        say "free on $m: $free_gb GB"
        [ "$free_gb" -ge "$MIN_DISK_GB" ] || short+=("$free_gb GB free on $m (needs $MIN_DISK_GB)")
    done
    [ ${#short[@]} -eq 0 ] && return 0
    if [ "$ignore_resources" = 1 ]; then
        say "warning: too little: ${short[*]}; going on (--ignore-resources)"
    else
        die "too little: ${short[*]}. Give the machine more (the Vagrantfile's cpus/memory), or" \
            "go on anyway with --ignore-resources"
    fi
}

# ---- 4. closing check of the virtualenv ----------------------------------------------------
check_venv() {
    "$repo/.venv/bin/python" - <<'EOF'
import importlib, sys
wanted = ["mininet.net", "scapy.all", "grpc", "google.protobuf", "p4runtime_sh.shell",
          "matplotlib", "pytest", "wire", "fabric", "p4rt", "softswitch", "controller",
          "host_agent.agent", "sim", "emulation.network", "bench", "grader"]
failed = []
for name in wanted:
    try:
        importlib.import_module(name)
    except Exception as exc:  # report every failure, not just the first
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
v = sys.version_info
if failed:
    print(f"provision: .venv (Python {v.major}.{v.minor}) cannot import:", *failed, sep="\n  ")
    sys.exit(1)
print(f"provision: .venv (Python {v.major}.{v.minor}) imports {len(wanted)} modules")
EOF
}

# ---- 5. a lab cluster's ssh material (optional) ---------------------------------------------
cluster_node() {
    local from=$1 etc=/etc/mrc-testbed/cluster pub f
    for f in id_ed25519 id_ed25519.pub host_ed25519 host_ed25519.pub known_hosts ssh_config \
             cluster.json; do
        [ -f "$from/$f" ] || die "MRC_CLUSTER_DIR=$from has no $f (scripts/cluster-keys.sh" \
                                 "makes it on the Vagrant host)"
    done
    install -d -m 0700 -o root -g root /etc/mrc-testbed "$etc" /root/.ssh
    install -m 0600 -o root -g root "$from/id_ed25519" "$etc/id_ed25519"
    for f in known_hosts ssh_config cluster.json; do
        install -m 0644 -o root -g root "$from/$f" "$etc/$f"
    done
    install -m 0600 -o root -g root "$from/host_ed25519" /etc/ssh/ssh_host_ed25519_key
    install -m 0644 -o root -g root "$from/host_ed25519.pub" /etc/ssh/ssh_host_ed25519_key.pub
    pub=$(cat "$from/id_ed25519.pub")
    touch /root/.ssh/authorized_keys
    chmod 600 /root/.ssh/authorized_keys
    grep -qxF "$pub" /root/.ssh/authorized_keys || echo "$pub" >> /root/.ssh/authorized_keys
    systemctl restart ssh
    say "step 5: lab cluster keys in $etc; run with --cluster $etc/cluster.json"
}

started=$SECONDS
resources
say "step 2: ./testbed setup (packages, .venv)"
"$repo/testbed" setup
say "step 2 done after $((SECONDS - started)) s"

p4_status=skipped
if [ "$p4" = 1 ]; then
    p4_args=(--method "$p4_method")
    [ "$stop_ext" = 1 ] && p4_args+=(--stop-at-external)
    say "step 3: scripts/install-p4lang.sh ${p4_args[*]}"
    rc=0
    "$repo/scripts/install-p4lang.sh" "${p4_args[@]}" || rc=$?
    case $rc in
        0) p4_status=installed ;;
        3) [ "$stop_ext" = 1 ] || die "install-p4lang.sh exited 3 unasked"
           p4_status=stopped ;;
        *) die "install-p4lang.sh failed (exit $rc)" ;;
    esac
    say "step 3 done after $((SECONDS - started)) s"
fi

check_venv || die "the virtualenv is incomplete (see above); delete .venv and run again"
case $p4_status in
    installed) "$repo/scripts/install-p4lang.sh" --check ;;
    skipped) say "P4 toolchain: skipped (--no-p4); the software switch works without it" ;;
    stopped) say "P4 toolchain: not installed: stopped at the first download beyond the" \
                 "package archives (--stop-at-external, see above)"
             exit 3 ;;
esac
[ -n "${MRC_CLUSTER_DIR:-}" ] && cluster_node "$MRC_CLUSTER_DIR"
say "done after $((SECONDS - started)) s: sudo ./testbed demo | sudo ./testbed test"
