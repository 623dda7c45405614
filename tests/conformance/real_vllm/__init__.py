"""Real vLLM 0.18's API server with a fake engine core, installed and started by the conformance suite itself.

vLLM's `vllm serve` is the reference the stand-in (tests/twin/vllm_standin/) is held to. Everything a client
meets is vLLM's own code; only the engine core, which would run the model on an accelerator, is replaced by one
that streams a set answer with set timings (fake_engine.py). So it runs on any Linux machine with Python 3.10 to
3.13, without a GPU, model weights or a model hub.

- ``install()``: vLLM 0.18.0 from PyPI in a virtualenv of its own, REAL_VLLM_HOME/venv-0.18.0 (REAL_VLLM_HOME
  defaults to /var/tmp/real-vllm, so that clones share it). Once, about 4 minutes and 9 GB (vLLM brings a CUDA
  build of torch, unused here). ``install(version=V)`` puts another vLLM release in venv-V, to read its
  `vllm serve` option table (``record_options``); ``remove(V)`` deletes that virtualenv again.
- ``model_folder()``: a weightless Qwen3-VL-8B-Instruct-shaped model folder in REAL_VLLM_HOME
  (model_folder.py), made when first needed.
- ``start(port, args, fake, log)``: `vllm serve` on 127.0.0.1:port in that virtualenv (serve.py), with the flags
  in args and the fake engine's settings in fake (FAKE_TTFT_S, FAKE_TPOT_S, FAKE_FAULTS, FAKE_ENGINE_LOG, as
  fake_engine.py describes them); returns once /health answers. ``stop(server)`` ends it.

By hand: ``PYTHONPATH=tests python -m conformance.real_vllm install``,
``PYTHONPATH=tests python -m conformance.real_vllm serve --port 18000 -- --served-model-name M --api-key K``, or
``PYTHONPATH=tests python -m conformance.real_vllm options 0.18.0 0.20.2`` (each release's option table into
tests/fixtures/vllm-serve-options/<version>.json).

This module uses the standard library only: it runs in the project's Python, and vLLM runs in its own.
"""
import hashlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

# The release the conformance suite runs; the other releases are only read (record_options).
VERSION = "0.18.0"
HERE = pathlib.Path(__file__).resolve().parent
HOME = pathlib.Path(os.environ.get("REAL_VLLM_HOME", "/var/tmp/real-vllm"))
OPTIONS_FOLDER = HERE.parents[1] / "fixtures" / "vllm-serve-options"
# vLLM 0.18's start-up (imports, the model's processors, the API server) takes 20-30 s on a quiet machine.
READY_TIMEOUT_S = 300
STOP_TIMEOUT_S = 20
# What `vllm serve` needs to know here: no hub to ask, no usage report to send, a small CPU KV-cache budget
# (vLLM's CPU platform checks it against the machine's memory; the fake engine allocates nothing).
SERVER_ENVIRONMENT = {"VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                      "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}


def venv(version=VERSION):
    """The virtualenv of one vLLM release: one each, so that reading another release's options leaves the
    suite's own vLLM as it was."""
    return HOME / ("venv-%s" % version)


VENV = venv()


def python(version=VERSION):
    """The Python of real vLLM's virtualenv."""
    return venv(version) / "bin" / "python"


def installed_version(version=VERSION):
    """The vLLM version installed in the virtualenv of that release, or None."""
    if not python(version).exists():
        return None
    found = subprocess.run([str(python(version)), "-c",
                            "import importlib.metadata as m; print(m.version('vllm'))"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True)
    return found.stdout.strip() if found.returncode == 0 else None


def say(message):
    print("real vLLM: %s" % message, file=sys.stderr, flush=True)


def install(version=VERSION):
    """vLLM version from PyPI into its virtualenv, unless it is there already; for the suite's VERSION also the
    model folder, which it returns (the other releases only have their options read: no folder, None).

    Another release's wheels stay out of pip's cache: its virtualenv is removed once read, and a cached CUDA
    torch of each release would fill the disk as the virtualenvs would."""
    if installed_version(version) != version:
        folder = venv(version)
        if not python(version).exists():
            say("creating %s" % folder)
            folder.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
        say("installing vllm==%s into %s (about 4 minutes and 9 GB)" % (version, folder))
        command = [str(python(version)), "-m", "pip", "install", "-q", "vllm==%s" % version]
        if version != VERSION:
            command.insert(4, "--no-cache-dir")
        subprocess.run(command, check=True)
    return model_folder() if version == VERSION else None


def remove(version):
    """Deletes a release's virtualenv (some 9 GB), but never the suite's own."""
    if version == VERSION:
        raise ValueError("venv-%s is the conformance suite's; it stays" % VERSION)
    say("removing %s" % venv(version))
    shutil.rmtree(str(venv(version)))


def option_table(version=VERSION):
    """The option strings of that release's `vllm serve`, sorted, as its own parser has them (real_parser.py run
    in its virtualenv, with no argument lists to judge)."""
    with tempfile.TemporaryDirectory() as scratch:
        out = pathlib.Path(scratch) / "options.json"
        done = subprocess.run([str(python(version)), str(HERE.parent / "real_parser.py"), str(out)], input="[]",
                              env=server_environment({}), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True)
        if done.returncode != 0:
            # The virtualenv stays, for a look at what failed without installing again.
            raise RuntimeError("real_parser.py could not read vLLM %s's `vllm serve` parser (exit %d; %s stays "
                               "for a look, rm -r it when done); the end of its output:\n%s" % (
                                   version, done.returncode, venv(version),
                                   "\n".join(done.stdout.splitlines()[-30:])))
        return json.loads(out.read_text())["options"]


def options_file(version):
    return OPTIONS_FOLDER / ("%s.json" % version)


def record_options(version, keep=False):
    """Installs vLLM version (unless there), writes its option table to OPTIONS_FOLDER/<version>.json, and
    removes the virtualenv again if it installed it for this, the suite's own excepted (keep: leave it)."""
    was_there = installed_version(version) == version
    install(version)
    options = option_table(version)
    content = {"source": "vLLM %s from PyPI, the option strings of its own `vllm serve` parser "
                         "(tests/conformance/real_parser.py in a virtualenv of vLLM %s alone); recorded by "
                         "`PYTHONPATH=tests python -m conformance.real_vllm options %s`" % (version, version,
                                                                                             version),
               "vllm": version, "options": options}
    OPTIONS_FOLDER.mkdir(parents=True, exist_ok=True)
    options_file(version).write_text(json.dumps(content, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    if not (was_there or keep or version == VERSION):
        remove(version)
    return options


def model_folder():
    """The weightless model folder, made by model_folder.py in vLLM's virtualenv when first needed.

    Its name carries a digest of model_folder.py, so a change to that file makes a new folder rather than
    serving one made by an older version. It is built beside its final place and renamed into it, so a build
    cut short leaves no half folder behind."""
    maker = HERE / "model_folder.py"
    digest = hashlib.sha256(maker.read_bytes()).hexdigest()[:12]
    folder = HOME / ("qwen3-vl-8b-weightless-%s" % digest)
    if not folder.is_dir():
        if installed_version() != VERSION:
            raise RuntimeError("vLLM %s is not installed in %s. Fix: run `PYTHONPATH=tests python -m "
                               "conformance.real_vllm install` (or scripts/dev conformance)" % (VERSION, VENV))
        building = HOME / ("%s.building-%d" % (folder.name, os.getpid()))
        subprocess.run([str(python()), str(maker), str(building)], check=True, stdout=subprocess.DEVNULL)
        try:
            building.rename(folder)
        except OSError:
            # Another run made the same folder meanwhile: theirs is as good as this one.
            if not folder.is_dir():
                raise
            shutil.rmtree(str(building), ignore_errors=True)
    return folder


def server_environment(fake):
    """The environment of `vllm serve`: this one, less what would point vLLM's Python at other packages, plus
    SERVER_ENVIRONMENT and the fake engine's settings."""
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    environment.update(SERVER_ENVIRONMENT)
    environment.update({name: str(value) for name, value in fake.items()})
    return environment


def healthy(url):
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError):
        return False


def log_tail(path, lines=30):
    try:
        return "\n".join(pathlib.Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start(port, args, fake, log):
    """`vllm serve MODEL_FOLDER --host 127.0.0.1 --port PORT ARGS` with the fake engine core, its output in log;
    the running process (a session of its own, so ``stop`` ends whatever it started), once /health answers 200.
    fake: the fake engine's settings ({"FAKE_TTFT_S": 0.2, ...})."""
    folder = model_folder()
    command = [str(python()), str(HERE / "serve.py"), "serve", str(folder), "--host", "127.0.0.1",
               "--port", str(port)] + list(args)
    url = "http://127.0.0.1:%d" % port
    with open(log, "ab") as output:
        server = subprocess.Popen(command, env=server_environment(fake), stdin=subprocess.DEVNULL, stdout=output,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_ready(server, url, log)
    except BaseException:
        # Not ready in time, or the wait was interrupted: nothing else would end a server in its own session.
        stop(server)
        raise
    return server


def wait_until_ready(server, url, log):
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not healthy(url):
        if server.poll() is not None:
            raise RuntimeError("`vllm serve` at %s exited with %d before it was ready; the end of its log (%s):\n%s"
                               % (url, server.returncode, log, log_tail(log)))
        if time.monotonic() > deadline:
            raise RuntimeError("`vllm serve` at %s was not ready after %d s; the end of its log (%s):\n%s" % (
                url, READY_TIMEOUT_S, log, log_tail(log)))
        time.sleep(0.5)


def stop(server):
    """SIGTERM to the server's session (vLLM shuts down gracefully), SIGKILL if it is still there after
    STOP_TIMEOUT_S."""
    if server.poll() is not None:
        return
    for sent in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(server.pid, sent)
        except ProcessLookupError:
            return
        try:
            server.wait(timeout=STOP_TIMEOUT_S)
            return
        except subprocess.TimeoutExpired:
            continue
