"""Runs inside real vLLM's virtualenv: its `vllm serve` parser's verdict on argument lists, and its option table.

Reads a JSON list of argument lists (each starting with "serve") on stdin; writes JSON to the file named by its
argument (vLLM logs to stdout):
{"verdicts": [{"accepted": bool, "error": last line of vLLM's complaint or null}], "options": [...]}.
An argument list is accepted when vLLM's own parser takes it, `vllm serve`'s validation passes and the engine
arguments are built from it, as `vllm serve` does before it loads anything.

The option table of other releases is read with it too (real_vllm.record_options, with no lists): vLLM 0.18.0 to
0.25.1 all have the imports below where 0.18 has them, and the same platform detectors.
"""
import argparse
import contextlib
import io
import json
import os
import re
import sys

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
import vllm.platforms  # noqa: E402

# The CUDA wheel on a machine without a GPU detects no platform; vLLM 0.18's own CPU detector then says yes.
# vLLM 0.24 and later resolve the platform while `vllm` itself is imported, before that: resolved again here.
if "cpu" in vllm.platforms.builtin_platform_plugins:
    vllm.platforms.builtin_platform_plugins["cpu"] = lambda: "vllm.platforms.cpu.CpuPlatform"
    vllm.platforms._current_platform = None

from vllm.engine.arg_utils import AsyncEngineArgs  # noqa: E402
from vllm.entrypoints.cli.serve import cmd_init  # noqa: E402
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402


def vllm_parser():
    parser = FlexibleArgumentParser(prog="vllm")
    commands = parser.add_subparsers(dest="subparser")
    found = {}
    for command in cmd_init():
        found[command.name] = (command, command.subparser_init(commands))
    return parser, found


def verdict(argv):
    parser, commands = vllm_parser()
    complaint = io.StringIO()
    try:
        with contextlib.redirect_stderr(complaint):
            args = parser.parse_args(argv)
            commands[args.subparser][0].validate(args)
            if getattr(args, "model_tag", None):
                args.model = args.model_tag
            AsyncEngineArgs.from_cli_args(args)
    except SystemExit:
        lines = complaint.getvalue().strip().splitlines() or ["exit without a message"]
        # A function's repr names its address, which differs by run.
        return {"accepted": False, "error": re.sub(r" at 0x[0-9a-f]+", "", lines[-1])}
    except (ValueError, TypeError, argparse.ArgumentError) as error:
        return {"accepted": False, "error": "%s: %s" % (type(error).__name__, error)}
    return {"accepted": True, "error": None}


def option_table():
    _, commands = vllm_parser()
    serve = commands["serve"][1]
    return sorted(option for action in serve._actions for option in action.option_strings)


def main():
    lists = json.load(sys.stdin)
    with open(sys.argv[1], "w") as handle:
        json.dump({"verdicts": [verdict(argv) for argv in lists], "options": option_table()}, handle)


if __name__ == "__main__":
    main()
