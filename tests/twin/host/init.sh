#!/bin/sh
# PID 1 of a twin host: boot what an Ascend server runs (sshd, dockerd), then wait for the stop signal or for a
# reboot (tests/twin/host/shutdown sends SIGUSR1).
#   TWIN_AUTHORIZED_KEY   public key that may log in as `ops`
#   TWIN_CGROUP_PARENT    cgroup under which this host's engine puts its containers (one per twin host)
#   TWIN_BOOT_SECONDS     how long a reboot keeps the host unreachable (default 3)
#   TWIN_FIREWALLD        1: boot firewalld (on D-Bus, nftables backend) before the engine, as an openEuler or Kylin
#                         server does (tests/twin/distributions.yml)
#   TWIN_PYTHON_VERSION   the version the host's python3 reports instead of the root's own; such a python3 runs
#                         nothing else (the distributions' hosts whose Python no module of ansible-core runs on)
set -eu
: "${TWIN_AUTHORIZED_KEY:?}" "${TWIN_CGROUP_PARENT:?}"
# What the driver installer stand-in keeps (tests/twin/hdk.py): a reboot loads the installed driver and the
# firmware in flash, as on a real host.
HDK_BOOT=/var/lib/ascend-twin/hdk.py

# The root's own Python, for what the twin itself runs (firewalld, the driver stand-in), whatever python3 says.
REAL_PYTHON=/usr/libexec/twin-python3
if [ ! -e "$REAL_PYTHON" ]; then
  real=$(readlink -f /usr/bin/python3)
  if [ -n "${TWIN_PYTHON_VERSION:-}" ]; then
    # Only python3 is left, and it is the older one: Ansible's interpreter discovery finds no other.
    mv "$real" "$REAL_PYTHON"
    rm -f /usr/bin/python3
    printf '%s\n' '#!/bin/sh' \
      "# The twin: this host's python3 is Python $TWIN_PYTHON_VERSION (tests/twin/distributions.yml)." \
      'case "${1:-}" in --version|-V) echo "Python '"$TWIN_PYTHON_VERSION"'"; exit 0 ;; esac' \
      'echo "SyntaxError: invalid syntax (Python '"$TWIN_PYTHON_VERSION"' runs none of this)" >&2' 'exit 1' \
      > /usr/bin/python3
    chmod 0755 /usr/bin/python3
  else
    ln -s "$real" "$REAL_PYTHON"
  fi
fi

ssh-keygen -A >/dev/null   # this host's own keys, made at its first boot and kept after
install -d -m 0700 -o ops -g ops /home/ops/.ssh
printf '%s\n' "$TWIN_AUTHORIZED_KEY" > /home/ops/.ssh/authorized_keys
chown ops:ops /home/ops/.ssh/authorized_keys
chmod 0600 /home/ops/.ssh/authorized_keys

# The storage driver of an engine nested in a container: overlay2, as on a real host, where its folder (bind-mounted
# from this machine's disk) takes an overlay mount; else vfs, which works on any backing filesystem but copies an
# image's whole root for every layer and every container.
storage_driver() {
  probe=/var/lib/docker/.overlay-probe
  mkdir -p "$probe/lower" "$probe/upper" "$probe/work" "$probe/merged"
  if mount -t overlay overlay -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" "$probe/merged" \
      2>/dev/null; then
    umount "$probe/merged"
    echo overlay2
  else
    echo vfs
  fi
  rm -rf "$probe"
}

if [ ! -e /etc/docker/daemon.json ]; then
  mkdir -p /etc/docker
  printf '{\n  "storage-driver": "%s",\n  "cgroup-parent": "/%s"\n}\n' "$(storage_driver)" "$TWIN_CGROUP_PARENT" \
    > /etc/docker/daemon.json
fi

# The kernel settings vLLM-Ascend's tuning guide names, as a Kunpeng host with a 6.x kernel boots with them: the
# cppc_cpufreq driver's policies on schedutil, vm.swappiness 60, kernel.numa_balancing 1 (on: more than one NUMA
# node), and the scheduler's migration cost (500000 ns) in debugfs, where kernels since 5.13 keep it. Each is a
# file of this host's own over the real path (the machine's kernel is shared by every container and is not
# touched); a reboot puts the defaults back and then does what systemd does at boot: systemd-sysctl applies
# /etc/sysctl.d, systemd-tmpfiles applies /etc/tmpfiles.d.
KERNEL=/run/twin-kernel
boot_kernel_settings() {
  mkdir -p "$KERNEL"
  for setting in vm/swappiness kernel/numa_balancing; do
    : > "$KERNEL/${setting%/*}.${setting#*/}"
    mount --bind "$KERNEL/${setting%/*}.${setting#*/}" "/proc/sys/$setting"
  done
  if [ -d /sys/kernel/debug ]; then
    mount -t tmpfs -o mode=0700 twin-debugfs /sys/kernel/debug
    mkdir /sys/kernel/debug/sched
  fi
  cpu=0
  [ -d /sys/devices/system/cpu/cpufreq ] && mount -t tmpfs -o mode=0755 twin-cpufreq /sys/devices/system/cpu/cpufreq \
    || cpu=$(nproc --all)   # a kernel without cpufreq: the host has none either
  while [ "$cpu" -lt "$(nproc --all)" ]; do
    policy=/sys/devices/system/cpu/cpufreq/policy$cpu
    mkdir "$policy"
    echo cppc_cpufreq > "$policy/scaling_driver"
    echo "conservative ondemand userspace powersave performance schedutil" > "$policy/scaling_available_governors"
    cpu=$((cpu + 1))
  done
  # A kernel attribute takes a write as its new value; a file keeps the old bytes beyond what is written, and
  # systemd-tmpfiles writes without truncating. So the attributes are empty while the boot's tools run, and those
  # nothing wrote get the kernel's default.
  for attribute in $(attributes | cut -d' ' -f1); do : > "$attribute"; done
  sysctl --system >/dev/null 2>&1 || true
  systemd-tmpfiles --boot --create >/dev/null 2>&1 || true
  rm -f /run/nologin   # what systemd-user-sessions does once a boot is done, where tmpfiles made it (systemd's)
  attributes | while read -r attribute default; do
    [ -s "$attribute" ] || echo "$default" > "$attribute"
  done
}

# Every attribute the twin models, with the value the kernel boots with.
attributes() {
  echo "/proc/sys/vm/swappiness 60"
  echo "/proc/sys/kernel/numa_balancing 1"
  [ -d /sys/kernel/debug/sched ] && echo "/sys/kernel/debug/sched/migration_cost_ns 500000"
  for policy in /sys/devices/system/cpu/cpufreq/policy*; do
    [ -d "$policy" ] && echo "$policy/scaling_governor schedutil"
  done
  return 0
}

unmount_kernel_settings() {
  umount /proc/sys/vm/swappiness /proc/sys/kernel/numa_balancing /sys/kernel/debug /sys/devices/system/cpu/cpufreq \
    2>/dev/null || true
}

# firewalld as systemd starts it, before the network and the engine: the system bus first, then the daemon, whose
# permanent settings (/etc/firewalld) it applies.
start_firewalld() {
  mkdir -p /run/dbus
  rm -f /run/dbus/pid
  dbus-daemon --system --fork
  "$REAL_PYTHON" /usr/sbin/firewalld
  for _ in $(seq 1 100); do
    [ "$("$REAL_PYTHON" /usr/bin/firewall-cmd --state 2>/dev/null)" = running ] && return
    sleep 0.1
  done
  echo "twin host: firewalld did not start" >&2
}

start_services() {
  # Every boot has its own boot ID, as the kernel gives a real one: it is how Ansible's reboot module tells
  # that the host came back from a reboot rather than never went down.
  cat /proc/sys/kernel/random/uuid > /run/twin-boot-id
  mount --bind /run/twin-boot-id /proc/sys/kernel/random/boot_id
  boot_kernel_settings
  if [ "${TWIN_FIREWALLD:-}" = 1 ]; then
    start_firewalld
  fi
  mkdir -p /run/sshd
  service ssh start >/dev/null
  [ ! -x /etc/init.d/docker ] || service docker start >/dev/null   # an RPM host gets its engine from its repository
  # Then what is enabled for the default runlevel, as a sysvinit boot starts it: the services the roles enable
  # (the exporters, Prometheus) come back after a reboot only if they were enabled.
  for script in /etc/rc2.d/S*; do
    case "$script" in
      *ssh|*docker) ;;
      *) [ -x "$script" ] && "$script" start >/dev/null 2>&1 || true ;;
    esac
  done
}

reboot_host() {
  echo "twin host: rebooting"
  service docker stop >/dev/null 2>&1 || true
  service ssh stop >/dev/null 2>&1 || true
  kill -TERM -1 2>/dev/null || true   # every process but this one, as a shutdown does (firewalld, D-Bus too)
  sleep 1
  kill -KILL -1 2>/dev/null || true
  umount /proc/sys/kernel/random/boot_id
  unmount_kernel_settings
  if [ -e "$HDK_BOOT" ]; then
    "$REAL_PYTHON" "$HDK_BOOT" boot
  fi
  sleep "${TWIN_BOOT_SECONDS:-3}"
  start_services
  echo "twin host: up again"
}

start_services
reboot_requested=0
trap 'service docker stop >/dev/null 2>&1; exit 0' TERM INT
trap 'reboot_requested=1' USR1
while :; do
  sleep 3600 &
  wait $! || true
  if [ "$reboot_requested" = 1 ]; then
    reboot_requested=0
    reboot_host
  fi
done
