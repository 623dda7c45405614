"""ascend-vllm-fleet: run the collection's playbooks with a live view of every host, and a summary at the end.

Each subcommand drives a playbook through ansible-runner; what the view shows is in view.py. The run's
artifacts go to artifacts/<timestamp>/ without the env files, so API keys or registry passwords passed with -e
never land on disk. The Ansible tools it runs are those beside the Python it runs under (its venv's bin/,
activated or not), else those on PATH.
"""
import argparse
import contextlib
import datetime
import json
import os
import pathlib
import shutil
import sys
import tempfile
import textwrap

from ansible_collections.ascend.fleet.plugins.module_utils import bench_record
from ansible_collections.ascend.fleet.plugins.plugin_utils import progress, report

from . import REPO, view

DEFAULT_INVENTORY = REPO / "inventory" / "twin" / "hosts.yml"


def default_inventory():
    """The inventory a command without -i runs on: ANSIBLE_INVENTORY's, as Ansible's own tools take it, else the
    twin's."""
    return os.environ.get("ANSIBLE_INVENTORY") or str(DEFAULT_INVENTORY)


PLAYBOOKS = {"deploy": "site.yml", "verify": "playbooks/verify.yml", "bench": "playbooks/benchmark.yml",
             "teardown": "playbooks/teardown.yml", "doctor": "playbooks/doctor.yml", "collect": "playbooks/doctor.yml",
             "images": "playbooks/images.yml"}
EXAMPLES = {
    "deploy": """\
        ascend-vllm-fleet deploy -i inventory/prod/hosts.yml
        ascend-vllm-fleet deploy -i inventory/prod/hosts.yml -l 'npu-node-0*' -e vllm_server_layout=per_card
        ascend-vllm-fleet deploy --check            # what a run would change""",
    "verify": """\
        ascend-vllm-fleet verify -i inventory/prod/hosts.yml
        ascend-vllm-fleet verify -l npu-node-07
        ascend-vllm-fleet verify -e vllm_server_restart_policy=always    # what a deploy with this -e runs""",
    "bench": """\
        ascend-vllm-fleet bench --preset quick
        ascend-vllm-fleet bench -i inventory/prod/hosts.yml --preset seed --plan    # groups and estimated time
        ascend-vllm-fleet bench -i inventory/prod/hosts.yml --preset seed -e vllm_bench_resume=true""",
    "report": """\
        ascend-vllm-fleet report reports/20261130T050744Z --latency-target 5
        ascend-vllm-fleet report reports/from-facts --from-facts -i inventory/prod/hosts.yml    # last runs
        ascend-vllm-fleet report reports/from-facts --from-facts -e ansible_user=ops""",
    "teardown": """\
        ascend-vllm-fleet teardown -i inventory/prod/hosts.yml
        ascend-vllm-fleet teardown --remove-image --remove-model""",
    "doctor": """\
        ascend-vllm-fleet doctor -i inventory/prod/hosts.yml
        ascend-vllm-fleet doctor -l npu-node-07 --bundle          # and its support bundle
        ascend-vllm-fleet doctor -e doctor_answer_check=none       # no chat request to the instances""",
    "collect": """\
        ascend-vllm-fleet collect -i inventory/prod/hosts.yml     # a bundle per host and a fleet index
        ascend-vllm-fleet collect -l npu-node-07""",
    "images": """\
        ascend-vllm-fleet images list -i inventory/prod/hosts.yml
        ascend-vllm-fleet images save /srv/carry/images.tar -i inventory/prod/hosts.yml   # where quay.io is reached
        ascend-vllm-fleet images load /srv/carry/images.tar -i inventory/prod/hosts.yml   # into the site registry
        ascend-vllm-fleet images load /srv/carry/images.tar --hosts -l 'npu-node-0*'     # onto the hosts""",
}


def stats_hosts(stats):
    return sorted(set().union(*(stats.get(key, {}) for key in ("ok", "failures", "dark", "changed", "skipped"))))


def summary_table(stats, fleet_view):
    rows = [("host", "status", "changed", "reason")]
    for host in stats_hosts(stats):
        failed = host in stats.get("failures", {}) or host in stats.get("dark", {})
        status = "UNREACHABLE" if host in stats.get("dark", {}) else "FAILED" if failed else "ok"
        rows.append((host, status, str(stats.get("changed", {}).get(host, 0)),
                     fleet_view.failures.get(host, "") if failed else ""))
    widths = [max(len(row[index]) for row in rows[:]) for index in range(3)]
    lines = []
    for row in rows:
        lines.append("  ".join(cell.ljust(widths[index]) for index, cell in enumerate(row[:3])) + "  " + row[3])
    return "\n".join(lines), any(row[1] != "ok" for row in rows[1:])


def extra_vars(pairs):
    values = {}
    for pair in pairs or []:
        if pair.startswith("@"):
            raise SystemExit("-e @file is not supported here; pass key=value pairs")
        if "=" not in pair:
            raise SystemExit("-e %r: expected key=value" % pair)
        key, value = pair.split("=", 1)
        try:
            values[key] = json.loads(value)
        except ValueError:
            values[key] = value
    return values


def utc_stamp():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def find_tool(name):
    """The path of the tool `name` (ansible-playbook, ansible): beside the Python this
    command runs under first, so that .venv/bin/ascend-vllm-fleet runs its own venv's Ansible whether that venv is
    activated or not, then on PATH."""
    folder = os.path.dirname(sys.executable)
    beside = os.path.join(folder, name)
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    found = shutil.which(name)
    if found:
        return found
    raise SystemExit("ascend-vllm-fleet: %s not found: not in %s (beside %s, the Python this command runs under) "
                     "nor on PATH (%s). Fix: install requirements.txt into that Python's environment (pip install -r "
                     "requirements.txt; scripts/dev does it for .venv), or put %s on PATH"
                     % (name, folder, sys.executable, os.environ.get("PATH", ""), name))


def tools_path(*tools):
    """PATH for a run of these tools: their folders first, as an activated venv has it, so that what they start in
    turn (ansible-playbook's own helpers) comes from where they were found."""
    folders = []
    for tool in tools:
        if os.path.dirname(tool) not in folders:
            folders.append(os.path.dirname(tool))
    return os.pathsep.join(folders + [os.environ.get("PATH", "")]).rstrip(os.pathsep)


def run_tail(runner, lines=15):
    """The end of what an ansible-runner run printed: the reason a run that reached no host stopped (an ERROR!
    before the first play, or a pattern that matched no host)."""
    with runner.stdout as handle:
        printed = handle.read().replace("\r\n", "\n").strip("\n").splitlines()
    return "\n".join(("  " + line).rstrip() for line in printed[-lines:]) or "  (nothing)"


@contextlib.contextmanager
def extravars_args(extravars):
    """The arguments that pass extravars to an Ansible run: a root-only file removed after the run, since
    ansible-runner would otherwise write them into its env files or, with those suppressed, into the command line
    it records in the artifacts."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="extravars-") as handle:
        json.dump(extravars, handle)
        handle.flush()
        yield ["-e", "@" + handle.name]


def playbook_vars(args):
    """The extra variables of a command's playbook, and the folder its report goes to (bench only): the
    command names that folder, so it knows where to look when the playbook is done."""
    extravars = extra_vars(args.extra_vars)
    report_dir = None
    if args.command == "bench":
        extravars.setdefault("vllm_bench_preset", args.preset)
        reports = pathlib.Path(extravars.get("vllm_bench_reports_dir") or REPO / "reports")
        report_dir = pathlib.Path(extravars.get("vllm_bench_report_dir") or reports / utc_stamp()).resolve()
        extravars["vllm_bench_report_dir"] = str(report_dir)
    if args.command in ("doctor", "collect"):
        report_dir = pathlib.Path(extravars.get("doctor_report_dir") or REPO / "reports" / (
            "doctor-" + utc_stamp())).resolve()
        extravars["doctor_report_dir"] = str(report_dir)
        extravars.setdefault("doctor_bundle", args.command == "collect" or args.bundle)
    if args.command == "images":
        extravars.update(vllm_image_archive_action=args.action)
        if args.action != "list":
            if not args.archive:
                raise SystemExit("ascend-vllm-fleet images %s: the archive's path is missing. Fix: ascend-vllm-fleet "
                                 "images %s ARCHIVE" % (args.action, args.action))
            extravars["vllm_image_archive_path"] = str(pathlib.Path(args.archive).resolve())
        elif args.archive:
            raise SystemExit("ascend-vllm-fleet images list: %s: list takes no archive (it lists what the fleet "
                             "needs). Fix: leave it out, or `images save %s` to save them"
                             % (args.archive, args.archive))
        misplaced = [option for option, given, allowed in (
            ("--hosts", args.hosts, args.action == "load"),
            ("--registry", args.registry, args.action == "load" and not args.hosts),
            ("--pull-mirror", args.pull_mirror, args.action == "save")) if given and not allowed]
        if misplaced:
            raise SystemExit("ascend-vllm-fleet images %s: %s: not used here (--hosts and --registry are load's, one "
                             "or the other; --pull-mirror is save's). Fix: leave %s out" % (
                                 args.action, ", ".join(misplaced), ", ".join(misplaced)))
        if args.hosts:
            extravars["vllm_image_archive_load_into"] = "hosts"
        for option, variable in (("registry", "vllm_image_archive_registry"),
                                 ("pull_mirror", "vllm_image_archive_pull_mirror")):
            if getattr(args, option):
                extravars[variable] = getattr(args, option)
    if args.command == "teardown":
        extravars.setdefault("vllm_teardown_remove_image", args.remove_image)
        extravars.setdefault("vllm_teardown_remove_model", args.remove_model)
    return extravars, report_dir


def run_playbook(args, playbook, extravars, out=sys.stdout, report_dir=None, status=True):
    import ansible_runner

    tool = find_tool("ansible-playbook")
    artifacts = REPO / "artifacts"
    artifacts.mkdir(exist_ok=True)
    fleet_view = view.FleetView(status_dir=report_dir / progress.STATUS_FOLDER if report_dir and status else None,
                                bounds=view.WaitBounds(pathlib.Path(args.inventory).resolve(), extravars))
    cmdline = []
    if args.limit:
        cmdline += ["--limit", args.limit]
    if getattr(args, "check", False):
        cmdline += ["--check", "--diff"]
    if getattr(args, "plan", False):
        cmdline += ["--check"]
    with extravars_args(extravars) as extra, view.Screen(fleet_view, out) as screen:
        runner = ansible_runner.run(
            private_data_dir=str(artifacts), artifact_dir=str(artifacts), project_dir=str(REPO),
            playbook=str(REPO / playbook), inventory=str(pathlib.Path(args.inventory).resolve()),
            cmdline=" ".join(cmdline + extra), ident=utc_stamp() + "-" + args.command,
            envvars={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "PATH": tools_path(tool)}, quiet=True,
            event_handler=screen.handle, settings={"suppress_env_files": True})
    if not stats_hosts(runner.stats or {}):
        # Nothing ran on any host: a table would be empty, and the reason is only in what ansible-playbook printed.
        sys.stderr.write("ascend-vllm-fleet %s: no host ran a task (%s exit code %s). The end of what it printed "
                         "(%s):\n%s\n" % (args.command, tool, runner.rc, artifacts / runner.config.ident / "stdout",
                                          run_tail(runner)))
        return 1
    table, any_failed = summary_table(runner.stats, fleet_view)
    out.write("\n%s\n" % table)
    if fleet_view.verdicts:
        out.write("\n%s\n" % view.verdicts_text(fleet_view.verdicts))
    summary = report_dir / "summary.json" if report_dir else None
    if summary and summary.exists():
        out.write("\n%s\n" % view.report_summary(report_dir, json.loads(summary.read_text(encoding="utf-8"))))
    out.write("\nartifacts: %s\n" % (artifacts / runner.config.ident))
    return 1 if any_failed or runner.rc != 0 else 0


def gather_facts(args, folder):
    """Each host's local facts, asked as `ansible HOSTS -m setup -a filter=ansible_local` asks them, written to
    folder/<host> (what report.raw_from_facts reads). A host that does not answer stops it, named."""
    import ansible_runner

    inventory = pathlib.Path(args.inventory or default_inventory()).resolve()
    if not inventory.exists():
        raise SystemExit("ascend-vllm-fleet report --from-facts: inventory %s not found. Fix: pass -i "
                         "inventory/<site>/hosts.yml" % inventory)
    tool = find_tool("ansible")
    artifacts = REPO / "artifacts"
    artifacts.mkdir(exist_ok=True)
    # A private data folder of its own: a playbook run's leaves files there that would become this run's arguments.
    with tempfile.TemporaryDirectory(prefix="facts-") as private, extravars_args(extra_vars(args.extra_vars)) as extra:
        runner = ansible_runner.run(
            private_data_dir=private, artifact_dir=str(artifacts), project_dir=str(REPO),
            host_pattern=args.limit or "ascend", module="ansible.builtin.setup", module_args="filter=ansible_local",
            inventory=str(inventory), cmdline=" ".join(extra), ident=utc_stamp() + "-facts",
            envvars={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "PATH": tools_path(tool)}, quiet=True,
            settings={"suppress_env_files": True})
    if not any(event.get("event", "").startswith("runner_on_") for event in runner.events):
        raise SystemExit("ascend-vllm-fleet report --from-facts: Ansible asked no host for its facts (%s exit code "
                         "%s). The end of what it printed (%s):\n%s" % (
                             tool, runner.rc, artifacts / runner.config.ident / "stdout", run_tail(runner)))
    folder.mkdir(parents=True, exist_ok=True)
    missed = []
    for event in runner.events:
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok":
            (folder / data["host"]).write_text(json.dumps(data["res"]), encoding="utf-8")
        elif event.get("event") in ("runner_on_failed", "runner_on_unreachable"):
            missed.append("%s (%s)" % (data.get("host"), (data.get("res") or {}).get("msg", "failed")))
    if missed:
        raise SystemExit("ascend-vllm-fleet report --from-facts: the facts of %s could not be read. Fix: reach them, "
                         "or leave them out with -l" % ", ".join(missed))


def command_doctor(args, extravars, report_dir, out=sys.stdout):
    """The doctor's playbook, then its line per host and where the diagnosis (and bundles) are; exits 1 when a
    host is not healthy or was not diagnosed."""
    code = run_playbook(args, PLAYBOOKS[args.command], extravars, out, report_dir, status=False)
    diagnosis = report_dir / "doctor.json"
    if not diagnosis.exists():
        out.write("\nno diagnosis was written (%s): see the run's output above\n" % diagnosis)
        return code or 1
    fleet = json.loads(diagnosis.read_text(encoding="utf-8"))
    out.write("\n%s\n\ndiagnosis: %s\n" % ("\n".join(row["summary"] for row in fleet["hosts"]), diagnosis))
    bundles = [row["bundle"]["file"] for row in fleet["hosts"] if row.get("bundle")]
    if bundles:
        out.write("bundles: %s (%d)\n" % (report_dir / "bundles", len(bundles)))
    return code or (0 if fleet["healthy"] else 1)


def command_images(args, extravars, out=sys.stdout):
    """The images playbook, then the fleet's images (and, after a save, what the archive holds)."""
    with tempfile.TemporaryDirectory(prefix="images-") as folder:
        listed = pathlib.Path(folder) / "images.json"
        extravars.setdefault("vllm_image_archive_list_file", str(listed))
        code = run_playbook(args, PLAYBOOKS[args.command], extravars, out)
        if listed.exists():
            images = json.loads(listed.read_text(encoding="utf-8"))
            rows = [("image", "platform", "release", "hosts")] + [
                (image["name"], image["platform"], image["release"], ", ".join(image["hosts"])) for image in images]
            widths = [max(len(row[index]) for row in rows) for index in range(3)]
            out.write("\n%s\n" % "\n".join("  ".join(cell.ljust(widths[index]) for index, cell in enumerate(row[:3]))
                                             + "  " + row[3] for row in rows))
    if args.action == "save" and code == 0 and not args.check:
        archive = extravars["vllm_image_archive_path"]
        out.write("\narchive: %s (%d bytes; its manifest.json and SHA256SUMS list every image)\n"
                  % (archive, os.path.getsize(archive)))
    return code


def command_report(args, out=sys.stdout):
    if not args.from_facts:
        given = [option for option, value in (("-i", args.inventory), ("-l", args.limit), ("-e", args.extra_vars))
                 if value]
        if given:
            raise SystemExit("ascend-vllm-fleet report: %s: only used with --from-facts (by the Ansible run that "
                             "reads the hosts' facts); without it the report is rebuilt from %s alone. Fix: add "
                             "--from-facts, or leave out %s" % (", ".join(given), args.report_dir, ", ".join(given)))
    else:
        report_dir = pathlib.Path(args.report_dir)
        report.refuse_existing_raw(report_dir)
        gather_facts(args, report_dir / "facts")
        hosts = report.raw_from_facts(report_dir / "facts", report_dir)
        out.write("from the facts of %d host(s): %s\n" % (len(hosts), ", ".join(sorted(hosts))))
    out.write("%s\n" % report.describe(args.report_dir, report.build(args.report_dir, args.latency_target)))
    return 0


def build_parser():
    parser = argparse.ArgumentParser(prog="ascend-vllm-fleet", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    helps = {"deploy": "preflight, then runtime, image, model and server on every host (site.yml)",
             "verify": "check that every host still serves what its deploy recorded (reads only)",
             "bench": "benchmark every instance and write the fleet report",
             "report": "rebuild a report from fetched results",
             "teardown": "remove the containers and rendered files",
             "doctor": "name what is wrong on every host, with its evidence and fix (reads only)",
             "collect": "pack a support bundle per host (secrets scrubbed) and a fleet index, with the diagnosis",
             "images": "list the images the fleet needs, save them to one checked archive, load it into the site "
                       "registry or onto the hosts"}
    for name in ("deploy", "verify", "bench", "report", "teardown", "doctor", "collect", "images"):
        sub = commands.add_parser(name, help=helps[name], description=helps[name],
                                  epilog="examples:\n" + textwrap.dedent(EXAMPLES[name]),
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        if name == "images":
            sub.add_argument("action", choices=("list", "save", "load"),
                             help="list: the images (each host's fleet_image for its platform); save: pull them here "
                                  "and write ARCHIVE with their SHA256 sums; load: check ARCHIVE whole, then push its "
                                  "images into the registry the hosts pull from (fleet_image_registry_mirror), or with "
                                  "--hosts load each host's onto it")
            sub.add_argument("archive", nargs="?", help="the archive (save, load)")
            sub.add_argument("--hosts", action="store_true", help="load: onto each host, for a site without a registry")
            sub.add_argument("--registry", metavar="ADDRESS",
                             help="load: push to this registry address (host[:port]) instead of the hosts' one, when "
                                  "this machine reaches it by another name")
            sub.add_argument("--pull-mirror", metavar="ADDRESS",
                             help="save: pull from this mirror of the images' registry (as fleet_image_registry_mirror "
                                  "names one) instead of the registry itself")
        if name == "report":
            sub.add_argument("report_dir", help="folder holding raw/<host>/<instance>.jsonl")
            sub.add_argument("--from-facts", action="store_true",
                             help="first write raw/ from the hosts' local facts, each instance's last run (read with "
                                  "Ansible's setup module, kept in <report_dir>/facts/)")
            sub.add_argument("-i", "--inventory", help="with --from-facts: the inventory (default: $ANSIBLE_INVENTORY, "
                                                       "else the twin's)")
            sub.add_argument("-l", "--limit", help="with --from-facts: only these hosts (an Ansible pattern)")
            sub.add_argument("-e", "--extra-vars", action="append", metavar="KEY=VALUE",
                             help="with --from-facts: a variable for the Ansible run that reads the facts, such as "
                                  "ansible_user (repeatable; values are parsed as JSON when they can be); without "
                                  "--from-facts nothing runs Ansible, so a variable means nothing and is refused")
            sub.add_argument("--latency-target", type=float, default=bench_record.LATENCY_TARGET_S,
                             help="p95 latency (seconds) the recommended concurrency must meet (default %(default)g)")
            continue
        sub.add_argument("-i", "--inventory", default=default_inventory(),
                         help="inventory file (default: $ANSIBLE_INVENTORY, else the twin's)")
        sub.add_argument("-l", "--limit", help="only these hosts (an Ansible pattern)")
        sub.add_argument("-e", "--extra-vars", action="append", metavar="KEY=VALUE",
                         help="set a variable (repeatable); values are parsed as JSON when they can be")
        if name in ("deploy", "images"):
            sub.add_argument("--check", action="store_true", help="show what would change, change nothing")
        if name == "bench":
            sub.add_argument("--preset", default="quick",
                             help="quick (a smoke check, minutes) or seed (the matrix of the blog post this project "
                                  "grew from, tests/fixtures/seed/: hours on 310P); both are in vllm_bench_presets")
            sub.add_argument("--plan", action="store_true",
                             help="only show the plan: each instance's groups, requests and estimated time (the "
                                  "load-test module's check mode); nothing is sent to the instances")
        if name == "doctor":
            sub.add_argument("--bundle", action="store_true", help="also pack each host's support bundle (as collect)")
        if name == "teardown":
            sub.add_argument("--remove-image", action="store_true", help="also remove the image")
            sub.add_argument("--remove-model", action="store_true", help="also remove the model folder")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    inventory = getattr(args, "inventory", None)
    if inventory and not pathlib.Path(inventory).exists():
        hint = ("the twin's inventory is written by `scripts/dev twin up`"
                if pathlib.Path(inventory).resolve() == DEFAULT_INVENTORY else "check the path")
        sys.stderr.write("ascend-vllm-fleet: inventory %s not found: %s, or pass -i inventory/<site>/hosts.yml\n"
                         % (inventory, hint))
        return 2
    if args.command == "report":
        return command_report(args)
    extravars, report_dir = playbook_vars(args)
    if args.command in ("doctor", "collect"):
        return command_doctor(args, extravars, report_dir)
    if args.command == "images":
        return command_images(args, extravars)
    return run_playbook(args, PLAYBOOKS[args.command], extravars, report_dir=report_dir)


if __name__ == "__main__":
    sys.exit(main())
