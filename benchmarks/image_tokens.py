#!/usr/bin/env python3
"""How many prompt tokens the benchmark's requests are, per image size of the vllm_bench presets.

For each image size a preset of roles/vllm_bench/defaults/main.yml uses, the request vllm_benchmark sends (the
module's own body: the role's prompt and one generated PNG of that size) is counted by the project's model of
Qwen3-VL's processor, the stand-in's (tests/twin/vllm_standin: images resized to multiples of 32 px within the
pixel cap, one token per 32x32 px, two around the image, the chat template and the text). It is counted twice:
against the `vllm serve` flags the vllm_server role renders by default (its pixel cap) and with
vllm_server_max_pixels 0 (no cap: the model's own bounds). Beside each, the image tokens real vLLM 0.18 counted
for the same image size and pixel cap, where tests/fixtures/vllm-0.18/ recorded a request of the benchmark's
(`scripts/dev conformance --record`), and whether the two agree. The recording keeps image tokens only (prompt
tokens less the server's text-only baseline): its server's tokenizer is not Qwen's, so the text part of the
prompt tokens is the model's alone.

Usage: .venv/bin/python benchmarks/image_tokens.py
"""
import argparse
import json
import pathlib
import sys

import yaml

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "collections"), str(REPO / "tests")]
from conformance import cases, golden, rendered  # noqa: E402

from ansible_collections.ascend.fleet.plugins.module_utils import load_test  # noqa: E402
from twin.vllm_standin import cli as standin_cli  # noqa: E402
from twin.vllm_standin.images import image_tokens  # noqa: E402
from twin.vllm_standin.server import image_dimensions, pixel_cap, prompt_stats  # noqa: E402

BENCH_DEFAULTS = REPO / "roles" / "vllm_bench" / "defaults" / "main.yml"
# The vllm_server settings each count is made against: the role's defaults, and its pixel cap turned off.
SERVERS = (("role defaults", {}), ("vllm_server_max_pixels: 0", {"max_pixels": 0}))
COLUMNS = ("image", "presets", "server", "pixel cap", "image tokens", "prompt tokens",
           "real vLLM: image tokens (recording)", "agree")


def cap_of(argv):
    """The pixel cap a `vllm serve` argument list (["serve", model, flags...]) resizes images within, or None, as
    vLLM 0.18 takes it (a max_pixels without min_pixels is ignored)."""
    return pixel_cap(standin_cli.build_parser().parse_args(argv).mm_processor_kwargs)


def preset_sizes(bench):
    """{image size: [the presets using it]}, in the order the presets list them."""
    found = {}
    for name, preset in bench["vllm_bench_presets"].items():
        for size in preset["image_sizes"]:
            found.setdefault(size, []).append(name)
    return found


def request_bodies(bench):
    """{image size: the body vllm_benchmark sends for it}, with the role's request settings and each preset's
    groups (the first group of each size: a group's max_tokens and concurrency do not change the prompt)."""
    model = rendered.role_defaults()["served_name"]
    bodies = {}
    for preset in bench["vllm_bench_presets"].values():
        params = {name: spec.get("default") for name, spec in load_test.ARGUMENT_SPEC.items()}
        params.update(preset, prompt=bench["vllm_bench_prompt"], ignore_eos=bench["vllm_bench_ignore_eos"],
                      unique_images=bench["vllm_bench_unique_images"])
        tester = load_test.LoadTest(params, None, model)
        for group in load_test.plan(params):
            if group["image_size"] not in bodies:
                (body,) = tester.bodies(dict(group, requests=1))
                bodies[group["image_size"]] = json.loads(body)
    return bodies


def recordings():
    """[(case, "WIDTHxHEIGHT", pixel cap, image tokens)] of every request whose image tokens real vLLM's
    recording keeps, the cap from the arguments its server was recorded with."""
    found = []
    for case in cases.cases():
        path = golden.case_file(case.name)
        if not case.image or not path.exists():
            continue
        recorded = json.loads(path.read_text(encoding="utf-8"))
        if "image_tokens" in recorded["transcript"]:
            cap = cap_of(["serve", golden.MODEL_DIR] + recorded["server_args"])
            found.append((case.name, "%dx%d" % case.image, cap, recorded["transcript"]["image_tokens"]))
    return found


def image_of(body):
    """(width, height) of the body's image, read from its PNG as a server reads it."""
    (part,) = [part for part in body["messages"][0]["content"] if part["type"] == "image_url"]
    return image_dimensions(part["image_url"]["url"])


def rows(bench):
    sizes, bodies, recorded = preset_sizes(bench), request_bodies(bench), recordings()
    found = []
    for what, settings in SERVERS:
        cap = cap_of(rendered.serve_args(**settings))
        for size, presets in sizes.items():
            body = bodies[size]
            tokens = image_tokens(*image_of(body), max_pixels=cap)
            matching = [(name, count) for name, recorded_size, recorded_cap, count in recorded
                        if (recorded_size, recorded_cap) == (size, cap)]
            found.append({"image": size, "presets": ", ".join(presets), "server": what,
                          "pixel cap": "none" if cap is None else str(cap), "image tokens": str(tokens),
                          "prompt tokens": str(prompt_stats(body, cap)[0]),
                          "real vLLM: image tokens (recording)":
                              ", ".join("%d (%s)" % (count, name) for name, count in matching) or "-",
                          "agree": ("yes" if all(count == tokens for _, count in matching) else "no")
                          if matching else "-"})
    return found


def main():
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    bench = yaml.safe_load(BENCH_DEFAULTS.read_text(encoding="utf-8"))
    print("The benchmark's request (prompt %r, one generated PNG) counted by the stand-in's model of Qwen3-VL's "
          "processor;" % bench["vllm_bench_prompt"])
    print("real vLLM's image tokens recorded in %s.\n" % golden.FOLDER.relative_to(REPO))
    print("| %s |" % " | ".join(COLUMNS))
    print("|" + "---|" * len(COLUMNS))
    for row in rows(bench):
        print("| %s |" % " | ".join(row[column] for column in COLUMNS))


if __name__ == "__main__":
    main()
