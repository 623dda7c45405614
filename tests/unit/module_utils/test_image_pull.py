"""module_utils/image_pull.py's rules read directly (the module's runs are tests/unit/library/
test_docker_image_pull.py): docker's grammar of references, the registry a name pulls from, the platform an image
is of, and a digest held."""
import pytest

from ansible_collections.ascend.fleet.plugins.module_utils import image_pull

IMAGE = "quay.io/ascend/vllm-ascend:v0.18.0rc1-310p"


@pytest.mark.parametrize("name, problem", [
    (IMAGE, None),
    ("registry.site:5000/ascend/vllm-ascend:v1", None),
    ("m.daocloud.io/quay.io/ascend/vllm-ascend:v1", None),
    ("[fd00::1]:5000/ascend/vllm-ascend:v1", None),
    ("ascend/vllm-ascend@sha256:" + "0" * 64, None),
    ("", "is empty"),
    ("--all-tags", "starts with '-'"),
    ("quay.io/Ascend/x:v1", "capital letters"),
    ("quay.io/ascend/x::v1", "is not an image reference"),
    ("quay.io/" + "a" * 300, "longer than docker's 255 characters"),
])
def test_a_reference_is_held_to_dockers_grammar(name, problem):
    found = image_pull.reference_problem(name)
    assert (found is None) if problem is None else (problem in found), found


@pytest.mark.parametrize("name, registry", [
    (IMAGE, "quay.io"), ("registry.site:5000/a/b:c", "registry.site:5000"), ("localhost/a:b", "localhost"),
    ("ascend/vllm-ascend:v1", "docker.io"), ("vllm:v1", "docker.io"),
])
def test_the_registry_a_name_pulls_from(name, registry):
    assert image_pull.registry_of(name) == registry


def test_platforms_compare_without_the_variant_and_with_machine_names():
    arm = {"Os": "linux", "Architecture": "arm64", "Variant": "v8"}
    assert image_pull.same_platform(arm, "linux/arm64") and image_pull.same_platform(arm, "linux/arm64/v8")
    assert image_pull.same_platform(arm, "linux/aarch64") and not image_pull.same_platform(arm, "linux/amd64")
    assert image_pull.os_architecture("linux/x86_64") == "linux/amd64"


def test_a_digest_is_held_only_by_a_repository_digest_that_ends_with_it():
    digest = "sha256:" + "4f1c" * 16
    image = {"RepoDigests": ["quay.io/ascend/vllm-ascend@" + digest, None]}
    assert image_pull.has_digest(image, digest)
    assert not image_pull.has_digest(image, "sha256:" + "0" * 64) and not image_pull.has_digest({}, digest)
