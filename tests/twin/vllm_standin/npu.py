"""The chips a stand-in opens, holds and binds its CPUs to, as vLLM-Ascend 0.18 on a 310P host does.

Chips. The process sees the ``/dev/davinciN`` nodes of its container (all of the host's when privileged), in
numeric order, narrowed by ``ASCEND_RT_VISIBLE_DEVICES`` (logical ids, re-indexed from 0 in the process's
view). ``ASCEND_VISIBLE_DEVICES`` is read only by Ascend Docker Runtime when it creates a container (physical
ids); neither the CANN runtime nor plain Docker acts on it, so it narrows nothing here (vllm-ascend issue
#6942: a privileged container opened the chips other containers held until ASCEND_RT_VISIBLE_DEVICES was set).

Ownership. A chip belongs to one process: a second one opening it fails while initialising the device
(vllm-ascend issues #248, #2542). The twin keeps that rule across the containers of one host with a lock file
per chip in the host folder every container mounts at ``/root/.cache``; the serving process holds the lock
with ``flock`` for its life, so a dead container frees its chips at once. A chip is known by the device number
of its node, which Docker keeps from the host (the twin's nodes: major 240, minor = the chip's physical id,
the N of ``/dev/davinciN``).

Memory. Each opened chip's used and total MB as the container's npu-smi reports them (``chip_memory``), for the
load's checks (server.py); a chip npu-smi cannot tell (no ``-t phyid-remap``, as older drivers) skips them.

CPU binding (``additional_config`` ``enable_cpu_binding``, default true; vllm_ascend/cpu_binding.py, mode
``topo_affinity`` on 310P): each chip's CPUs are its ``npu-smi info -t topo`` affinity within the CPUs the
process may use (its cpuset, as ``--cpuset-cpus`` sets it). A pool confined to one NUMA node grows by the
next node's allowed CPUs; chips with the same pool share it evenly; a pool keeps two CPUs for interrupts and
one each for the ACL and release threads, the rest runs the worker, so a chip needs at least five. Any failure
is logged as a warning and binding is skipped, never fatal. The twin has no lscpu of the simulated host: the
distinct affinity lists of the topo table stand for its NUMA nodes. The simulated hosts are Kunpeng, so the
real code's "non-ARM CPU: skip" gate never applies.
"""
import fcntl
import glob
import json
import os
import re
import stat
import subprocess

from .cli import Refusal, host_path

CHIP_NODE = re.compile(r"davinci(\d+)$")
STATE_DIR = "/root/.cache/vllm-twin"
MIN_CPUS_PER_CHIP = 5  # 2 interrupt CPUs + at least 1 worker CPU + 1 ACL thread + 1 release thread

# Held for the life of the process: closing a descriptor would free its chip.
_held = []


def visible_devices():
    """The chip nodes the process may use, in logical order (``ASCEND_RT_VISIBLE_DEVICES`` applied)."""
    nodes = [path for path in glob.glob(host_path("/dev/davinci[0-9]*")) if CHIP_NODE.search(path)]
    nodes.sort(key=lambda path: int(CHIP_NODE.search(path).group(1)))
    visible = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
    if not visible:
        return nodes
    wanted = [int(item) for item in visible.split(",") if item.strip()]
    for index in wanted:
        if index >= len(nodes):
            # The CANN runtime's words (seen in gpustack issue #3352).
            raise Refusal("RuntimeError: set ASCEND_RT_VISIBLE_DEVICES:[%d] error, input data rang[0-%d)"
                          % (index, len(nodes)))
    return [nodes[index] for index in wanted]


def chip_identity(node):
    """(identity, physical id) of a chip node: its device number, which Docker keeps from the host.

    A test root made without device nodes has regular files: their name's number stands in.
    """
    info = os.stat(node)
    if stat.S_ISCHR(info.st_mode):
        return "%d:%d" % (os.major(info.st_rdev), os.minor(info.st_rdev)), os.minor(info.st_rdev)
    number = int(CHIP_NODE.search(node).group(1))
    return "file:%d" % number, number


def busy_refusal(node):
    # What the second holder of a chip logs (vllm-ascend #248, the drvRet=87 lines; Resource_Busy(EL0005) is
    # CANN's error code for an occupied device), ending in the torch_npu error that stops the engine.
    return Refusal("RuntimeError: Initialize NPU function error: aclInit, error code is 507899 "
                   "(%s is already opened by another process on this host)" % os.path.basename(node), lines=[
                       "CheckHaveDevice:Call halGetDeviceInfo failed: drvRet=87, module type=0, info type=1.",
                       "GetDeviceCount:Call drvGetDevNum, drvRetCode=87.",
                       "rtGetDeviceCount:ErrCode=507899, desc=[driver error:internal error], InnerCode=0x7020010",
                       "Resource_Busy(EL0005): The resources are busy.",
                   ])


def open_chips(count):
    """Open the first ``count`` visible chips and hold them; return [(node, logical id, physical id)]."""
    folder = host_path(os.path.join(STATE_DIR, "chips"))
    os.makedirs(folder, exist_ok=True)
    opened, handles = [], []
    try:
        for logical, node in enumerate(visible_devices()[:count]):
            identity, number = chip_identity(node)
            handle = open(os.path.join(folder, identity.replace(":", "-")), "a+")
            handles.append(handle)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise busy_refusal(node) from None
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps({"pid": os.getpid(), "node": node, "host": os.uname().nodename}) + "\n")
            handle.flush()
            opened.append((node, logical, number))
    except BaseException:
        for handle in handles:
            handle.close()
        raise
    _held.extend(handles)
    print("INFO NPU chips opened: %s (logical %s)" % (" ".join(os.path.basename(node) for node, _, _ in opened),
                                                     ", ".join(str(logical) for _, logical, _ in opened)),
          flush=True)
    return opened


def release_chips():
    """Close every held chip (the process's end does the same)."""
    while _held:
        _held.pop().close()


def expand_cpus(text):
    """'0-3,8' -> [0, 1, 2, 3, 8]; ValueError when it is not a CPU list."""
    cpus = []
    for part in text.split(","):
        start, _, end = part.strip().partition("-")
        cpus.extend(range(int(start), int(end or start) + 1))
    return cpus


def parse_topo(text):
    """{host logical id: affinity CPUs} from ``npu-smi info -t topo``: a row per chip, CPU affinity last.

    A row is named NPU<logical id> (the real parser counts rows, which comes to the same); the header ends with
    "CPU Affinity"; a row whose last column is not a CPU list (NA, a missing column) has no affinity.
    """
    affinity = {}
    row = 0
    for line in text.splitlines():
        fields = line.split()
        if not fields or not fields[0].startswith("NPU") or fields[-1] == "Affinity":
            continue
        label = re.match(r"NPU(\d+)$", fields[0])
        try:
            affinity[int(label.group(1)) if label else row] = expand_cpus(fields[-1])
        except ValueError:
            pass
        row += 1
    return affinity


def npu_smi(*arguments):
    """stdout of the container's npu-smi; RuntimeError naming its last line when it fails."""
    result = subprocess.run([host_path("/usr/local/bin/npu-smi"), "info"] + list(arguments),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    if result.returncode != 0:
        last = (result.stdout.strip().splitlines() or ["exit status %d" % result.returncode])[-1]
        raise RuntimeError("npu-smi info %s failed: %s" % (" ".join(arguments), last))
    return result.stdout


def logical_id(physical):
    """A chip's host-wide logical id (npu-smi's NPU<n>); without the phyid-remap query, its physical id."""
    try:
        text = npu_smi("-t", "phyid-remap", "-p", str(physical))
    except (OSError, RuntimeError):
        return physical
    found = re.search(r"Chip Logic ID\s*:\s*(\d+)", text)
    return int(found.group(1)) if found else physical


# A chip's second row in ``npu-smi info``: chip id, logic id | bus id | AICore(%), used / total MB.
MEMORY_ROW = re.compile(r"^\|\s*\d+\s+(\d+)\s*\|\s*[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[^|]*\|\s*\S+\s+(\d+)\s*/\s*(\d+)")


def chip_memory(opened):
    """[(logical id, used MB, total MB)] of each opened chip, as the container's npu-smi reports them; None, after a
    warning, when a chip cannot be found there. Real vLLM asks the driver (torch.npu.mem_get_info); the twin's
    process asks npu-smi, as a real one could: ``-t phyid-remap`` names the logic id of the N of /dev/davinciN, and
    the table's row of that logic id has the chip's memory."""
    try:
        rows = {}
        for line in npu_smi().splitlines():
            found = MEMORY_ROW.match(line)
            if found:
                rows[int(found.group(1))] = (int(found.group(2)), int(found.group(3)))
        chips = []
        for node, logical, physical in opened:
            remap = re.search(r"Chip Logic ID\s*:\s*(\d+)", npu_smi("-t", "phyid-remap", "-p", str(physical)))
            if not remap or int(remap.group(1)) not in rows:
                raise RuntimeError("no row of npu-smi info is %s's" % os.path.basename(node))
            chips.append((logical,) + rows[int(remap.group(1))])
    except (OSError, RuntimeError) as error:
        print("WARNING NPU memory unknown (%s): the memory checks at load are skipped." % error, flush=True)
        return None
    return chips


def plan_cpus(chips, affinity, allowed):
    """{chip: pool} as topo_affinity mode builds it; RuntimeError where the real code raises."""
    allowed = sorted(set(allowed))
    nodes = []  # the host's NUMA nodes, in order of their first CPU
    for cpus in sorted(affinity.values()):
        if cpus not in nodes:
            nodes.append(cpus)
    pools = {}
    for chip in chips:
        base = [cpu for cpu in affinity.get(chip, []) if cpu in allowed]
        if not base:
            raise RuntimeError("CPUs available in 'Cpus_allowed_list' conflict with NUMA affinity.")
        home = [node for node in nodes if set(base) <= set(node)]
        if home:
            following = nodes[(nodes.index(home[0]) + 1) % len(nodes)]
            base = sorted(set(base) | {cpu for cpu in following if cpu in allowed})
        pools[chip] = base
    shared = {}
    for chip, pool in pools.items():
        shared.setdefault(tuple(pool), []).append(chip)
    for pool, sharing in shared.items():
        share = len(pool) // len(sharing)
        for index, chip in enumerate(sharing):
            pools[chip] = list(pool[index * share:(index + 1) * share if index < len(sharing) - 1 else None])
    if any(len(pool) < MIN_CPUS_PER_CHIP for pool in pools.values()):
        raise RuntimeError("The number of CPUs is insufficient. Each NPU requires at least %d CPUs."
                               % MIN_CPUS_PER_CHIP)
    return pools


def host_chip_count():
    """Chips of the host: the rows of ``npu-smi info -m`` with a numeric Chip Logic ID."""
    rows = [line.split() for line in npu_smi("-m").splitlines()[1:]]
    return len([row for row in rows if len(row) >= 3 and row[2].isdigit()])


def slice_cpus(chips, total, allowed):
    """{chip: pool} in global_slice mode: the cpuset cut in ``total`` even runs, one per host logical id."""
    allowed = sorted(set(allowed))
    base, extra = divmod(len(allowed), max(total, 1))
    if base < MIN_CPUS_PER_CHIP:
        raise RuntimeError("Insufficient CPUs for binding with IRQ/ACL/REL reservations: total_allowed=%d, "
                           "total_npus=%d, min_per_npu=%d (<%d). Need at least %d CPUs in cpuset."
                           % (len(allowed), total, base, MIN_CPUS_PER_CHIP, total * MIN_CPUS_PER_CHIP))
    pools = {}
    for chip in chips:
        start = chip * base + min(chip, extra)
        pools[chip] = allowed[start:start + base + (1 if chip < extra else 0)]
    return pools


def bind_cpus(opened, port, additional_config):
    """Bind the process as each rank's worker binds itself; return the CPUs bound to ([] when skipped)."""
    record = {"port": port, "chips": [os.path.basename(node) for node, _, _ in opened],
              "allowed": sorted(os.sched_getaffinity(0)), "bound": [], "plan": {}}
    if not (additional_config or {}).get("enable_cpu_binding", True):
        record["skipped"] = "enable_cpu_binding is false"
    else:
        chips = [logical_id(physical) for _, _, physical in opened]
        print("INFO [cpu_bind_mode] mode=topo_affinity rank=0 visible_npus=%s" % chips, flush=True)
        try:
            affinity = parse_topo(npu_smi("-t", "topo"))
            if affinity:
                pools = plan_cpus(chips, affinity, record["allowed"])
            else:
                print("WARNING NPU topo affinity not found, fallback to global-slice CPU binding.", flush=True)
                pools = slice_cpus(chips, host_chip_count(), record["allowed"])
        except (OSError, RuntimeError) as error:
            for rank in range(len(chips)):
                print("WARNING Bind cpus failed in rank%d: %s Skip binding cpu." % (rank, error), flush=True)
            record["skipped"] = str(error)
        else:
            print("INFO The CPU allocation plan is as follows:", flush=True)
            for chip in chips:
                pool = pools[chip]
                print("INFO NPU%d: main=[%s]  acl=[%d]  release=[%d]"
                      % (chip, " ".join(map(str, pool[2:-2])), pool[-2], pool[-1]), flush=True)
                record["plan"][str(chip)] = pool
                record["bound"].extend(pool[2:-2])
            # One process stands for every rank's worker: it runs on all their worker CPUs.
            record["bound"] = sorted(set(record["bound"]))
            os.sched_setaffinity(0, record["bound"])
            print("INFO bound to CPUs %s" % ",".join(map(str, record["bound"])), flush=True)
    folder = host_path(os.path.join(STATE_DIR, "cpus"))
    os.makedirs(folder, exist_ok=True)
    # Named by the chips, which no other server on the host holds; every container listens on the same port.
    with open(os.path.join(folder, "%s.json" % "-".join(record["chips"])), "w") as handle:
        json.dump(record, handle, sort_keys=True)
    return record["bound"]
