"""Which plays of site.yml reach hosts, as `--list-hosts` shows them (no connection is made): the benchmark play
only when its tag is asked for, and playbooks/benchmark.yml alone on every serving host."""
import re
import subprocess

import pytest

from conftest import REPO, venv_tool

INVENTORY = "[ascend]\nnpu-1\nnpu-2\n[gateway]\ngw-1\n"


@pytest.fixture
def inventory(tmp_path):
    path = tmp_path / "hosts.ini"
    path.write_text(INVENTORY)
    return path


def hosts_of_plays(inventory, playbook, *args):
    """play name -> the hosts it would run on."""
    listed = subprocess.run([venv_tool("ansible-playbook"), "-i", str(inventory), playbook, "--list-hosts"]
                            + list(args), cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, check=True, timeout=120).stdout
    plays = {}
    for block in re.split(r"\n\s*play #\d+ ", listed)[1:]:
        name = re.match(r"\([^)]*\): (.+?)\t", block).group(1)
        plays[name] = sorted(re.findall(r"^ {6}(\S+)$", block, re.M))
    return plays


def test_site_yml_benchmarks_no_host_unless_asked(inventory):
    plays = hosts_of_plays(inventory, "site.yml")
    assert plays["Benchmark vLLM-Ascend"] == [], plays
    assert plays["Deploy vLLM-Ascend"] == ["npu-1", "npu-2"], plays
    assert hosts_of_plays(inventory, "site.yml", "--tags", "server")["Benchmark vLLM-Ascend"] == []


@pytest.mark.parametrize("tags", ["all,benchmark", "benchmark"])
def test_site_yml_benchmarks_every_serving_host_with_the_tag(inventory, tags):
    assert hosts_of_plays(inventory, "site.yml", "--tags", tags)["Benchmark vLLM-Ascend"] == ["npu-1", "npu-2"]


def test_the_benchmark_playbook_alone_needs_no_tag(inventory):
    assert hosts_of_plays(inventory, "playbooks/benchmark.yml") == {"Benchmark vLLM-Ascend": ["npu-1", "npu-2"]}
    through_gateway = hosts_of_plays(inventory, "playbooks/benchmark.yml", "-e", "vllm_bench_target=gateway")
    assert through_gateway == {"Benchmark vLLM-Ascend": ["gw-1"]}
