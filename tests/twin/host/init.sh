#!/bin/sh
# PID 1 of a twin host: start what a booted Ascend server runs (sshd, dockerd), then wait for the stop signal.
#   TWIN_AUTHORIZED_KEY   public key that may log in as `ops`
#   TWIN_CGROUP_PARENT    cgroup under which this host's engine puts its containers (one per twin host)
set -eu
: "${TWIN_AUTHORIZED_KEY:?}" "${TWIN_CGROUP_PARENT:?}"

ssh-keygen -A >/dev/null   # this host's own keys, made at its first boot and kept after
install -d -m 0700 -o ops -g ops /home/ops/.ssh
printf '%s\n' "$TWIN_AUTHORIZED_KEY" > /home/ops/.ssh/authorized_keys
chown ops:ops /home/ops/.ssh/authorized_keys
chmod 0600 /home/ops/.ssh/authorized_keys

if [ ! -e /etc/docker/daemon.json ]; then
  # An engine nested in a container: vfs is the storage driver that works on any backing filesystem.
  mkdir -p /etc/docker
  printf '{\n  "storage-driver": "vfs",\n  "cgroup-parent": "/%s"\n}\n' "$TWIN_CGROUP_PARENT" > /etc/docker/daemon.json
fi

mkdir -p /run/sshd
service ssh start >/dev/null
service docker start >/dev/null

trap 'service docker stop >/dev/null 2>&1; exit 0' TERM INT
while :; do
  sleep 3600 &
  wait $! || true
done
