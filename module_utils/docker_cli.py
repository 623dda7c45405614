# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Docker CLI as the modules run it: its output as text whatever bytes it prints, and a `docker` option that
names no program it can run reported as the option's fault, not as a traceback."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import subprocess

from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import OptionError

# The longest a Docker CLI call that only reads or starts something may take: a wedged daemon answers none, and a
# module must not wait for it forever.
DEFAULT_TIMEOUT_S = 120


class DockerUnavailable(OptionError):
    """The docker option names no Docker CLI that can run here; why says so in a few words."""

    def __init__(self, docker, error):
        self.why = "docker %r cannot run (%s)" % (docker, error.strerror or error)
        super(DockerUnavailable, self).__init__(
            "%s: expected the Docker CLI. Fix: install Docker (the docker_runtime role does), or set fleet_docker_bin "
            "to its path" % self.why)


def run_docker(docker, *args, timeout=None, stdin=None, deadline=None):
    """(exit code, stdout, stderr) of one Docker CLI call, bytes that are not UTF-8 replaced.

    Callers put `--` before any name they pass, so that no value, whatever it holds, is read as an option.
    timeout (seconds; None: DEFAULT_TIMEOUT_S; 0: none, for a pull the caller bounds otherwise): the call is
    killed after it, giving exit code None and the reason as stderr (the daemon stops a pull whose client went
    away, and keeps the layers it has). deadline (module_utils/deadline.py), the module's: the call gets at most
    what is left of it, and DeadlinePassed, naming the call, when nothing is left or the call was cut by it.
    stdin: text given to the call on its standard input (a password, which never goes on a command line).
    """
    timeout = DEFAULT_TIMEOUT_S if timeout is None else timeout or None
    called = "`%s %s`" % (docker, " ".join(args))
    if deadline is not None:
        timeout = deadline.allow(called, timeout)
    try:
        done = subprocess.run([docker] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, input=stdin,
                              stdin=None if stdin is not None else subprocess.DEVNULL, encoding="utf-8",
                              errors="replace", check=False, timeout=timeout)
    except OSError as error:
        raise DockerUnavailable(docker, error) from None
    except subprocess.TimeoutExpired:
        if deadline is not None:
            deadline.check(called)
        return None, "", "no end after %ss: stopped (timeout)" % timeout
    return done.returncode, done.stdout, done.stderr
