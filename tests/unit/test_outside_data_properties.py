"""Properties of every parser of data from outside the collection (npu-smi's outputs, a server's stream and
answers, results and progress lines, plan files, a hub's file names) and of the report made of such data, for any
input Hypothesis makes, besides the table cases of each parser's own tests: a parser answers with what it found or
with its own refusal, never with another exception, and what it lets through is in the shape its callers rely on;
the report shows text from hosts and servers as text."""
import json
import os
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from report_rows import group, write

from ansible_collections.ascend.fleet.plugins.module_utils import (
    bench_record,
    model_fetch,
    npu_smi,
    openai_client,
    serving_plan,
)
from ansible_collections.ascend.fleet.plugins.plugin_utils import report

# Shared machines: no deadline per example, a bounded number of examples per property; no example database (each
# run draws afresh).
PROPERTY = settings(max_examples=150, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
# Text shaped like npu-smi's: its separators, digits, words and white space, so tables half-form.
NPU_SMI_TEXT = st.text(alphabet=string.digits + string.ascii_letters + " |+-=:.,\t\n/%()", max_size=2000)
JSON_LEAVES = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
JSON_VALUES = st.recursive(JSON_LEAVES, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text(max_size=12), inner, max_size=4), max_leaves=20)


@PROPERTY
@given(text=NPU_SMI_TEXT | st.text(max_size=500))
@pytest.mark.parametrize("parser", ["parse_table", "parse_mapping", "parse_phyid_remap", "parse_topo", "parse_list",
                                    "parse_board", "parse_product", "parse_version_file", "parse_cpu_model"])
def test_npu_smi_parsers_answer_any_text_without_an_exception(parser, text):
    getattr(npu_smi, parser)(text)


@PROPERTY
@given(text=st.text(alphabet=string.digits + ",- ", max_size=60))
def test_a_cpu_list_expands_to_cpus_it_names_and_never_without_bound(text):
    cpus = npu_smi.expand_cpu_list(text)
    assert cpus is None or (isinstance(cpus, list) and all(isinstance(cpu, int) and cpu >= 0 for cpu in cpus))


def event_lines(events):
    return [b"data: " + (event if isinstance(event, bytes) else json.dumps(event).encode()) for event in events]


@PROPERTY
@given(events=st.lists(JSON_VALUES | st.binary(max_size=40) | st.just(b"[DONE]"), max_size=8))
def test_a_stream_of_any_events_is_read_to_a_verdict(events):
    result = openai_client.StreamResult()
    openai_client.read_events(event_lines(events), result)
    if result.error is None:
        assert isinstance(result.prompt_tokens, int) and isinstance(result.completion_tokens, int)
        assert result.prompt_tokens >= 0 and result.completion_tokens >= 0
    else:
        assert isinstance(result.error, str) and result.error


@PROPERTY
@given(lines=st.lists(st.binary(max_size=200) | JSON_VALUES.map(lambda value: json.dumps(value).encode()),
                      max_size=10))
def test_a_results_file_of_any_lines_reads_to_records_and_a_count_of_the_rest(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("results") / "vllm-ascend.jsonl"
    path.write_bytes(b"\n".join(lines))
    records, skipped = bench_record.read_results(str(path))
    assert isinstance(records, list) and isinstance(skipped, int) and skipped >= 0
    assert all(isinstance(record, dict) for record in records)


@PROPERTY
@given(content=st.binary(max_size=300) | JSON_VALUES.map(lambda value: json.dumps(value).encode()))
def test_a_plan_file_of_any_bytes_is_a_plan_or_a_refusal(tmp_path_factory, content):
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    path.write_bytes(content)
    try:
        plan = serving_plan.read(str(path), "npu-a")
    except serving_plan.PlanError as refusal:
        assert "npu-a" in str(refusal)
    else:
        assert isinstance(plan, dict)


@PROPERTY
@given(name=st.text(max_size=60))
def test_a_hub_file_name_it_accepts_stays_inside_the_model_folder(name):
    if model_fetch.path_problem(name) is None:
        folder = "/data/models/m"
        assert os.path.normpath(os.path.join(folder, name)).startswith(folder + os.sep)
        assert not name.startswith((model_fetch.PARTS, model_fetch.RECORD))


@PROPERTY
@given(text=st.text(max_size=200) | JSON_VALUES.map(json.dumps)
       | st.floats().map(lambda number: '{"updated_at": %s}' % json.dumps(number)))
def test_a_progress_file_of_any_text_is_a_progress_whose_age_can_be_told_or_a_refusal(text):
    try:
        progress = bench_record.read_progress(text)
    except ValueError:
        return
    # A run whose progress has no finite time would never be called stalled: the follow step would wait forever.
    assert bench_record.run_ended(progress, 600, now=progress["updated_at"] + 10 ** 6) or progress.get("finished")


# A /v1/models answer as a server may give it: vLLM's shape with any values in it, or anything at all.
MODELS_ANSWERS = st.fixed_dictionaries({"data": st.lists(st.dictionaries(
    st.sampled_from(["id", "object", "owned_by"]), JSON_VALUES, max_size=3), max_size=3) | JSON_VALUES}) | JSON_VALUES


@PROPERTY
@given(answer=MODELS_ANSWERS)
def test_a_models_answer_of_any_json_is_a_list_of_the_names_it_holds(answer):
    served = openai_client.served_models(answer)
    assert isinstance(served, list) and all(isinstance(name, str) for name in served)


@PROPERTY
@given(reply=JSON_VALUES)
def test_a_chat_reply_of_any_json_is_its_text_or_none(reply):
    text = openai_client.answer_text(reply)
    assert text is None or isinstance(text, str)


# Text as hosts' names, servers' error kinds and answers may hold it: markup characters among others.
HOSTILE_TEXT = st.text(alphabet=string.ascii_letters + string.digits + "<>&\"'|*_`#-. /\\", min_size=1, max_size=30)


@settings(max_examples=12, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(host=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9<>&'\"|*_.-]{0,20}", fullmatch=True), error=HOSTILE_TEXT,
       answer=HOSTILE_TEXT)
def test_a_report_shows_any_host_error_kind_and_answer_as_text(tmp_path_factory, host, error, answer):
    """The HTML report names the host, the errors by kind and the answer check's failure: each a tag here, which
    the page must show as text and never open."""
    folder = tmp_path_factory.mktemp("report")
    measured = dict(group("640x480", 32, 1, 2.0, 100), failed=1, errors={"<x-error>" + error: 1})
    check = {"answer_check": "before", "mode": "known", "passed": False, "asked": [], "checked_at": 1796000000.0,
             "failure": "<x-answer>" + answer}
    write(folder, "<x-host>" + host, "vllm-ascend", [check, measured])
    report.build(folder, latency_target=10)
    page = (folder / "report.html").read_text(encoding="utf-8")
    for tag in ("<x-host>", "<x-error>", "<x-answer>"):
        assert tag not in page
    assert "&lt;x-host&gt;" in page
