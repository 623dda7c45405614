"""A twin host's Ascend files, made on this machine: device nodes, driver and firmware trees, dcmi, npu-smi, a model.

A root holds what the seed's ``docker run`` mounts from a real host, at the same paths under the root; the
twin host's container gets them at the real paths (fleet.BIND_MOUNTS) and its device nodes with --device.
"""
import json
import os
import pathlib
import stat

import yaml

from . import npu_smi

HERE = pathlib.Path(__file__).resolve().parent
PROFILES_FILE = HERE / "profiles.yml"
MODEL_NAME = "Qwen3-VL-8B-Instruct"
MODEL_SHARDS = 4

# Character device numbers in Linux's "local/experimental use" range (240-254): no real driver owns them.
DAVINCI_MAJOR = 240
MANAGER_DEVICES = {"davinci_manager": (241, 0), "devmm_svm": (242, 0), "hisi_hdc": (243, 0)}

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


def _write(path, text, mode=0o644):
    """Write only when the content differs, so a second `up` touches nothing."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    elif stat.S_IMODE(path.stat().st_mode) != mode:
        os.chmod(path, mode)


def _char_device(path, major, minor):
    device = os.makedev(major, minor)
    if path.exists() or path.is_symlink():
        info = path.lstat()
        if stat.S_ISCHR(info.st_mode) and info.st_rdev == device:
            return
        path.unlink()
    os.mknod(path, 0o660 | stat.S_IFCHR, device)


def build_root(root, profile):
    """Create or refresh one host's root folder from its profile."""
    root = pathlib.Path(root)
    expanded = npu_smi.expand_profile(profile)
    dev = root / "dev"
    dev.mkdir(parents=True, exist_ok=True)
    wanted = {}
    for card in expanded["cards"]:
        for chip in card["chips"]:
            # The driver names a chip's node by its physical id; missing_devices names chips by logic id.
            if chip["logic_id"] not in profile.get("missing_devices", []):
                wanted["davinci%d" % chip["phy_id"]] = (DAVINCI_MAJOR, chip["phy_id"])
    wanted.update(MANAGER_DEVICES)
    for existing in dev.iterdir():
        if existing.name not in wanted:
            existing.unlink()
    for name, (major, minor) in wanted.items():
        _char_device(dev / name, major, minor)

    driver = root / "usr/local/Ascend/driver"
    driver_version = profile.get("driver_file_version", expanded["driver"])
    _write(driver / "version.info", "".join([
        "Version=%s\n" % driver_version,
        "ascendhal_version=7.35.23\naicpu_version=1.0\ntdt_version=1.0\nlog_version=1.0\nprof_version=2.0\n",
        "dvppkernels_version=1.1\ntsfw_version=1.0\n",
        "package_version=%s\n" % driver_version,
    ]))
    for library in ("libascend_hal.so", "libdrvdsmi_host.so", "libc_sec.so"):
        _write(driver / "lib64" / library, "twin placeholder for the Ascend driver's %s\n" % library)
    _write(root / "usr/local/Ascend/firmware/version.info",
           "Version=%s\nfirmware_version=1.0\npackage_version=%s\n" % (expanded["firmware"], driver_version))
    _write(root / "etc/ascend_install.info", "".join([
        "UserName=HwHiAiUser\nUserGroup=HwHiAiUser\n",
        "Driver_Install_Type=full\nDriver_Install_Path_Param=/usr/local/Ascend\n",
        "Driver_Install_For_All=yes\nDriver_Install_Mode=normal\n",
        "Firmware_Install_Type=full\nFirmware_Install_Path_Param=/usr/local/Ascend\n",
    ]))
    _write(root / "usr/local/dcmi" / npu_smi.PROFILE_NAME, json.dumps(profile, indent=2, sort_keys=True) + "\n")
    _write(root / "usr/local/dcmi/dcmi_interface_api.h", "/* twin placeholder for the dcmi header */\n")
    _write(root / "usr/local/bin/npu-smi", (HERE / "npu_smi.py").read_text(), mode=0o755)
    build_model(root / "data/models" / MODEL_NAME)


def build_model(folder):
    """A Qwen3-VL-8B-Instruct folder with every file the real one has, weights replaced by a few bytes."""
    _write(folder / "config.json", json.dumps(MODEL_CONFIG, indent=2) + "\n")
    for name, content in MODEL_SMALL_FILES.items():
        _write(folder / name, json.dumps(content, indent=2, ensure_ascii=False) + "\n")
    _write(folder / "merges.txt", "#version: 0.2\n")
    shards = ["model-%05d-of-%05d.safetensors" % (index, MODEL_SHARDS) for index in range(1, MODEL_SHARDS + 1)]
    weight_map = {"model.layers.%d.weight" % index: shards[index % MODEL_SHARDS] for index in range(8)}
    _write(folder / "model.safetensors.index.json",
           json.dumps({"metadata": {"total_size": 17534340096}, "weight_map": weight_map}, indent=2) + "\n")
    for shard in shards:
        _write(folder / shard, "twin placeholder weights\n")
