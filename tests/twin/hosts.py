"""A twin host's Ascend files, made on this machine: device nodes, driver and firmware trees, dcmi, npu-smi, a model.

A root holds what the seed's ``docker run`` mounts from a real host, at the same paths under the root; the
twin host's container gets them at the real paths (fleet.BIND_MOUNTS) and its device nodes with --device.
A profile with ``driver: null`` is a host whose driver was never installed: its root has the cards
(``var/lib/ascend-twin/hardware.json``) and the model, and nothing of the driver until the driver package
stand-in (tests/twin/hdk.py) installs it. Once that file exists the host's Ascend files are its own: a second
``build_root`` keeps what the packages installed.
"""
import json
import os
import pathlib
import stat
import struct

import yaml

from . import hdk, npu_smi

HERE = pathlib.Path(__file__).resolve().parent
PROFILES_FILE = HERE / "profiles.yml"
DISTRIBUTIONS_FILE = HERE / "distributions.yml"
DEFAULT_DISTRIBUTION = "debian"
MODEL_NAME = "Qwen3-VL-8B-Instruct"
MODEL_SHARDS = 4


# Enough of Qwen3-VL-8B-Instruct's config for the stand-in and the model checks; weights are placeholders.
MODEL_CONFIG = {
    "architectures": ["Qwen3VLForConditionalGeneration"],
    "model_type": "qwen3_vl",
    "torch_dtype": "bfloat16",
    "image_token_id": 151655,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "text_config": {"hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32,
                    "num_key_value_heads": 8, "max_position_embeddings": 262144, "vocab_size": 151936},
    "vision_config": {"patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2},
}
MODEL_SMALL_FILES = {
    "generation_config.json": {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20},
    "preprocessor_config.json": {"patch_size": 16, "merge_size": 2, "temporal_patch_size": 2,
                                 "size": {"shortest_edge": 65536, "longest_edge": 16777216}},
    "tokenizer_config.json": {"model_max_length": 262144, "tokenizer_class": "Qwen2Tokenizer"},
    "tokenizer.json": {"version": "1.0", "model": {"type": "BPE"}},
    "vocab.json": {"<|endoftext|>": 151643},
    "chat_template.json": {"chat_template": "{% for message in messages %}{{ message['content'] }}{% endfor %}"},
}


def load_profiles():
    with open(PROFILES_FILE) as handle:
        return yaml.safe_load(handle)


def load_distributions():
    with open(DISTRIBUTIONS_FILE) as handle:
        return yaml.safe_load(handle)


def split_host_spec(spec):
    """A fleet's host spec, `<profile>` or `<profile>@<os>` (distributions.yml; default debian): (profile, os)."""
    profile, _at, distribution = spec.partition("@")
    return profile, distribution or DEFAULT_DISTRIBUTION


def _write(path, content, mode=0o644):
    """Write text (or bytes) only when the content differs, so a second `up` touches nothing."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = content if isinstance(content, bytes) else content.encode()
    if not path.exists() or path.read_bytes() != data:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    elif stat.S_IMODE(path.stat().st_mode) != mode:
        os.chmod(path, mode)


def build_root(root, profile):
    """Create or refresh one host's root folder from its profile."""
    root = pathlib.Path(root)
    build_model(root / "data/models" / MODEL_NAME)
    # What the machine has, and the twin's own programs that act on it (the packages' boot step).
    state = root / hdk.STATE_DIR / hdk.HARDWARE_FILE
    for name in ("hdk.py", "npu_smi.py"):
        _write(root / hdk.STATE_DIR / name, (HERE / name).read_text())
    if state.exists():
        return
    (root / "usr/local/Ascend").mkdir(parents=True, exist_ok=True)
    (root / "dev").mkdir(parents=True, exist_ok=True)
    if profile.get("driver", "") is not None:
        build_driver_files(root, profile)
    hdk.write_hardware(root, hdk.initial_hardware(profile))


# One processor of a Kunpeng 920 as its kernel prints it in /proc/cpuinfo: Arm kernels name no model, only the
# implementer (0x48, HiSilicon) and the part (0xd01, Kunpeng 920 / TaiShan v110).
KUNPENG_920_PROCESSOR = """processor\t: {index}
BogoMIPS\t: 200.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma dcpop asimddp \
asimdfhm
CPU implementer\t: 0x48
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd01
CPU revision\t: 0

"""


def write_cpuinfo(root, architecture):
    """The /proc/cpuinfo of a host of another architecture than this machine's, for the CPUs this machine has
    (under qemu-user, a program reading /proc/cpuinfo reads this machine's own). Returns its path."""
    if architecture != "aarch64":
        raise ValueError("no /proc/cpuinfo known for %r; the twin emulates aarch64 only" % architecture)
    path = pathlib.Path(root) / "kernel/cpuinfo"
    _write(path, "".join(KUNPENG_920_PROCESSOR.format(index=index) for index in range(os.cpu_count())))
    return path


def build_driver_files(root, profile):
    """What an installed driver and firmware leave on a host, as the profile says they are: written by the
    package stand-ins' own writers."""
    expanded = npu_smi.expand_profile(profile)
    hdk.make_device_nodes(root, profile)
    driver_version = profile.get("driver_file_version", expanded["driver"])
    hdk.write_driver_files(root, hdk.DEFAULT_INSTALL_PATH, driver_version, (HERE / "npu_smi.py").read_text())
    hdk.write_firmware_files(root, hdk.DEFAULT_INSTALL_PATH, expanded["firmware"], driver_version)
    hdk.update_install_info(root, [
        ("UserName", hdk.RUN_USER), ("UserGroup", hdk.RUN_USER), ("Driver_Install_Type", "full"),
        ("Driver_Install_Path_Param", hdk.DEFAULT_INSTALL_PATH), ("Driver_Install_For_All", "yes"),
        ("Driver_Install_Mode", "normal"), ("Firmware_Install_Type", "full"),
        ("Firmware_Install_Path_Param", hdk.DEFAULT_INSTALL_PATH)])
    _write(root / "usr/local/dcmi" / npu_smi.PROFILE_NAME, json.dumps(profile, indent=2, sort_keys=True) + "\n")


def safetensors(tensors):
    """The bytes of a .safetensors file holding tensors (name -> float16 values), laid out as the format is: an
    8-byte little-endian header length, the JSON header (padded with spaces to 8 bytes), then the data."""
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, values in sorted(tensors.items()):
        raw = struct.pack("<%de" % len(values), *values)
        header[name] = {"dtype": "F16", "shape": [len(values)], "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def build_model(folder):
    """A Qwen3-VL-8B-Instruct folder with every file the real one has, weights replaced by a few values each."""
    _write(folder / "config.json", json.dumps(MODEL_CONFIG, indent=2) + "\n")
    for name, content in MODEL_SMALL_FILES.items():
        _write(folder / name, json.dumps(content, indent=2, ensure_ascii=False) + "\n")
    _write(folder / "merges.txt", "#version: 0.2\n")
    shards = ["model-%05d-of-%05d.safetensors" % (index, MODEL_SHARDS) for index in range(1, MODEL_SHARDS + 1)]
    weight_map = {"model.layers.%d.weight" % index: shards[index % MODEL_SHARDS] for index in range(8)}
    _write(folder / "model.safetensors.index.json",
           json.dumps({"metadata": {"total_size": 17534340096}, "weight_map": weight_map}, indent=2) + "\n")
    for shard in shards:
        _write(folder / shard, safetensors({name: [0.5, -1.0, 2.0, 0.25] for name, file in weight_map.items()
                                            if file == shard}))
