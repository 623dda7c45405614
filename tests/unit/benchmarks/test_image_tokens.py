"""benchmarks/image_tokens.py: the prompt tokens of the benchmark's requests by the stand-in's model of Qwen3-VL's
processor, held to what real vLLM 0.18 counted where tests/fixtures/vllm-0.18/ recorded the same image size under
the same pixel cap."""
import json
import re
import subprocess
import sys

import pytest
import yaml
from conformance import cases, golden

from conftest import REPO
from twin.vllm_standin.server import pixel_cap

RECORDED = "real vLLM: image tokens (recording)"
# One recording as the table cites it: "1224 (bench_1920x1080_capped)".
CITATION = re.compile(r"(\d+) \((\w+)\)")


def role_default(role, name):
    return yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text(encoding="utf-8"))[name]


def preset_sizes():
    return {size for preset in role_default("vllm_bench", "vllm_bench_presets").values()
            for size in preset["image_sizes"]}


def cells(line):
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


@pytest.fixture(scope="module")
def table():
    """The rows the script prints, as {column: cell}."""
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "image_tokens.py")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True, timeout=300, cwd=str(REPO))
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("|")]
    header = cells(lines[0])
    return [dict(zip(header, cells(line))) for line in lines[2:]]


def citations(row):
    """(figure printed, case) of each recording a row cites."""
    return [(int(figure), case) for figure, case in CITATION.findall(row[RECORDED])]


def recorded_cap(case):
    """The pixel cap real vLLM's server took from the arguments the case was recorded with, or None."""
    args = json.loads(golden.case_file(case).read_text(encoding="utf-8"))["server_args"]
    kwargs = json.loads(args[args.index("--mm-processor-kwargs") + 1]) if "--mm-processor-kwargs" in args else None
    return pixel_cap(kwargs)


def test_every_preset_image_size_is_counted_with_the_roles_pixel_cap_and_without_one(table):
    caps = (str(role_default("vllm_server", "vllm_server_max_pixels")), "none")
    assert sorted((row["image"], row["pixel cap"]) for row in table) == sorted(
        (size, cap) for size in preset_sizes() for cap in caps)


def test_the_counts_agree_with_real_vllms_where_it_was_recorded(table):
    disagreements = [(row["image"], row["pixel cap"], case, "counted %s, printed %d, recorded %d" % (
        row["image tokens"], printed, golden.transcript(case)["image_tokens"]))
        for row in table for printed, case in citations(row)
        if not int(row["image tokens"]) == printed == golden.transcript(case)["image_tokens"]]
    assert disagreements == []
    assert {row["agree"] for row in table if citations(row)} == {"yes"}
    assert {row["agree"] for row in table if not citations(row)} <= {"-"}


def test_each_recording_is_cited_at_the_pixel_cap_it_was_recorded_with(table):
    wrong = [(row["image"], row["pixel cap"], case, recorded_cap(case)) for row in table for _, case in citations(row)
             if row["pixel cap"] != ("none" if recorded_cap(case) is None else str(recorded_cap(case)))]
    assert wrong == []


def test_every_recording_of_a_preset_image_size_is_cited(table):
    """So that no recording is left out of the cross-check (the README's 1920x1080 figure rests on one)."""
    sizes = preset_sizes()
    recorded = {case.name for case in cases.cases() if case.image and "%dx%d" % case.image in sizes
                and golden.case_file(case.name).exists() and "image_tokens" in golden.transcript(case.name)}
    assert recorded and {case for row in table for _, case in citations(row)} == recorded


def test_the_text_adds_the_same_tokens_to_every_prompt(table):
    """One prompt for every request: the whole prompt is the image's tokens and the same text part."""
    text = {int(row["prompt tokens"]) - int(row["image tokens"]) for row in table}
    assert len(text) == 1 and text.pop() > 0
