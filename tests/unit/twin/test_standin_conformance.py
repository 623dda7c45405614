"""The stand-in answers as real vLLM 0.18 answered the same requests (tests/fixtures/vllm-0.18/, recorded by
`scripts/dev conformance --record`), and its `vllm serve` parser judges argument lists as real vLLM's did.

The recorded side needs no vLLM here: these tests hold the stand-in to what was recorded.
"""
import pytest
from conformance import golden, rendered, servers, transcript

from twin.vllm_standin import cli as standin_cli


@pytest.fixture(scope="module")
def standin_transcripts(tmp_path_factory):
    with servers.every_server(servers.Standin, tmp_path_factory.mktemp("standin")) as started:
        yield transcript.record_all({name: server.url for name, server in started.items()})


@pytest.mark.parametrize("name", sorted(transcript.CASES))
def test_the_standin_answers_as_vllm_did(name, standin_transcripts):
    assert transcript.differences(golden.transcript(name), standin_transcripts[name]) == []


def test_every_recorded_case_is_still_sent():
    recorded = {path.stem for path in golden.FOLDER.glob("*.json")} - {"serve-args"}
    assert recorded == set(transcript.CASES)


def test_the_standin_parser_judges_argument_lists_as_vllm_did():
    assert golden.parser_disagreements(golden.serve_args()["lists"]) == []


def test_every_standin_option_is_one_vllm_has():
    serve = standin_cli.build_parser()._subparsers._group_actions[0].choices["serve"]
    ours = {option for action in serve._actions for option in action.option_strings}
    assert sorted(ours - set(golden.serve_args()["options"])) == []


def test_what_the_role_renders_now_was_accepted_by_vllm():
    """A flag the role starts to render is checked against real vLLM's parser by the conformance suite; until
    it is recorded there, this names it."""
    accepted = {tuple(entry["argv"]) for entry in golden.serve_args()["lists"] if entry["accepted"]}
    unchecked = [what for what, argv in rendered.every_rendering().items() if tuple(argv) not in accepted]
    assert unchecked == [], "record them with scripts/dev conformance --record"


def test_a_lone_max_pixels_is_ignored_as_vllm_ignores_it():
    """What the recorded transcripts show (bench_1920x1080_lone_cap): the cap needs min_pixels beside it."""
    from twin.vllm_standin import server

    assert server.pixel_cap({"max_pixels": 1310720}) is None
    assert server.pixel_cap({"min_pixels": 65536, "max_pixels": 1310720}) == 1310720
    assert server.pixel_cap({"size": {"shortest_edge": 65536, "longest_edge": 1310720}}) == 1310720
