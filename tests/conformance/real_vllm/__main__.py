"""``python -m conformance.real_vllm install`` (vLLM and the model folder, see the package's docstring),
``python -m conformance.real_vllm serve [--port N] [-- VLLM_SERVE_FLAGS...]``: real vLLM with the fake engine
core on 127.0.0.1 until interrupted, for trying a request on it by hand. FAKE_* settings come from the
environment (fake_engine.py); the server's output goes to REAL_VLLM_HOME/vllm-PORT.log.

Or ``python -m conformance.real_vllm options [--keep] VERSION [VERSION...]``: each vLLM release's `vllm serve`
option table, from its own parser, into tests/fixtures/vllm-serve-options/<VERSION>.json, so that what the role
renders can be checked against releases the suite does not run. One release at a time, each in a virtualenv of
its own (about 4 minutes and 9 GB), which is removed once read unless it was there before, is the suite's
(0.18.0), or --keep.
"""
import argparse
import os
import signal
import sys

from . import HOME, install, options_file, record_options, start, stop


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m conformance.real_vllm")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("install", help="install vLLM into its virtualenv and make the model folder")
    serve = commands.add_parser("serve", help="run `vllm serve` with the fake engine core until interrupted")
    serve.add_argument("--port", type=int, default=18000)
    serve.add_argument("flags", nargs="*", help="vllm serve flags, after --")
    options = commands.add_parser("options", help="record each release's `vllm serve` option table")
    options.add_argument("--keep", action="store_true", help="keep the virtualenvs installed for this")
    options.add_argument("versions", nargs="+", metavar="VERSION", help="a vLLM release on PyPI, e.g. 0.20.2")
    args = parser.parse_args(argv)
    if args.command == "options":
        for version in args.versions:
            found = record_options(version, keep=args.keep)
            print("vLLM %s: %d options in %s" % (version, len(found), options_file(version)), flush=True)
        return 0
    folder = install()
    if args.command == "install":
        print(folder)
        return 0
    fake = {name: value for name, value in os.environ.items() if name.startswith("FAKE_")}
    log = HOME / ("vllm-%d.log" % args.port)
    # The server runs in a session of its own, so it gets no signal meant for this process: it is stopped on
    # Ctrl-C (even where the shell started this process with SIGINT ignored) and on SIGTERM.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server = start(args.port, args.flags, fake, log)
    print("serving on http://127.0.0.1:%d (log %s); Ctrl-C stops it" % (args.port, log), flush=True)
    try:
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
