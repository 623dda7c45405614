"""The stand-in's model as the answer checks meet it: it reads the pictures the checks draw and answers right
when healthy, and answers `!` repeated, degenerate repetition or fluent wrong answers when told to; vllm_probe
and vllm_benchmark judge what it says. Everything runs in this process (the stand-in) and in a subprocess (the
module), without Docker."""
import json
import threading
import time

import pytest
import requests
from fake_vllm import MODEL, Scripted, scripted  # noqa: F401  (the fixture)
from module_runs import run_module
from standin_host import root, serve_args  # noqa: F401  (the fixture)

from ansible_collections.ascend.fleet.plugins.module_utils import answer_check, openai_client
from twin.vllm_standin import cli, server, vision


@pytest.fixture
def standin(root, tmp_path, monkeypatch):  # noqa: F811
    """(base URL, answers file) of a stand-in serving in this process; write a mode to the file to change how
    its model answers."""
    answers = tmp_path / "answers"
    monkeypatch.setenv("VLLM_TWIN_ANSWERS_FILE", str(answers))
    args = serve_args()
    running = server.start_server(args, cli.host_path("/data/models/" + MODEL), {})
    try:
        yield "http://127.0.0.1:%d" % args.port, answers
    finally:
        running.shutdown()


def ask(base_url, question):
    body = openai_client.ImageChat(MODEL, question.prompt, answer_check.ANSWER_MAX_TOKENS, temperature=0).body(
        openai_client.image_data_url(question.png()))
    answer = requests.post(base_url + "/v1/chat/completions", data=body, timeout=30).json()
    return answer["choices"][0]["message"]["content"], answer


def test_the_healthy_model_reads_each_picture_and_answers_in_the_questions_language(standin):
    base_url, _answers = standin
    said = {question.name: ask(base_url, question)[0] for question in answer_check.QUESTIONS}
    assert said == {"count-en": "There are 3 squares.", "colour-zh": "方块是红色的。", "count-zh": "图中有5个方块。"}


def test_a_known_answer_ends_by_itself_and_counts_its_tokens(standin):
    base_url, _answers = standin
    text, answer = ask(base_url, answer_check.QUESTIONS[0])
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["usage"]["completion_tokens"] == len(text)


@pytest.mark.parametrize("mode,expected", [
    ("bang", "!" * answer_check.ANSWER_MAX_TOKENS),
    ("repeat", ("你好，，，我，我，，" * 4)[:answer_check.ANSWER_MAX_TOKENS]),
    ("wrong", "There are 5 squares."),
])
def test_a_bad_model_answers_as_told_from_the_next_request_on(standin, mode, expected):
    base_url, answers = standin
    answers.write_text(mode + "\n")
    assert ask(base_url, answer_check.QUESTIONS[0])[0] == expected
    answers.write_text("healthy")
    assert ask(base_url, answer_check.QUESTIONS[0])[0] == "There are 3 squares."


def test_a_description_stays_fluent_when_the_model_is_wrong(standin):
    base_url, answers = standin
    answers.write_text("wrong")
    body = openai_client.ImageChat(MODEL, "请描述一下图片", 64).body(
        openai_client.image_data_url(answer_check.QUESTIONS[0].png()))
    text = requests.post(base_url + "/v1/chat/completions", data=body, timeout=30).json()[
        "choices"][0]["message"]["content"]
    assert text.startswith("这张图片展示了") and answer_check.degenerate(text) is None


def test_pictures_the_stand_in_reads_are_decoded_whatever_the_png_filter():
    """A PNG written with Sub, Up, Average and Paeth filters, as other encoders write them, reads the same."""
    width, height, rows = vision.decode_png(answer_check.QUESTIONS[2].png())
    assert (width, height) == (448, 448)
    for kind in (1, 2, 3, 4):
        filtered = png_filtered(width, height, rows, kind)
        assert vision.decode_png(filtered)[2] == rows, kind
    assert len(vision.shapes(width, height, rows)) == 5


def png_filtered(width, height, rows, kind):
    """PNG bytes of RGB rows, every row with PNG filter `kind`."""
    import struct
    import zlib

    def predictor(left, up, corner):
        if kind == 1:
            return left
        if kind == 2:
            return up
        if kind == 3:
            return (left + up) // 2
        guess = left + up - corner
        return min((abs(guess - left), 0, left), (abs(guess - up), 1, up), (abs(guess - corner), 2, corner))[2]

    data, previous = b"", bytes(width * 3)
    for row in rows:
        out = bytearray([kind])
        for i, value in enumerate(row):
            left = row[i - 3] if i >= 3 else 0
            corner = previous[i - 3] if i >= 3 else 0
            out.append((value - predictor(left, previous[i], corner)) & 0xFF)
        data += bytes(out)
        previous = row

    def chunk(name, body):
        return struct.pack(">I", len(body)) + name + body + struct.pack(">I", zlib.crc32(name + body) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(data)) + chunk(b"IEND", b""))


def probe(base_url, answer_check_mode):
    return run_module("vllm_probe", base_url=base_url, model=MODEL, timeout=10, image_size="64x64",
                      answer_check=answer_check_mode)


def test_the_probe_passes_a_healthy_model_with_every_check(standin):
    base_url, _answers = standin
    for mode in ("known", "sane", "none"):
        result = probe(base_url, mode)
        assert not result.get("failed"), result["msg"]
        assert result["answer_check"]["passed"] and result["answer_check"]["mode"] == mode
    assert [entry["verdict"] for entry in probe(base_url, "known")["answer_check"]["asked"]] == ["right", "right"]


@pytest.mark.parametrize("mode", ["bang", "repeat"])
def test_the_probe_fails_a_degenerate_model_quoting_its_answer(standin, mode):
    base_url, answers = standin
    answers.write_text(mode)
    for check in ("known", "sane"):
        result = probe(base_url, check)
        assert result.get("failed") and "is degenerate" in result["msg"], result
        assert vision.DEGENERATE_UNITS[mode][:4] in result["msg"] and "Fix:" in result["msg"]
    assert not probe(base_url, "none").get("failed")


def test_a_fluent_wrong_model_fails_known_and_passes_sane(standin):
    base_url, answers = standin
    answers.write_text("wrong")
    result = probe(base_url, "known")
    assert result.get("failed") and "the answer check (known) failed" in result["msg"], result
    assert '"There are 5 squares."' in result["msg"] and "expected 3 (or three)" in result["msg"]
    assert not probe(base_url, "sane").get("failed")


def test_the_probe_fails_at_the_first_bang_of_a_server_that_answers_only_that(scripted):  # noqa: F811
    """Against a server that answers only `!`, `sane` fails on the smoke answer itself: one request, no wait."""
    Scripted.chats = 0
    Scripted.chat = (200, completion("!" * 64))
    started = time.monotonic()
    result = run_module("vllm_probe", base_url=scripted, model=MODEL, timeout=10, image_size="64x64",
                        answer_check="sane")
    took = time.monotonic() - started
    assert result.get("failed") and '"' + "!" * 64 + '"' in result["msg"] and "degenerate" in result["msg"], result
    assert Scripted.chats == 1, "the probe asked again after a degenerate answer"
    print("probe against a server answering only '!': failed after %.2f s" % took)


def test_the_probe_passes_sane_against_a_server_answering_a_natural_sentence(scripted):  # noqa: F811
    Scripted.chats = 0
    Scripted.chat = (200, completion("The picture shows a quiet path between green trees under a blue sky."))
    result = run_module("vllm_probe", base_url=scripted, model=MODEL, timeout=10, image_size="64x64",
                        answer_check="sane")
    assert not result.get("failed"), result
    assert Scripted.chats == 2  # the smoke request and one known question


def completion(text):
    return json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 300, "completion_tokens": 64, "total_tokens": 364}}).encode()


def test_the_load_test_records_a_model_going_bad_during_its_matrix(standin, tmp_path):
    """Healthy before the matrix, `!` after it: both verdicts are returned and written to the results file."""
    base_url, answers = standin
    results = tmp_path / "bench" / "vllm-ascend.jsonl"
    outcome = {}
    run = threading.Thread(target=lambda: outcome.update(run_module(
        "vllm_benchmark", base_url=base_url, results_file=str(results), image_sizes=["64x64"], max_tokens=[16],
        concurrency=[1, 2], requests_per_group=4, warmup_requests=1)))
    run.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and '"answer_check": "before"' not in (
            results.read_text() if results.exists() else ""):
        time.sleep(0.01)
    answers.write_text("bang")
    run.join(120)
    assert not outcome.get("failed"), outcome
    before, after = outcome["answer_checks"]
    assert (before["answer_check"], before["passed"], after["answer_check"], after["passed"]) == (
        "before", True, "after", False)
    assert "!!!!" in after["failure"]
    from ansible_collections.ascend.fleet.plugins.module_utils import bench_record
    assert [check["passed"] for check in bench_record.read_answer_checks(str(results))] == [True, False]
    records, skipped = bench_record.read_results(str(results))
    assert len(records) == 2 and skipped == 0


def test_a_resume_with_nothing_left_to_measure_asks_nothing(standin, tmp_path):
    base_url, _answers = standin
    results = tmp_path / "vllm-ascend.jsonl"
    matrix = dict(base_url=base_url, results_file=str(results), image_sizes=["64x64"], max_tokens=[4],
                  concurrency=[1], requests_per_group=2, warmup_requests=0)
    first = run_module("vllm_benchmark", **matrix)
    assert [check["answer_check"] for check in first["answer_checks"]] == ["before", "after"]
    written = results.read_text()
    again = run_module("vllm_benchmark", resume=True, **matrix)
    assert again["answer_checks"] == [] and results.read_text() == written


def test_the_progress_file_says_which_answer_check_asks(standin, tmp_path, monkeypatch):
    """Each question may take request_timeout_s: the progress file changes before each, so a follower does not
    take a slow check for a hung run."""
    base_url, _answers = standin
    results = tmp_path / "vllm-ascend.jsonl"
    from ansible_collections.ascend.fleet.plugins.module_utils import load_test
    written = []
    real_update = load_test.ProgressWriter.update

    def update(self, state, force=False):
        written.append(dict(state))
        return real_update(self, state, force)

    monkeypatch.setattr(load_test.ProgressWriter, "update", update)
    params = {name: spec.get("default") for name, spec in load_test.ARGUMENT_SPEC.items()}
    params.update(base_url=base_url, results_file=str(results), image_sizes=["64x64"], max_tokens=[4],
                  concurrency=[1], requests_per_group=2, warmup_requests=0)
    load_test.run(params)
    checks = [state for state in written if state.get("answer_check")]
    assert [state["answer_check"] for state in checks] == ["before", "before", "after", "after"]
    assert (checks[0]["groups_done"], checks[-1]["groups_done"]) == (0, 1)
