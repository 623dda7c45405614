"""The stand-in as each release of the release table: its vLLM's `vllm serve` options, and its defects."""
import pytest
import requests
from standin_host import MODEL, root, serve_args  # noqa: F401  (the fixture)
from test_standin_faults import chat

from ansible_collections.ascend.fleet.plugins.plugin_utils import vllm_releases
from twin import lifecycle
from twin.vllm_standin import cli, release, release_name, server

TABLE = vllm_releases.load()


@pytest.fixture
def as_release(tmp_path, monkeypatch):
    """Makes the stand-in the image of a release, as the twin's tag of it does (its table as JSON in the image)."""
    path = tmp_path / "releases.json"
    path.write_text(lifecycle.releases_json(), encoding="utf-8")
    monkeypatch.setenv("VLLM_TWIN_RELEASES_FILE", str(path))

    def make(version):
        monkeypatch.setenv("VLLM_TWIN_RELEASE", version)
    return make


def test_the_image_of_a_release_is_built_on_its_vllm_and_has_its_defects(as_release):
    assert (release_name(), release()["vllm"], release()["defects"]) == ("v0.18.0rc1", "0.18.0", [])
    as_release("v0.22.1rc1")
    assert release_name() == "v0.22.1rc1" and release() == TABLE["releases"]["v0.22.1rc1"]


@pytest.mark.parametrize("version", sorted(TABLE["releases"]))
def test_a_release_kills_its_engine_on_the_images_its_defects_kill_and_on_no_other(version):
    defects = TABLE["releases"][version]["defects"]
    tiny, small, large = (server.fatal_lines(pixels, defects, server.DEFAULT_CRASH_PIXELS)
                          for pixels in (150 * 150, 640 * 480, 2560 * 1440))
    assert server.fatal_lines(0, defects, server.DEFAULT_CRASH_PIXELS) is None  # text only
    kills = {defect["kills"] for defect in defects}
    assert (tiny is not None) == ("image_requests" in kills)
    assert (small is not None) == bool(kills)
    assert large is not None  # the large-image fault of every release, uncapped
    for lines in (tiny, small):
        if lines:
            assert lines[1:] == defects[0]["log"] and "507018" in lines[-1]
            assert defects[0]["issue"] in lines[0]


def test_an_image_request_kills_the_engine_of_a_release_marked_for_it_with_the_issues_lines(
        root, as_release, capsys):  # noqa: F811
    as_release("v0.22.1rc1")
    args = serve_args("--compilation-config", '{"cudagraph_mode": "FULL_DECODE_ONLY"}')
    running = server.start_server(args, cli.host_path("/data/models/" + MODEL), {})
    url = "http://127.0.0.1:%d/v1/chat/completions" % args.port
    try:
        text = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "你好"}]}
        assert requests.post(url, json=text, timeout=30).status_code == 200
        assert requests.post(url, json=chat(150, 150), timeout=30).status_code == 500
        assert not running.state.engine.alive
    finally:
        running.shutdown()
    out = capsys.readouterr().out
    assert "vllm-project/vllm-ascend#12086" in out
    assert "ERROR (Worker pid=24337) ERROR 06-18 01:38:22 [multiproc_executor.py:962] RuntimeError: ACL stream " \
           "synchronize failed, error code:507018" in out


def test_a_flag_the_releases_vllm_no_longer_has_fails_as_its_parser_fails(root, as_release, capsys):  # noqa: F811
    argv = ["serve", str(cli.host_path("/data/models/" + MODEL)), "--max-model-len", "8192", "-tp", "2",
            "--dtype", "float16", "--disable-frontend-multiprocessing"]
    parser = cli.build_parser()
    cli.refuse_options_of_other_versions(parser, argv)  # the seed's vLLM 0.18 has it
    as_release("v0.19.1rc1")
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "vllm: error: unrecognized arguments: --disable-frontend-multiprocessing"
