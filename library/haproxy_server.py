#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module haproxy_server: set a server's admin state through HAProxy's runtime API, and wait for it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: haproxy_server
short_description: Drain, disable or ready one HAProxy server through the runtime API, and wait for the result
description:
  - Talks to HAProxy's runtime API on its UNIX socket (C(stats socket ... level admin) in the global section),
    as C(set server BACKEND/SERVER state ...) does by hand.
  - C(drain) sends the server no new request while those in flight go on; C(maint) takes it out entirely;
    C(ready) puts it back, to be used once its health checks pass.
  - With O(wait_idle), waits after a drain until the server holds no session (C(scur) of C(show stat)); with
    O(wait_up), waits after ready until its health checks mark it UP. Both waits end within O(timeout) with a
    failure that names what is still open, or the last check.
  - Changes something only when the server's admin state is not the one asked for.
  - With O(add_at), a server the backend does not have yet (an instance a layout change started) is added first,
    through the runtime API's C(add server) (HAProxy 2.4 and later), so that it serves before the gateway's config
    is written again; that config then names it for good.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  socket:
    description: Path of HAProxy's runtime API socket; it must be declared with C(level admin).
    type: path
    default: /run/haproxy/admin.sock
  backend:
    description: Name of the backend that holds the server.
    type: str
    required: true
  server:
    description: Name of the server in O(backend).
    type: str
    required: true
  state:
    description:
      - The admin state to set. C(ready) clears a drain or a maintenance this API set; C(drain) keeps the
        requests in flight and sends no new one; C(maint) stops sending anything.
    type: str
    required: true
    choices: [ready, drain, maint]
  wait_idle:
    description: After C(drain) or C(maint), wait until the server holds no session any more.
    type: bool
    default: false
  wait_up:
    description: After C(ready), wait until the health checks mark the server UP.
    type: bool
    default: false
  timeout:
    description:
      - Seconds the whole call may take (at least 1) - every runtime API command and the wait of O(wait_idle) or
        O(wait_up). Each command gets only what is left of it, and at most 10 s, for its whole answer; a failure
        when it runs out names what the module was waiting on.
      - A share of it, a tenth and at most 2 s, is kept for the last look at the server after a wait.
    type: int
    default: 600
  skip_unknown:
    description:
      - A backend or server this HAProxy does not know is reported with RV(found) false instead of failing
        (no request reaches it through this HAProxy, so there is nothing to set).
    type: bool
    default: false
  add_at:
    description:
      - Where the server is, when O(backend) may not have it yet. A server the backend lacks is added at
        C(address):C(port) with C(options) - a server added this way takes no C(default-server) line, so the
        options carry its health checks - which are enabled; then O(state) applies (a new server starts in
        maintenance). O(skip_unknown) then only concerns a backend HAProxy does not have.
    type: dict
    suboptions:
      address:
        description: The server's address (a host name or an IP address).
        type: str
        required: true
      port:
        description: The server's port.
        type: int
        required: true
      options:
        description: Server options, as on a C(server) line of the config, such as C(check inter 2s fall 3 rise 2).
        type: list
        elements: str
        default: []
extends_documentation_fragment:
  - ascend.fleet.attributes
attributes:
  check_mode:
    description: Can run in check mode and report what would change.
    support: full
    details: Reads the server's state and reports whether it would change; sets nothing and waits for nothing.
  diff_mode:
    description: Would show what the module changed.
    support: none
    details: The previous and current states are returned instead.
"""

EXAMPLES = r"""
- name: Drain an instance and wait until its requests in flight have ended
  ascend.fleet.haproxy_server:
    backend: vllm_instances
    server: npu-node-01:vllm-ascend
    state: drain
    wait_idle: true
    timeout: 600

- name: Put it back once its health checks pass
  ascend.fleet.haproxy_server:
    backend: vllm_instances
    server: npu-node-01:vllm-ascend
    state: ready
    wait_up: true
    timeout: 60

- name: Add an instance a layout change started, at its address, and put it in rotation once it is UP
  ascend.fleet.haproxy_server:
    backend: vllm_instances
    server: npu-node-01:vllm-ascend-npu1-chip0
    state: ready
    wait_up: true
    add_at: {address: 10.0.8.21, port: 8000, options: [check, inter, 2s, fall, "3", rise, "2"]}
"""

RETURN = r"""
found:
  description: Whether HAProxy knows the backend and the server (false only with O(skip_unknown)).
  returned: always
  type: bool
  sample: true
previous:
  description:
    - The server before the module acted - its admin state (ready, drain or maint), its status as C(show stat)
      gives it (UP, DOWN, DRAIN, MAINT, ...), its sessions and its last health check.
  returned: when found
  type: dict
  sample: {"admin": "ready", "status": "UP", "sessions": 3, "check": "Layer7 check passed: OK"}
current:
  description: The server when the module ended, in the same form as RV(previous).
  returned: when found
  type: dict
  sample: {"admin": "drain", "status": "DRAIN", "sessions": 0, "check": "Layer7 check passed: OK"}
added:
  description: The server was not in the backend and was added (in check mode, would be) at O(add_at).
  returned: always
  type: bool
  sample: false
waited_s:
  description: Seconds spent waiting for O(wait_idle) or O(wait_up).
  returned: when found
  type: float
  sample: 12.4
"""

import errno
import os
import re
import socket
import stat
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.deadline import Deadline, DeadlinePassed
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import (
    OptionError,
    number_at_least,
    text_given,
    unexpected_failure,
)

POLL_S = 0.5
# HAProxy's rule for backend and server names, in ASCII: the commands naming them go out as ASCII.
HAPROXY_NAME = re.compile(r"[A-Za-z0-9_.:-]+")
# An address or a word of server options on one command line: nothing that would end it or start another.
COMMAND_WORD = re.compile(r"[A-Za-z0-9_.:/\[\]-]+")
# Answers of one runtime API command are short; a socket that does not answer whole in this time is not HAProxy.
COMMAND_TIMEOUT_S = 10
# The share of timeout kept, after a wait, for the last look at the server (its sessions, its state), and its most:
# HAProxy answers a command in milliseconds.
LAST_LOOK_SHARE = 0.1
LAST_LOOK_MOST_S = 2
# srv_admin_state bits of `show servers state` (HAProxy's SRV_ADMF_*): maintenance and drain forced through
# this API, which `set server ... state ready` clears.
FORCED_MAINT = 0x01
FORCED_DRAIN = 0x08


class GatewayError(Exception):
    """What went wrong, with the input it concerns and the fix."""


class UnknownName(GatewayError):
    """HAProxy's config has no such backend, or no such server in it; unknown: which of them, in a few words."""

    def __init__(self, message, unknown, server_only=False):
        super(UnknownName, self).__init__(message)
        self.unknown = unknown
        self.server_only = server_only


class RuntimeApi:
    """HAProxy's runtime API on a UNIX socket: one command per connection, its answer read to the end within
    COMMAND_TIMEOUT_S and what is left of deadline (module_utils/deadline.py), the module's; without one (a caller
    that keeps the API for long), within COMMAND_TIMEOUT_S alone."""

    def __init__(self, path, deadline=None):
        self.path = path
        self.deadline = deadline

    def _unreachable(self, reason):
        return GatewayError("socket %s: %s: is HAProxy running with `stats socket %s level admin` in its global "
                            "section? Fix: start HAProxy (service haproxy start), or give the socket its config "
                            "declares" % (self.path, reason, self.path))

    def check_socket(self):
        try:
            mode = os.stat(self.path).st_mode
        except OSError as error:
            raise self._unreachable(os.strerror(error.errno) if error.errno else str(error)) from None
        if not stat.S_ISSOCK(mode):
            raise self._unreachable("not a socket")

    def command(self, line):
        """The answer to one command line; DeadlinePassed, naming it, when the deadline cut it."""
        waiting_on = "HAProxy's answer to %r on socket %s" % (line, self.path)
        # Bounds the whole answer, not each read: a socket that sends a byte now and then is cut off too.
        answer_deadline = Deadline(COMMAND_TIMEOUT_S if self.deadline is None else
                                   self.deadline.allow(waiting_on, COMMAND_TIMEOUT_S))
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.settimeout(answer_deadline.allow(waiting_on))
            connection.connect(self.path)
            connection.sendall(line.encode("ascii") + b"\n")
            chunks = []
            while True:
                connection.settimeout(answer_deadline.allow(waiting_on))
                chunk = connection.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        except (socket.timeout, DeadlinePassed):
            if self.deadline is not None:
                self.deadline.check(waiting_on)
            raise self._unreachable("no whole answer to %r within %d s" % (line, COMMAND_TIMEOUT_S)) from None
        except OSError as error:
            if error.errno in (errno.ECONNREFUSED, errno.ENOENT):
                raise self._unreachable("nothing answers on it (%s)" % os.strerror(error.errno)) from None
            if error.errno == errno.EACCES:
                raise GatewayError("socket %s: permission denied. Fix: run the task as root (become), or as a member "
                                   "of the socket's group (haproxy)" % self.path) from None
            raise
        finally:
            connection.close()
        answer = b"".join(chunks).decode("utf-8", "replace")
        if answer.strip() == "Permission denied.":
            raise GatewayError("socket %s refuses %r: it is not declared with `level admin`. Fix: declare it as "
                               "`stats socket %s mode 660 level admin` in HAProxy's global section"
                               % (self.path, line.split(" ")[0] + " ...", self.path))
        return answer

    def stat_rows(self):
        """`show stat` as one dict per line, keyed by the CSV header's names."""
        lines = [line for line in self.command("show stat").splitlines() if line.strip()]
        if not lines or not lines[0].startswith("# "):
            raise GatewayError("socket %s answered `show stat` with %r, not HAProxy's statistics. Fix: give the "
                               "socket of HAProxy's runtime API" % (self.path, "\n".join(lines)[:200]))
        names = lines[0][2:].split(",")
        return [dict(zip(names, line.split(","))) for line in lines[1:]]

    def admin_flags(self, backend, server):
        """srv_admin_state of the server, from `show servers state`."""
        lines = [line for line in self.command("show servers state %s" % backend).splitlines() if line.strip()]
        header = next((line[2:].split() for line in lines if line.startswith("# ")), [])
        for line in lines:
            fields = dict(zip(header, line.split()))
            if fields.get("be_name") == backend and fields.get("srv_name") == server:
                return int(fields["srv_admin_state"])
        raise GatewayError("`show servers state %s` on %s does not list server %s. Fix: check that HAProxy was "
                           "not reloaded with another config meanwhile" % (backend, self.path, server))


def describe(api, backend, server):
    """The server's admin state, status, sessions and last health check; UnknownName, naming the backends or
    servers HAProxy knows, when it does not know the backend or the server."""
    rows = api.stat_rows()
    backends = sorted(row["pxname"] for row in rows if row.get("svname") == "BACKEND")
    if backend not in backends:
        raise UnknownName("backend %r is not in HAProxy's config (its backends: %s). Fix: give one of them"
                          % (backend, ", ".join(backends) or "none"), "HAProxy has no backend %r" % backend)
    servers = [row for row in rows if row["pxname"] == backend and row["svname"] not in ("FRONTEND", "BACKEND")]
    found = [row for row in servers if row["svname"] == server]
    if not found:
        names = ", ".join(sorted(row["svname"] for row in servers)) or "none"
        raise UnknownName("server %r is not in backend %r (its servers: %s). Fix: give one of them, or deploy the "
                          "gateway again so its config names the server" % (server, backend, names),
                          "backend %r has no server %r" % (backend, server), server_only=True)
    flags = api.admin_flags(backend, server)
    admin = "maint" if flags & FORCED_MAINT else "drain" if flags & FORCED_DRAIN else "ready"
    row = found[0]
    check = ": ".join(part for part in (row.get("check_desc"), row.get("last_chk")) if part)
    return {"admin": admin, "status": row["status"], "sessions": int(row["scur"] or 0), "check": check}


def open_sessions(api, backend, server):
    """The sessions HAProxy holds with the server, each as `from <client> (age <age>)`, from `show sess`."""
    wanted = ("be=%s" % backend, "srv=%s" % server)
    sessions = []
    for line in api.command("show sess").splitlines():
        fields = line.split()
        if all(field in fields for field in wanted):
            source = next((field[4:] for field in fields if field.startswith("src=")), "?")
            age = next((field[4:] for field in fields if field.startswith("age=")), "?")
            sessions.append("from %s (age %s)" % (source, age))
    return sessions


def wait_for(api, params, done, on_timeout):
    """(Seconds until done(server state) held, that state); GatewayError from on_timeout(last state) once the wait's
    time is over: the deadline's, less the last look's share."""
    started = time.time()
    ends = api.deadline.before(min(params["timeout"] * LAST_LOOK_SHARE, LAST_LOOK_MOST_S))
    while True:
        current = describe(api, params["backend"], params["server"])
        if done(current):
            return time.time() - started, current
        if ends.passed():
            raise on_timeout(current)
        ends.sleep(POLL_S)


def still_open(api, params, current):
    """The failure of a drain whose wait ended with sessions open, naming them."""
    sessions = ", ".join(open_sessions(api, params["backend"], params["server"])) or "they ended meanwhile"
    return GatewayError("%s/%s still holds %d session(s) after %s s: %s. Fix: wait for them, or give a longer timeout "
                        "(gateway_drain_timeout_s)" % (params["backend"], params["server"], current["sessions"],
                                                       params["timeout"], sessions))


def not_up(params, current):
    """The failure of a wait for UP, with the server's status and last health check."""
    return GatewayError("%s/%s is %s after %s s, not UP (last health check: %s). Fix: check that the instance answers "
                        "GET /health with 200 from the gateway" % (params["backend"], params["server"],
                                                                   current["status"], params["timeout"],
                                                                   current["check"] or "none"))


def timed_out(params, passed):
    """The failure of a call whose timeout ran out, naming what it was waiting on."""
    return ("%s/%s: the time ran out (timeout: %s s, the whole call) while waiting for %s. Fix: check that HAProxy "
            "answers on its runtime API (systemctl status haproxy; echo 'show info' | socat stdio %s), or give a "
            "longer timeout" % (params["backend"], params["server"], params["timeout"], passed.waiting_on,
                                params["socket"]))


def add_server(api, params):
    """Add the server the backend lacks at add_at, with its health checks on (it starts in maintenance)."""
    name, where = "%s/%s" % (params["backend"], params["server"]), params["add_at"]
    # HAProxy 2.4 has `add server` as an experimental command; later versions accept the switch and ignore it.
    command = "experimental-mode on; add server %s %s:%d %s" % (name, where["address"], where["port"],
                                                                " ".join(where["options"]))
    answer = api.command(command.strip()).strip()
    if answer != "New server registered.":
        raise GatewayError("HAProxy refused `%s`: %s. Fix: HAProxy 2.4 or later adds servers through its runtime "
                           "API; else deploy the gateway again (ansible-playbook site.yml --tags gateway), whose "
                           "config names the server" % (command.split("; ", 1)[1].strip(), answer or "no answer"))
    if "check" in where["options"]:
        api.command("enable health %s" % name)


def apply(params, check_mode):
    """The module's result: the server added where asked and missing, set to the state asked for, and the waits
    asked for done."""
    api = RuntimeApi(params["socket"], Deadline(params["timeout"]))
    api.check_socket()
    added = False
    try:
        previous = describe(api, params["backend"], params["server"])
    except UnknownName as error:
        if not (params["add_at"] and error.server_only):
            if params["skip_unknown"]:
                return {"changed": False, "found": False, "added": False, "msg": "skipped: %s" % error.unknown}
            raise
        if check_mode:
            return {"changed": True, "found": False, "added": True, "msg": "would add: %s" % error.unknown}
        add_server(api, params)
        added, previous = True, describe(api, params["backend"], params["server"])
    changed = added or previous["admin"] != params["state"]
    result = {"changed": changed, "found": True, "added": added, "previous": previous, "current": previous,
              "waited_s": 0.0}
    if check_mode:
        return result
    if previous["admin"] != params["state"]:
        command = "set server %s/%s state %s" % (params["backend"], params["server"], params["state"])
        answer = api.command(command).strip()
        if answer:
            raise GatewayError("HAProxy refused `%s`: %s. Fix: check the server's config" % (command, answer))
    current = None
    if params["wait_idle"]:
        waited, current = wait_for(api, params, lambda current: current["sessions"] == 0,
                                   lambda current: still_open(api, params, current))
        result["waited_s"] = round(waited, 3)
    if params["wait_up"]:
        waited, current = wait_for(api, params, lambda current: current["status"] in ("UP", "no check"),
                                   lambda current: not_up(params, current))
        result["waited_s"] = round(waited, 3)
    result["current"] = current or describe(api, params["backend"], params["server"])
    return result


def check_options(params):
    for option in ("backend", "server"):
        text_given(params, option, "an HAProxy %s name" % option, "give the name HAProxy's config uses")
        # The value itself, not its stripped text: it goes into a command line, where a line break ends the command.
        if not HAPROXY_NAME.fullmatch(params[option]):
            raise OptionError("%s %r: expected an HAProxy name (ASCII letters, digits, '-', '_', '.' and ':'). Fix: "
                              "give the name HAProxy's config uses" % (option, params[option]))
    number_at_least(params, "timeout", 1, "give the seconds the whole call may take")
    where = params["add_at"]
    if where:
        words = [where["address"]] + where["options"]
        odd = [word for word in words if not isinstance(word, str) or not COMMAND_WORD.fullmatch(word)]
        if odd or not 0 < where["port"] < 65536:
            raise OptionError("add_at %r: expected an address, a port from 1 to 65535 and server options, each a "
                              "word of letters, digits and '_.:/[]-' (%s is not). Fix: give the instance's address, "
                              "port and the backend's check options" % (
                                  where, ", ".join(repr(word) for word in odd) or "the port"))
    if params["wait_idle"] and params["state"] == "ready":
        raise OptionError("wait_idle: waits for a server with no new requests, but state is ready. Fix: use it with "
                          "state drain or maint")
    if params["wait_up"] and params["state"] != "ready":
        raise OptionError("wait_up: waits for a server that takes requests, but state is %s. Fix: use it with state "
                          "ready" % params["state"])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            socket=dict(type="path", default="/run/haproxy/admin.sock"),
            backend=dict(type="str", required=True),
            server=dict(type="str", required=True),
            state=dict(type="str", required=True, choices=["ready", "drain", "maint"]),
            wait_idle=dict(type="bool", default=False),
            wait_up=dict(type="bool", default=False),
            timeout=dict(type="int", default=600),
            skip_unknown=dict(type="bool", default=False),
            add_at=dict(type="dict", options=dict(
                address=dict(type="str", required=True),
                port=dict(type="int", required=True),
                options=dict(type="list", elements="str", default=[]),
            )),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        check_options(params)
        result = apply(params, module.check_mode)
    except (OptionError, GatewayError) as error:
        module.fail_json(msg=str(error))
    except DeadlinePassed as passed:
        module.fail_json(msg=timed_out(params, passed))
    except Exception as error:  # anything unforeseen still names the server and the socket, not a traceback
        module.fail_json(msg=unexpected_failure("setting %s/%s to %s through %s" % (
            params["backend"], params["server"], params["state"], params["socket"]), error))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
