"""-e/--extra-vars on every subcommand, with the meaning it has there: a variable of the play (deploy, verify, bench,
teardown, doctor, collect, images), of the Ansible run that reads the hosts' facts (report --from-facts); and every
command line the READMEs and the --help examples show parses."""
import json
import shlex

import pytest
import readme_commands

from ascend_vllm_fleet import cli

SUBCOMMANDS = ("deploy", "verify", "bench", "report", "teardown", "doctor", "collect", "images")
# What a subcommand needs after its name to parse, where it needs anything.
ARGUMENTS = {"report": ["reports/r", "--from-facts"], "images": ["list"]}


def documented_lines():
    """Every `ascend-vllm-fleet ...` line of the READMEs' command blocks, and of the --help examples."""
    lines = [(str(block), command) for readme in ("README.md", "README.zh-CN.md")
             for block in readme_commands.blocks(readme) for command in block.commands
             if command.startswith("ascend-vllm-fleet ")]
    lines += [("%s --help" % name, " ".join(shlex.split(line, comments=True)))
              for name, examples in cli.EXAMPLES.items() for line in examples.splitlines()]
    return lines


def test_the_readmes_show_the_commands_these_tests_parse():
    shown = [command for where, command in documented_lines() if "README.md" in where]
    assert "ascend-vllm-fleet bench --preset seed --plan" in shown and len(shown) >= 8, shown


@pytest.mark.parametrize("where, line", documented_lines())
def test_every_documented_command_line_parses(where, line, capsys):
    try:
        args = cli.build_parser().parse_args(shlex.split(line)[1:])
    except SystemExit:
        pytest.fail("%s: %r does not parse: %s" % (where, line, capsys.readouterr().err))
    assert args.command == shlex.split(line)[1]


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_subcommand_takes_inventory_limit_and_extra_vars(name):
    options = ["-i", "hosts.yml", "-l", "npu-a", "-e", "x=1", "--extra-vars", "y=2"]
    args = cli.build_parser().parse_args([name] + ARGUMENTS.get(name, []) + options)
    assert (args.inventory, args.limit, args.extra_vars) == ("hosts.yml", "npu-a", ["x=1", "y=2"])


class Run:
    """What ansible_runner.run returns, for a run in which npu-a answered."""
    rc = 0
    stats = {"ok": {"npu-a": 1}}
    events = [{"event": "runner_on_ok", "event_data": {"host": "npu-a", "res": {"ansible_facts": {}}}}]

    class config:
        ident = "20261130T000000Z-test"


def fake_ansible_runner(monkeypatch):
    """Replace ansible_runner.run by one that keeps its settings and the extra variables its -e @FILE holds
    during the run (the file is removed after it)."""
    import ansible_runner

    seen = {}

    def run(**settings):
        seen.update(settings)
        arguments = shlex.split(settings["cmdline"])
        with open(arguments[arguments.index("-e") + 1][1:], encoding="utf-8") as handle:
            seen["extravars"] = json.load(handle)
        return Run

    monkeypatch.setattr(ansible_runner, "run", run)
    return seen


@pytest.mark.parametrize("name", sorted(cli.PLAYBOOKS))
def test_the_extra_vars_of_a_playbook_command_are_the_plays(name, tmp_path, monkeypatch, capsys):
    seen = fake_ansible_runner(monkeypatch)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all: {}\n")
    extra = ["-e", "vllm_bench_reports_dir=%s" % tmp_path, "-e", "doctor_report_dir=%s" % tmp_path]
    cli.main([name] + ARGUMENTS.get(name, []) + ["-i", str(inventory), "-e", "fleet_api_key=sk-e", "-e",
                                                 "vllm_server_port=9000"] + extra)
    assert seen["playbook"] == str(cli.REPO / cli.PLAYBOOKS[name])
    assert seen["extravars"]["fleet_api_key"] == "sk-e" and seen["extravars"]["vllm_server_port"] == 9000
    assert "sk-e" not in seen["cmdline"]


def test_report_from_facts_passes_its_extra_vars_to_the_run_that_reads_the_facts(tmp_path, monkeypatch):
    seen = fake_ansible_runner(monkeypatch)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all: {}\n")
    args = cli.build_parser().parse_args(["report", str(tmp_path / "report"), "--from-facts", "-i", str(inventory),
                                          "-e", "ansible_user=ops", "-e", "ansible_port=2222"])
    cli.gather_facts(args, tmp_path / "facts")
    assert seen["module"] == "ansible.builtin.setup"
    assert seen["extravars"] == {"ansible_user": "ops", "ansible_port": 2222}
    assert json.loads((tmp_path / "facts" / "npu-a").read_text()) == {"ansible_facts": {}}


def test_report_without_from_facts_refuses_what_only_a_facts_run_uses(tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        cli.main(["report", str(tmp_path), "-e", "ansible_user=ops"])
    assert str(refused.value).startswith("ascend-vllm-fleet report: -e: only used with --from-facts")
    assert "Fix: add --from-facts, or leave out -e" in str(refused.value)
    with pytest.raises(SystemExit):
        cli.main(["report", "--help"])
    assert "without --from-facts nothing runs Ansible, so a variable means nothing" in " ".join(
        capsys.readouterr().out.split())


@pytest.mark.parametrize("name", sorted(cli.PLAYBOOKS))
def test_without_an_inventory_a_command_takes_ansible_inventory_as_ansibles_tools_do(name, monkeypatch):
    monkeypatch.delenv("ANSIBLE_INVENTORY", raising=False)
    argv = [name] + ARGUMENTS.get(name, [])[:1]
    assert cli.build_parser().parse_args(argv).inventory == str(cli.DEFAULT_INVENTORY)
    monkeypatch.setenv("ANSIBLE_INVENTORY", "/srv/site/hosts.yml")
    assert cli.build_parser().parse_args(argv).inventory == "/srv/site/hosts.yml"
    assert cli.build_parser().parse_args(argv + ["-i", "other.yml"]).inventory == "other.yml"
