#!/usr/bin/env bash
# The lab cluster's ssh material, made on the Vagrant host before the VMs come up
# (Vagrantfile, MRC_SERVERS > 1) and handed to every VM, where scripts/provision.sh installs it
# for root (MRC_CLUSTER_DIR):
#
#   scripts/cluster-keys.sh DIR SERVERS NET      e.g. .vagrant/mrc-cluster 3 192.168.56
#
# DIR (made 0700) gets, once (a second run keeps the keys and rewrites the rest):
#   id_ed25519[.pub]     root's key on the first VM; every VM's root accepts it
#   host_ed25519[.pub]   the host key every VM of the lab presents, so the first VM can pin it
#                        (known_hosts) instead of trusting whatever answers on first use
#   known_hosts          mrcI and NET.(10+I) -> that host key
#   ssh_config           Host mrcI -> HostName NET.(10+I), root, the key, the pinned hosts
#   cluster.json         the cluster file for --cluster (emulation/cluster/cluster.py)
# The VMs find it all under /etc/mrc-testbed/cluster (root-only) once provisioned.
set -euo pipefail

die() { echo "cluster-keys: $*" >&2; exit 2; }
[ $# -eq 3 ] || die "usage: $0 DIR SERVERS NET (see the top of this file)"
dir=$1 servers=$2 net=$3
case $servers in ''|*[!0-9]*) die "SERVERS must be a number, got '$servers'" ;; esac
[ "$servers" -ge 2 ] && [ "$servers" -le 8 ] || die "SERVERS must be 2..8, got $servers"
[[ $net =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "NET must look like 192.168.56"
command -v ssh-keygen >/dev/null || die "ssh-keygen (OpenSSH) is needed on the Vagrant host"
ETC=/etc/mrc-testbed/cluster  # where provision.sh puts it on each VM

umask 077
mkdir -p "$dir"
chmod 700 "$dir"
for key in id_ed25519 host_ed25519; do
    [ -f "$dir/$key" ] || ssh-keygen -q -t ed25519 -N '' -C "mrc-lab-$key" -f "$dir/$key"
done
host_key=$(cut -d' ' -f1,2 "$dir/host_ed25519.pub")

: > "$dir/known_hosts.new"
: > "$dir/ssh_config.new"
entries=()
for ((i = 0; i < servers; i++)); do
    address="$net.$((10 + i))"
    echo "mrc$i,$address $host_key" >> "$dir/known_hosts.new"
    cat >> "$dir/ssh_config.new" <<EOF
Host mrc$i
    HostName $address
    User root
    IdentityFile $ETC/id_ed25519
    IdentitiesOnly yes
    UserKnownHostsFile $ETC/known_hosts
    StrictHostKeyChecking yes
EOF
    entries+=("{\"name\": \"mrc$i\", \"address\": \"$address\"}")
done
joined=$(printf '%s, ' "${entries[@]}")
echo "{\"user\": \"root\", \"ssh_config\": \"ssh_config\", \"servers\": [${joined%, }]}" \
    > "$dir/cluster.json.new"
for f in known_hosts ssh_config cluster.json; do
    mv "$dir/$f.new" "$dir/$f"
done
echo "cluster-keys: $dir ready for $servers servers on $net.0/24"
