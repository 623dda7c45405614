"""library/image_archive.py with a Docker CLI that keeps a registry in a file: a save writes the archive once and
leaves it when it holds the same images, a push sends what the registry lacks (and joins two platforms under one
name), a damaged archive is refused by name before any image is loaded or pushed, and options it cannot use are
refused with the fix."""
import json
import os
import stat
import sys
import tarfile
import textwrap

import pytest
from module_runs import run_module

NAME = "quay.io/ascend/vllm-ascend:v0.18.0rc1-310p"
SITE = "registry.site:5000/ascend/vllm-ascend:v0.18.0rc1-310p"
ARM_ID, AMD_ID = "sha256:" + "a" * 64, "sha256:" + "b" * 64

# Docker as far as the module uses it; the registry is {name: image ID, or a list's [names]} in state.json, and
# every call is appended to calls.json.
FAKE_DOCKER = textwrap.dedent('''\
    #!%s
    import json, os, sys
    folder = os.path.dirname(os.path.abspath(__file__))
    state_file = os.path.join(folder, "state.json")
    state = json.load(open(state_file))
    args = [arg for arg in sys.argv[1:] if arg not in ("--insecure", "--amend", "--purge", "--")]
    state["calls"].append(args)
    verb = args[0]
    if verb == "tag":
        state["local"][args[2]] = args[1]
    elif verb == "save":
        open(args[2], "w").write("docker save of %%s (%%s)" %% (args[3], state["local"][args[3]]))
    elif verb == "load":
        state["loaded"].append(open(args[2]).read())
    elif verb == "push":
        state["registry"][args[1]] = state["local"][args[1]]
    elif args[:2] == ["manifest", "inspect"]:
        held = state["registry"].get(args[2])
        if held is None:
            sys.stderr.write("no such manifest: %%s\\n" %% args[2])
            sys.exit(1)
        print(json.dumps({"manifests": [{"name": part} for part in held]} if isinstance(held, list)
                         else {"config": {"digest": held}}))
    elif args[:2] == ["manifest", "create"]:
        state["registry"][args[2]] = args[3:]
    json.dump(state, open(state_file, "w"))
    ''') % sys.executable


@pytest.fixture
def docker(tmp_path):
    folder = tmp_path / "docker"
    folder.mkdir()
    script = folder / "docker"
    script.write_text(FAKE_DOCKER)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    (folder / "state.json").write_text(json.dumps({"calls": [], "local": {}, "loaded": [], "registry": {}}))
    return script


def state(docker):
    return json.loads((docker.parent / "state.json").read_text())


def edit_state(docker, **changes):
    current = state(docker)
    current.update(changes)
    (docker.parent / "state.json").write_text(json.dumps(current))


IMAGES = [{"name": NAME, "platform": "linux/arm64", "id": ARM_ID}, {"name": NAME, "platform": "linux/amd64",
                                                                  "id": AMD_ID}]


def saved(tmp_path, docker):
    path = tmp_path / "carry" / "fleet-images.tar"
    path.parent.mkdir(exist_ok=True)
    result = run_module("image_archive", action="save", path=str(path), images=IMAGES, docker=str(docker))
    assert result["changed"] and not result.get("failed"), result
    return path, result


def test_a_save_tags_each_platform_by_its_id_and_a_second_save_leaves_the_archive(tmp_path, docker):
    path, result = saved(tmp_path, docker)
    assert [(image["platform"], image["id"]) for image in result["images"]] == [("linux/arm64", ARM_ID),
                                                                                 ("linux/amd64", AMD_ID)]
    assert result["msg"].startswith("saved 2 image(s) to %s (" % path)
    # Each saved by the name after the name was pointed at that platform's ID.
    assert [call[:2] for call in state(docker)["calls"]] == [["tag", ARM_ID], ["save", "--output"], ["tag", AMD_ID],
                                                             ["save", "--output"]]
    assert sorted(os.listdir(str(path.parent))) == ["fleet-images.tar"]  # no working file left
    again = run_module("image_archive", action="save", path=str(path), images=IMAGES, docker=str(docker))
    assert not again["changed"] and again["msg"] == "%s holds these images already" % path
    assert len(state(docker)["calls"]) == 4
    newer = [dict(IMAGES[0], id="sha256:" + "c" * 64), IMAGES[1]]
    assert run_module("image_archive", action="save", path=str(path), images=newer, docker=str(docker))["changed"]


def test_a_save_in_check_mode_needs_no_ids_and_writes_nothing(tmp_path, docker):
    path = tmp_path / "fleet-images.tar"
    images = [{"name": NAME, "platform": "linux/arm64", "id": ""}]
    result = run_module("image_archive", action="save", path=str(path), images=images, docker=str(docker),
                        _ansible_check_mode=True)
    assert result["changed"] and result["msg"] == "would save 1 image(s) to %s" % path
    assert not path.exists() and state(docker)["calls"] == []
    refused = run_module("image_archive", action="save", path=str(path), images=images, docker=str(docker))
    assert refused["failed"] and refused["msg"].startswith("images[1] (")
    assert "id missing: expected name, platform, id for action=save" in refused["msg"]


def test_a_push_sends_what_the_registry_lacks_and_joins_two_platforms_under_one_name(tmp_path, docker):
    path, _ = saved(tmp_path, docker)
    edit_state(docker, calls=[], local={})
    targets = [dict(image, push_to=SITE) for image in IMAGES]
    result = run_module("image_archive", action="push", path=str(path), images=targets, docker=str(docker))
    assert result["changed"], result
    assert [image["pushed_as"] for image in result["images"]] == [SITE + "-linux-arm64", SITE + "-linux-amd64"]
    registry = state(docker)["registry"]
    assert registry == {SITE + "-linux-arm64": ARM_ID, SITE + "-linux-amd64": AMD_ID,
                        SITE: [SITE + "-linux-arm64", SITE + "-linux-amd64"]}
    assert len(state(docker)["loaded"]) == 2
    assert sorted(os.listdir(str(path.parent))) == ["fleet-images.tar"]  # the loaded files are gone
    again = run_module("image_archive", action="push", path=str(path), images=targets, docker=str(docker))
    assert not again["changed"] and again["msg"].endswith("the registry holds every image already")
    assert len(state(docker)["loaded"]) == 2


def test_one_platform_is_pushed_under_the_name_itself_and_check_mode_only_says_so(tmp_path, docker):
    path, _ = saved(tmp_path, docker)
    target = [dict(IMAGES[0], push_to=SITE)]
    planned = run_module("image_archive", action="push", path=str(path), images=target, docker=str(docker),
                         _ansible_check_mode=True)
    assert planned["changed"] and planned["msg"] == "%s is sound; would push %s" % (path, SITE)
    assert state(docker)["registry"] == {}
    done = run_module("image_archive", action="push", path=str(path), images=target, docker=str(docker))
    assert done["changed"] and state(docker)["registry"] == {SITE: ARM_ID}


def test_a_damaged_archive_is_refused_before_anything_is_loaded_or_pushed(tmp_path, docker):
    path, _ = saved(tmp_path, docker)
    with tarfile.open(str(path)) as tar:
        second = tar.getmembers()[-1]
    data = bytearray(path.read_bytes())
    data[second.offset_data + 3] ^= 1  # in the second image's data
    path.write_bytes(bytes(data))
    for action, extra in (("push", {"images": [dict(IMAGES[0], push_to=SITE)]}),
                          ("extract", {"images": IMAGES[:1], "dest": str(tmp_path)}), ("verify", {})):
        result = run_module("image_archive", action=action, path=str(path), docker=str(docker), **extra)
        assert result["failed"] and result["msg"].startswith("image archive %s is damaged: member images/" % path)
        assert "linux-amd64.tar has SHA256" in result["msg"], result["msg"]
    assert state(docker)["loaded"] == [] and state(docker)["registry"] == {}
    assert not [name for name in os.listdir(str(tmp_path)) if name.endswith(".tar")]


def test_an_image_the_archive_does_not_hold_is_named_with_what_it_holds(tmp_path, docker):
    path, _ = saved(tmp_path, docker)
    other = {"name": NAME.replace("v0.18.0rc1", "v0.19.1rc1"), "platform": "linux/arm64", "push_to": SITE}
    result = run_module("image_archive", action="push", path=str(path), images=[other], docker=str(docker))
    assert result["failed"] and "does not hold %s for linux/arm64; it holds %s for linux/arm64, %s for linux/amd64" \
        % (other["name"], NAME, NAME) in result["msg"]
    missing = run_module("image_archive", action="verify", path=str(tmp_path / "none.tar"), docker=str(docker))
    assert missing["failed"] and missing["msg"].startswith("image archive %s does not exist" % (tmp_path / "none.tar"))


def test_an_extract_writes_the_images_asked_for_and_a_verify_lists_all(tmp_path, docker):
    path, _ = saved(tmp_path, docker)
    out = tmp_path / "out"
    out.mkdir()
    result = run_module("image_archive", action="extract", path=str(path), images=IMAGES[1:], dest=str(out))
    (image,) = result["images"]
    assert image["extracted"] == str(out / os.path.basename(image["file"])) and os.listdir(str(out)) == [
        os.path.basename(image["file"])]
    assert open(image["extracted"]).read() == "docker save of %s (%s)" % (NAME, AMD_ID)
    verified = run_module("image_archive", action="verify", path=str(path))
    assert not verified["changed"] and verified["msg"] == "%s is sound: 2 image(s)" % path


@pytest.mark.parametrize("args, expected", [
    ({"action": "push", "images": [{"name": NAME, "platform": "linux/arm64"}]},
     "images[1] ({\"name\": \"%s\", \"platform\": \"linux/arm64\"}): push_to missing" % NAME),
    ({"action": "push", "images": [dict(IMAGES[0], push_to=SITE), dict(IMAGES[0], push_to=SITE)]},
     "images: an image is named twice for one platform (%s linux/arm64" % NAME),
    ({"action": "extract", "images": IMAGES}, "dest: missing: action=extract writes the images' files into it"),
    ({"action": "verify", "timeout": -1}, "timeout: -1 is not allowed: expected seconds, 0 or more"),
])
def test_options_it_cannot_use_are_refused_with_the_fix(tmp_path, args, expected):
    result = run_module("image_archive", path=str(tmp_path / "a.tar"), **args)
    assert result["failed"] and result["msg"].startswith(expected) and "Fix: " in result["msg"], result["msg"]
