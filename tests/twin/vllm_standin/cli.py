"""``vllm`` command of the stand-in image: parses real ``vllm serve`` arguments, refuses what 310P refuses.

The checks run in the order the real image meets them: argument parsing, the driver libraries that torch_npu
loads at import, the devices, the model folder, then the engine arguments that vLLM-Ascend rejects on 310P.
Each refusal prints vLLM-like error lines and exits 1. Then it opens its chips (``npu.open_chips``, refused
when another process holds one), binds its CPUs (``npu.bind_cpus``) and learns their memory (``npu.chip_memory``)
before loading the model, which is refused in the same way when it does not fit that memory (server.py).

It also reports at start whether jemalloc is preloaded. The real image installs libjemalloc2 and preloads it
only from ``~/.bashrc`` (vllm-ascend Dockerfile.310p, v0.18.0rc1), which a ``docker run IMAGE vllm serve``
never reads: without ``-e LD_PRELOAD=...`` the server runs, with the slower glibc allocator.
Knobs that exist only in the twin are environment variables starting with ``VLLM_TWIN_``.
"""
import argparse
import json
import os
import subprocess
import sys

from . import release, release_name

BANNER = ("ascend-vllm-fleet twin: stand-in for vLLM-Ascend %s on Atlas 300I Duo. This is a simulator, "
          "not vLLM: no NPU is used and answers are synthetic.")
# What 310P3 can run (vLLM-Ascend 310P docs): eager fp16 only; graph mode needs CANN >= 9.0.
SUPPORTED_DTYPES = ("float16", "half")
DRIVER_LIBRARY = "libascend_hal.so"
# Where the image's libjemalloc2 package puts the library (Debian/Ubuntu multiarch path).
JEMALLOC = "/usr/lib/%s-linux-gnu/libjemalloc.so.2" % os.uname().machine


class Refusal(Exception):
    """An error the real image would end with; ``str`` is its last log line, ``lines`` the ones before it."""

    def __init__(self, message, lines=()):
        super().__init__(message)
        self.lines = list(lines)


def twin_root():
    return os.environ.get("VLLM_TWIN_ROOT", "/")


def host_path(path):
    return os.path.join(twin_root(), path.lstrip("/"))


def build_parser():
    """A subset of the `vllm serve` options of the vLLM versions the release table names, each spelt as their
    parsers spell it (held to vLLM 0.18's recorded verdicts in tests/fixtures/vllm-0.18/serve-args.json and to each
    version's recorded options); refuse_options_of_other_versions refuses those the image's version lacks."""
    parser = argparse.ArgumentParser(prog="vllm", description="vLLM CLI (twin stand-in)")
    parser.add_argument("-v", "--version", action="version", version=release()["vllm"])
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", prog="vllm serve", help="Start the vLLM OpenAI-compatible API server")
    serve.add_argument("model_tag", nargs="?", help="model path or name")
    serve.add_argument("--model")
    serve.add_argument("--host", default="0.0.0.0")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--served-model-name", nargs="+")
    serve.add_argument("--api-key", default=os.environ.get("VLLM_API_KEY"))
    serve.add_argument("--dtype", default="auto",
                       choices=["auto", "half", "float16", "bfloat16", "float", "float32"])
    serve.add_argument("--max-model-len", type=_human_int)
    serve.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    serve.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    serve.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    serve.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    serve.add_argument("--enforce-eager", action="store_true")
    serve.add_argument("--max-num-seqs", type=int, default=256)
    serve.add_argument("--max-num-batched-tokens", type=_human_int, default=2048)
    serve.add_argument("--mm-processor-kwargs", type=json.loads)
    serve.add_argument("--limit-mm-per-prompt", type=json.loads)
    serve.add_argument("--trust-remote-code", action="store_true")
    serve.add_argument("--seed", type=int)
    serve.add_argument("--block-size", type=int)
    serve.add_argument("--kv-cache-dtype", default="auto")
    serve.add_argument("--quantization", "-q")
    serve.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
    serve.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction)
    serve.add_argument("--chat-template")
    serve.add_argument("--generation-config", default="auto")
    serve.add_argument("--allowed-local-media-path")
    serve.add_argument("--additional-config", type=json.loads)
    serve.add_argument("--compilation-config", "-cc", type=json.loads)
    serve.add_argument("--uvicorn-log-level", default="info")
    serve.add_argument("--enable-log-requests", action=argparse.BooleanOptionalAction)
    serve.add_argument("--disable-log-stats", action="store_true")
    serve.add_argument("--max-log-len", type=int)
    # vLLM 0.18 has it; 0.19 and later do not (an operator's extra argument that breaks at an upgrade).
    serve.add_argument("--disable-frontend-multiprocessing", action="store_true")
    parser.serve_options = {option for action in serve._actions for option in action.option_strings}
    return parser


# `vllm serve`'s options as each vLLM version's own parser has them (tests/fixtures/vllm-serve-options/, recorded
# from real vLLM; the image has them under /opt/twin).
OPTIONS_DIR = os.environ.get("VLLM_TWIN_OPTIONS_DIR", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "fixtures", "vllm-serve-options"))


def refuse_options_of_other_versions(parser, argv):
    """A flag the stand-in parses but the image's vLLM does not have fails as that vLLM's parser fails on it."""
    with open(os.path.join(OPTIONS_DIR, "%s.json" % release()["vllm"])) as handle:
        recorded = set(json.load(handle)["options"])
    given = [arg.split("=", 1)[0] for arg in argv if arg.startswith("-")]
    missing = [flag for flag in given if flag in parser.serve_options and flag not in recorded]
    if missing:
        parser.error("unrecognized arguments: %s" % " ".join(missing))


def _human_int(text):
    """vLLM accepts 8192, 8k and 8K for lengths."""
    scale = {"k": 1000, "K": 1024, "m": 1000000, "M": 1048576}
    if text and text[-1] in scale:
        return int(float(text[:-1]) * scale[text[-1]])
    return int(text)


def check_driver():
    lib64 = host_path("/usr/local/Ascend/driver/lib64")
    if not os.path.isdir(lib64):
        raise Refusal("ImportError: %s: cannot open shared object file: No such file or directory "
                      "(mount the host's /usr/local/Ascend/driver/lib64 into the container)" % DRIVER_LIBRARY)
    for path in ("/usr/local/Ascend/driver/version.info", "/usr/local/dcmi", "/usr/local/bin/npu-smi"):
        if not os.path.exists(host_path(path)):
            raise Refusal("RuntimeError: Ascend driver file %s not found in the container "
                          "(mount it from the host as the vLLM-Ascend docs show)" % path)
    for device in ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"):
        if not os.path.exists(host_path(device)):
            raise Refusal("RuntimeError: device %s not found: pass --device %s to docker run" % (device, device))


def check_npu_smi():
    """The driver refuses to initialise for the same reasons npu-smi fails (device busy, reboot needed)."""
    result = subprocess.run([host_path("/usr/local/bin/npu-smi"), "info"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, universal_newlines=True)
    if result.returncode != 0:
        last = (result.stdout.strip().splitlines() or ["npu-smi exited %d" % result.returncode])[-1]
        raise Refusal("RuntimeError: NPU initialisation failed: %s" % last)


def load_model_config(path):
    if not os.path.isdir(path):
        raise Refusal("ValueError: Invalid repository ID or local directory specified: '%s'. "
                      "Please verify the model path is correct." % path)
    config_file = os.path.join(path, "config.json")
    if not os.path.isfile(config_file):
        raise Refusal("ValueError: No supported config format found in %s (config.json is missing)" % path)
    try:
        with open(config_file) as handle:
            config = json.load(handle)
    except ValueError as error:
        raise Refusal("ValueError: %s is not valid JSON: %s" % (config_file, error)) from error
    index_file = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(index_file):
        with open(index_file) as handle:
            shards = sorted(set(json.load(handle).get("weight_map", {}).values()))
        for shard in shards:
            if not os.path.isfile(os.path.join(path, shard)):
                raise Refusal("FileNotFoundError: No such file or directory: '%s'" % os.path.join(path, shard))
            problem = safetensors_problem(os.path.join(path, shard))
            if problem:
                raise Refusal("safetensors_rust.SafetensorError: Error while deserializing header: %s" % problem)
    return config


def safetensors_problem(path):
    """What the safetensors loader says of a shard it cannot read (its error kinds), or None: a header longer than
    the file, or tensors that end past it (a copy cut short)."""
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        start = handle.read(8)
        length = int.from_bytes(start, "little") if len(start) == 8 else size
        if length > size - 8:
            return "HeaderTooLarge"
        try:
            header = json.loads(handle.read(length))
            end = max([entry["data_offsets"][1] for name, entry in header.items() if name != "__metadata__"] or [0])
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return "InvalidHeaderDeserialization"
    return "MetadataIncompleteBuffer" if 8 + length + end > size else None


def model_dtype(config):
    dtype = config.get("torch_dtype") or config.get("text_config", {}).get("torch_dtype") or "bfloat16"
    return dtype


def check_engine_args(args, config):
    dtype = args.dtype
    if dtype == "auto":
        dtype = model_dtype(config)
    if dtype not in SUPPORTED_DTYPES:
        raise Refusal("ValueError: Ascend 310P does not support dtype %s (the model's config says %s); "
                      "only float16 is supported: pass --dtype float16"
                      % (dtype, model_dtype(config)))
    if args.max_model_len is None:
        raise Refusal("ValueError: --max-model-len must be set on Ascend 310P: the attention mask is built as a "
                      "max_model_len x max_model_len float16 tensor and the model's default length does not fit "
                      "in NPU memory (the documented setting is --max-model-len 8192)")
    if not 0 < args.gpu_memory_utilization <= 1:
        raise Refusal("ValueError: GPU memory utilization must be within (0, 1]. Got %s."
                      % args.gpu_memory_utilization)
    from .npu import visible_devices  # here, not at the top: npu imports Refusal and host_path from this module
    devices = visible_devices()
    needed = chips_needed(args)
    if needed > len(devices):
        raise Refusal("RuntimeError: tensor_parallel_size=%d x pipeline_parallel_size=%d needs %d NPUs but only "
                      "%d are visible in the container (%s)" % (
                          args.tensor_parallel_size, args.pipeline_parallel_size, needed, len(devices),
                          ", ".join(os.path.basename(d) for d in devices) or "no /dev/davinciN mapped"))


def chips_needed(args):
    return args.tensor_parallel_size * args.pipeline_parallel_size * args.data_parallel_size


def jemalloc_preloaded():
    return JEMALLOC in os.environ.get("LD_PRELOAD", "").replace(" ", ":").split(":") and os.path.isfile(
        host_path(JEMALLOC))


def report_jemalloc():
    if jemalloc_preloaded():
        print("INFO jemalloc preloaded: %s" % JEMALLOC, flush=True)
    else:
        print("WARNING jemalloc is not preloaded (LD_PRELOAD does not name an existing %s): host-side memory "
              "allocation uses glibc malloc and is slower; the image sets LD_PRELOAD only in ~/.bashrc, which "
              "`docker run IMAGE vllm serve` does not read" % JEMALLOC, flush=True)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    refuse_options_of_other_versions(parser, argv)
    model_path = args.model or args.model_tag
    if not model_path:
        build_parser().error("the following arguments are required: model_tag")
    print(BANNER % release_name(), flush=True)
    print("INFO vllm serve %s with %s" % (model_path, json.dumps(
        {k: v for k, v in vars(args).items() if k != "api_key"}, sort_keys=True)), flush=True)
    report_jemalloc()
    from . import npu
    try:
        check_driver()
        check_npu_smi()
        config = load_model_config(model_path)
        check_engine_args(args, config)
        opened = npu.open_chips(chips_needed(args))
    except Refusal as refusal:
        for line in refusal.lines + [str(refusal)]:
            print("ERROR %s" % line, file=sys.stderr, flush=True)
        return 1
    npu.bind_cpus(opened, args.port, args.additional_config)
    from . import server
    return server.serve(args, model_path, config, npu.chip_memory(opened))
