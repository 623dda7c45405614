"""Real vLLM 0.18's recorded answers (tests/fixtures/vllm-0.18/), read by both suites, written by the
conformance suite when asked to record.

One file per case, ``<case>.json``: where it came from, what the case is, and the transcript. And
``serve-args.json``: real vLLM's `vllm serve` option table and its verdict on every argument list the role
renders and on some it must refuse.
"""
import json
import pathlib

from twin.vllm_standin import cli as standin_cli

from . import cases

FOLDER = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.18"
SOURCE = ("vLLM 0.18.0 from PyPI (transformers 4.57), `vllm serve` with its engine core replaced by a fake one "
          "(first token 0.2 s after arrival, then one every 0.05 s); recorded by scripts/dev conformance --record")
MODEL_DIR = "/data/models/Qwen3-VL-8B-Instruct"
# Argument lists the role never renders, each with what real vLLM's parser makes of it.
OTHER_LISTS = {
    "a dtype 310P and vLLM do not know": ["serve", MODEL_DIR, "--dtype", "bfloat17"],
    "an unknown flag": ["serve", MODEL_DIR, "--no-such-flag"],
    "a flag vLLM 0.18 no longer has": ["serve", MODEL_DIR, "--disable-log-requests"],
    "a length that is no number": ["serve", MODEL_DIR, "--max-model-len", "eight"],
    "a length in thousands": ["serve", MODEL_DIR, "--max-model-len", "8k"],
    "the short form of the parallel size": ["serve", MODEL_DIR, "-tp", "2"],
    "processor arguments that are no JSON": ["serve", MODEL_DIR, "--mm-processor-kwargs", "{max_pixels: 1}"],
    "a parallel size that is no number": ["serve", MODEL_DIR, "--tensor-parallel-size", "two"],
}


def case_file(name):
    return FOLDER / ("%s.json" % name)


def write_transcripts(found):
    FOLDER.mkdir(parents=True, exist_ok=True)
    by_name = {case.name: case for case in cases.cases()}
    for name, record in found.items():
        case = by_name[name]
        content = {"source": SOURCE, "server": case.server, "server_args": cases.SERVERS[case.server]["args"],
                   "request": "%s %s%s" % (case.method, case.path, (" (%s)" % case.about) if case.about else ""),
                   "transcript": record}
        case_file(name).write_text(json.dumps(content, indent=1, ensure_ascii=False, sort_keys=True) + "\n",
                                   encoding="utf-8")


def transcript(name):
    path = case_file(name)
    if not path.exists():
        raise AssertionError("%s is missing: record it with scripts/dev conformance --record" % path)
    return json.loads(path.read_text(encoding="utf-8"))["transcript"]


def argument_lists(renderings):
    """Each distinct argument list: the role's renderings first, then the others."""
    found, seen = [], set()
    for what, argv in renderings.items():
        if tuple(argv) not in seen:
            seen.add(tuple(argv))
            found.append({"what": what, "argv": argv, "rendered": True})
    for what, argv in OTHER_LISTS.items():
        found.append({"what": what, "argv": argv, "rendered": False})
    return found


def write_serve_args(found):
    FOLDER.mkdir(parents=True, exist_ok=True)
    content = dict(found, source=SOURCE)
    (FOLDER / "serve-args.json").write_text(json.dumps(content, indent=1, ensure_ascii=False) + "\n",
                                            encoding="utf-8")


def serve_args():
    """The recorded option table and verdicts, without their source line."""
    content = json.loads((FOLDER / "serve-args.json").read_text(encoding="utf-8"))
    content.pop("source")
    return content


def standin_accepts(argv):
    try:
        standin_cli.build_parser().parse_args(argv)
    except SystemExit:
        return False
    return True


def parser_disagreements(lists):
    """The lists the stand-in's parser judges otherwise than real vLLM did, each with real vLLM's verdict."""
    return ["%s: real vLLM %s, the stand-in %s" % (
        entry["what"], "accepts" if entry["accepted"] else "refuses (%s)" % entry["error"],
        "accepts" if not entry["accepted"] else "refuses") for entry in lists
        if standin_accepts(entry["argv"]) != entry["accepted"]]
