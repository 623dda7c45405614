#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module vllm_probe: wait until a vLLM instance serves, then send it one real image request."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_probe
short_description: Wait until a vLLM OpenAI-compatible server is ready, then smoke-test it with an image
description:
  - Ready means C(GET /health) answers 200 and C(GET /v1/models) lists the served model name.
  - While waiting, watches the container (when C(container) is given) and gives up at once when it stopped or
    Docker restarted it (a crash loop), returning the tail of its C(docker logs); a model load on 310P takes
    minutes, a crash should not. A server that refuses the key (401 or 403 on C(/v1/models), while
    C(/health) answers) fails at once too.
  - Then sends the request an operator sends by hand - one generated image plus a text prompt - and requires
    a non-empty answer and a C(usage) block. The image is made on the host (PNG, standard library), so hosts
    without internet can be probed.
  - Then checks that the model answers right (C(answer_check)) - on 310P an fp16 overflow answers HTTP 200 with
    C(!!!!!!!!) or degenerate text, and a wrong chat template or another model's weights answer 200 too. It asks
    questions about pictures it draws (how many squares, what colour), each with one right answer, judged
    leniently (English or Chinese, digits or words); the rules are those of C(module_utils/answer_check.py).
    A failed check quotes each question, what was expected and what came back.
  - A failure with a container names the causes the doctor's log rules (C(module_utils/diagnosis.py)) find in
    its log, such as the aicpu IndexPut crash (error 507018) that kills the engine of a release the release table
    marks for it, before the log's tail.
  - Only reads. Options it cannot use (an empty model name, a size it cannot make, a container name docker
    would read as an option) fail before any request; answers no vLLM server gives are named in the failure.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  base_url:
    description: Server address as seen from the host.
    type: str
    default: http://127.0.0.1:8000
  model:
    description: Served model name that C(/v1/models) must list.
    type: str
    required: true
  api_key:
    description: Bearer token when the server was started with C(--api-key).
    type: str
  env_file:
    description:
      - The instance's env file on the host, C(<fleet_config_dir>/<instance>.env) as the vllm_server role writes it,
        with a line C(VLLM_API_KEY=<key>); the key is read from that line here, on the host. Not the controller's
        file of the bare key (the fleet role's C(fleet_api_key_file)).
      - A probe started with C(async) has its arguments in a file on the host while it waits; with this option
        the key is never among them. An empty value means no key.
      - C(api_key_file) is its name until 0.1.0, deprecated - it still works, with a deprecation warning, until
        1.0.0.
    type: path
    aliases: [api_key_file]
  timeout:
    description:
      - Seconds the whole probe may take (at least 1) - the wait for readiness, the smoke request, the required
        files' checks and the answer check. Each Docker call and HTTP request gets only what is left of it, and a
        failure when it runs out names what the probe was waiting on.
      - A share of it, a tenth and at most 10 s, is kept for reading the tail of the container's log after a
        failure.
    type: int
    default: 900
  container:
    description:
      - Docker container running the server, watched while waiting and whose logs a failure shows.
      - A container name or id, as docker names them (C([a-zA-Z0-9][a-zA-Z0-9_.-]+)).
    type: str
  docker:
    description: Docker CLI to use for C(container).
    type: str
    default: docker
  log_lines:
    description: Lines of C(docker logs) to return on failure (0 or more).
    type: int
    default: 40
  smoke_test:
    description: Send the image request once ready.
    type: bool
    default: true
  prompt:
    description: Text sent with the image.
    type: str
    default: 请描述一下图片
  image_size:
    description: Width and height of the generated image, C(WIDTHxHEIGHT), each at most 8192.
    type: str
    default: 640x480
  max_tokens:
    description: C(max_tokens) of the smoke request (at least 1).
    type: int
    default: 64
  request_timeout:
    description: Seconds to wait for the smoke answer, and for each answer of the answer check (at least 1), within
      what is left of O(timeout).
    type: int
    default: 300
  required_files:
    description:
      - Paths that must exist inside C(container), checked with the smoke request (C(docker exec ... test -e)),
        such as the library C(LD_PRELOAD) names, which the dynamic loader skips without a word when it is missing.
    type: list
    elements: str
    default: []
  answer_check:
    description:
      - C(known) - the smoke answer must not be degenerate, and the known questions must be answered right (asked
        in turn until two are right or two wrong; a degenerate answer fails at once).
      - C(sane) - the smoke answer and one known question's answer must not be degenerate (one character or
        punctuation repeated, a short unit repeated, replacement characters, nothing visible); any words pass.
      - C(none) - only a non-empty smoke answer is required.
      - Only with C(smoke_test).
    type: str
    choices: [known, sane, none]
    default: known
extends_documentation_fragment:
  - ascend.fleet.attributes
attributes:
  check_mode:
    description: Can run in check mode and probe as without it.
    support: full
    details: It only reads - the readiness checks and the smoke request change nothing on the host.
  diff_mode:
    description: Would show what the module changed.
    support: none
    details: It only reads, so there is never a change to show.
"""

EXAMPLES = r"""
- name: Wait for the instance and ask it about an image
  ascend.fleet.vllm_probe:
    base_url: http://127.0.0.1:8000
    model: Qwen3-VL-8B-Instruct
    container: vllm-ascend
    timeout: 1200

- name: Only require answers that are words, not the "!!!!" of an fp16 overflow
  ascend.fleet.vllm_probe:
    model: Qwen3-VL-8B-Instruct
    answer_check: sane
"""

RETURN = r"""
ready_after_s:
  description: Seconds until the server was ready.
  returned: when the server became ready
  type: float
  sample: 142.3
models:
  description: Model names C(/v1/models) listed.
  returned: when the server became ready
  type: list
  elements: str
  sample: ["Qwen3-VL-8B-Instruct"]
answer:
  description: First 200 characters of the smoke answer.
  returned: when smoke_test
  type: str
  sample: 这张图片展示了一个户外场景
usage:
  description: The smoke answer's usage block.
  returned: when smoke_test
  type: dict
  sample: {"prompt_tokens": 318, "completion_tokens": 64, "total_tokens": 382}
answer_check:
  description:
    - The answer check's verdict - C(mode), C(passed), C(failure) (null, or the message), and C(asked), per question
      asked, its C(question) (a name), C(prompt), C(picture) (what the image shows), C(expected), C(answer),
      C(verdict) (right, wrong, degenerate or no answer) and C(why).
  returned: when smoke_test and the checks passed
  type: dict
  sample:
    mode: known
    passed: true
    failure: null
    asked:
      - question: count-en
        prompt: How many squares are in this picture? Answer with a number.
        picture: 3 blue squares
        expected: 3 (or three)
        answer: "3"
        verdict: right
        why: null
smoke_latency_s:
  description: Seconds the smoke request took.
  returned: when smoke_test
  type: float
  sample: 5.9
error:
  description: What failed, without the container's name, its causes and its log (the first line of C(msg)).
  returned: when the server did not become ready or failed the smoke request
  type: str
  sample: "the image request answered HTTP 500: EngineCore encountered an issue."
causes:
  description: The causes the doctor's log rules find in the container's log, each as its rule's name and meaning.
  returned: when the server did not become ready or failed the smoke request
  type: list
  elements: str
  sample: ["large_image_crash: a large image crashed the 310P engine (aicpu IndexPut, error 507018)"]
logs:
  description:
    - Tail of the container's logs, on failure (empty without C(container)), or, in parentheses, why C(docker logs)
      gave none in the time left.
  returned: when the server did not become ready or failed the smoke request
  type: str
  sample: "ERROR ValueError: Ascend 310P does not support dtype bfloat16"
"""

import re
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.answer_check import (
    CHECKS,
    SMOKE_PROMPT,
    check_answers_of,
    smoke,
)
from ansible_collections.ascend.fleet.plugins.module_utils.deadline import Deadline, DeadlinePassed
from ansible_collections.ascend.fleet.plugins.module_utils.diagnosis import log_causes
from ansible_collections.ascend.fleet.plugins.module_utils.docker_cli import run_docker
from ansible_collections.ascend.fleet.plugins.module_utils.openai_client import (
    ENV_FILE_OPTION,
    Client,
    ClientError,
    key_from_env_file,
    served_models,
)
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import (
    OptionError,
    number_at_least,
    text_given,
    unexpected_failure,
)
from ansible_collections.ascend.fleet.plugins.module_utils.png_images import generated_size

POLL_S = 2
# The share of timeout kept for the tail of the container's log after a failure, and its most: a probe that ran out
# of time waiting for a slow load is the one whose log says most.
LOG_SHARE = 0.1
LOG_SHARE_MOST_S = 10
# The longest one readiness request may take: a server that loads answers them in milliseconds.
HEALTH_TIMEOUT_S = 5
MODELS_TIMEOUT_S = 10
# Docker's own rule for container names; a container id matches it too.
CONTAINER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")
TIMEOUT_FIX = ("a model still loading, or a slow answer, needs a longer timeout (vllm_server_ready_timeout); a Docker "
               "call that hangs needs its daemon looked at (systemctl status docker, journalctl -u docker)")


class ProbeFailed(Exception):
    """The server did not become ready or failed the smoke request; result: what to return with the message."""

    def __init__(self, message, **result):
        super(ProbeFailed, self).__init__(message)
        self.result = result


def container_state(docker, name, deadline):
    """(running, restarts, status text) of a container, or (False, 0, reason) when it does not exist.

    restarts counts the restarts Docker's restart policy made: a container that crashes while loading is started
    again at once and may look running whenever it is looked at.
    """
    code, out, err = run_docker(docker, "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}} "
                                "{{.RestartCount}}", "--", name, deadline=deadline)
    if code is None:
        return False, 0, "`docker inspect` of container %s %s: the Docker daemon does not answer" % (name, err)
    if code != 0:
        return False, 0, "container %s does not exist" % name
    status, exit_code, restarts = (out.split() + ["?", "?", "0"])[:3]
    restarts = int(restarts) if restarts.isdigit() else 0
    return status == "running", restarts, "container %s is %s (exit code %s)" % (name, status, exit_code)


def container_logs(docker, name, lines, deadline):
    """The tail of the container's log; what stood in its way when it cannot be read in the time left."""
    try:
        code, out, err = run_docker(docker, "logs", "--tail", str(lines), "--", name, deadline=deadline)
    except DeadlinePassed as passed:
        return "(no log: %s)" % passed
    if code is None:
        return "(no log: `docker logs` %s)" % err
    return (out + err).strip()


def wait_ready(client, params, deadline):
    """Seconds until ready and the served names; raises RuntimeError with the reason."""
    started = time.time()
    last = "no answer yet"
    restarts_before = None
    while True:
        try:
            if params["container"]:
                running, restarts, state = container_state(params["docker"], params["container"], deadline)
                if not running:
                    raise RuntimeError("%s before it became ready (last check: %s). Fix: the log below says why it "
                                       "stopped" % (state, last))
                restarts_before = restarts if restarts_before is None else restarts_before
                if restarts > restarts_before:
                    raise RuntimeError("container %s crashed and was restarted by Docker %d time(s) while loading: "
                                       "it is in a restart loop (last check: %s). Fix: the log below says why it "
                                       "stopped" % (params["container"], restarts - restarts_before, last))
            status, health = request(client, deadline, "GET", "/health", HEALTH_TIMEOUT_S)
            if status == 200:
                status, models = request(client, deadline, "GET", "/v1/models", MODELS_TIMEOUT_S)
                names = served_models(models)
                if status == 200 and params["model"] in names:
                    return time.time() - started, names
                if status in (401, 403):
                    # vLLM checks the key on /v1/* only: /health answered, so waiting longer cannot help.
                    raise RuntimeError("the server refuses the API key: /v1/models answered %d %s. Fix: the key "
                                       "given (api_key, or env_file's VLLM_API_KEY line; the roles' is "
                                       "fleet_api_key) must be the one the server was started with (its --api-key "
                                       "or VLLM_API_KEY, in the instance's env file); deploy again to start the "
                                       "instance with the fleet's key"
                                       % (status, str(models)[:200]))
                # What a server lists is quoted in part: a huge answer is no message.
                listed = str(names or models)[:300]
                last = "/v1/models answered %s, listing %s, not %s" % (status, listed, params["model"])
            else:
                last = "/health answered %s" % (status if status is not None else health)
            deadline.check("the server to become ready")
        except DeadlinePassed as passed:
            raise RuntimeError("not ready after %ss: the time ran out while waiting for %s (last check: %s). Fix: "
                               "check that model names the served model name and base_url the server; %s"
                               % (params["timeout"], passed.waiting_on, last, TIMEOUT_FIX)) from None
        deadline.sleep(POLL_S)


def request(client, deadline, method, path, most):
    """(status, answer) of one request within what is left of the deadline, at most `most` seconds; DeadlinePassed
    when the deadline cut it."""
    waiting_on = "%s %s" % (method, path)
    status, answer = client.call(method, path, timeout=deadline.allow(waiting_on, most))
    if status is None:
        deadline.check(waiting_on)
    return status, answer


def check_options(params):
    """The smoke image's (width, height), once every option is one the probe can use."""
    text_given(params, "model", "the served model name that /v1/models lists, such as Qwen3-VL-8B-Instruct",
               "set vllm_server_served_name")
    number_at_least(params, "timeout", 1, "give the seconds the server may take to load (vllm_server_ready_timeout)")
    number_at_least(params, "log_lines", 0, "give how many lines of docker logs to show (vllm_server_log_lines)")
    number_at_least(params, "max_tokens", 1, "set vllm_server_smoke_max_tokens to 1 or more")
    number_at_least(params, "request_timeout", 1, "give the seconds the smoke request may take")
    if params["container"]:
        if not CONTAINER_NAME.fullmatch(params["container"]):
            raise OptionError("container %r: expected a container name or id ([a-zA-Z0-9][a-zA-Z0-9_.-]+, as docker "
                              "names them). Fix: give the name of the container running the server, or leave "
                              "container unset" % params["container"])
        text_given(params, "docker", "the Docker CLI to run, such as docker or /usr/bin/docker",
                   "set fleet_docker_bin, or leave container unset")
    elif params["required_files"]:
        raise OptionError("required_files: needs container, the container to look in. Fix: give container, or "
                          "leave required_files empty")
    bad = [path for path in params["required_files"] if not path.startswith("/")]
    if bad:
        raise OptionError("required_files: %r is not an absolute path: expected paths inside the container, such as "
                          "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2. Fix: give the full path (vllm_server_"
                          "jemalloc_path)" % bad[0])
    try:
        return generated_size(params["image_size"])
    except ValueError as error:
        raise OptionError("image_size: %s. Fix: give WIDTHxHEIGHT, such as 640x480 (vllm_server_smoke_image_size)"
                          % error) from None


def check_required_files(params, deadline):
    """Each of required_files is in the container; RuntimeError naming the first that is not."""
    for path in params["required_files"]:
        code, out, err = run_docker(params["docker"], "exec", "--", params["container"], "test", "-e", path,
                                    deadline=deadline)
        if code is None:
            raise RuntimeError("`docker exec -- %s test -e %s` %s: the Docker daemon or the container does not "
                               "answer. Fix: check the daemon (systemctl status docker) and the container's log "
                               "below" % (params["container"], path, err))
        if code != 0:
            raise RuntimeError("%s is not in the container (`test -e` exited %s%s): it serves without it. Fix: give "
                               "the path the image has (for LD_PRELOAD: vllm_server_jemalloc_path), or stop asking "
                               "for it (vllm_server_preload_jemalloc: false)"
                               % (path, code, ": " + (err or out).strip() if (err or out).strip() else ""))


def probe(client, params, size):
    """The module's result once the server is ready (and answered the smoke request and the answer check);
    ProbeFailed otherwise, with the tail of the container's log."""
    result = {"changed": False}
    deadline = Deadline(params["timeout"])
    # The waits end early enough to leave the log tail its share of the time.
    waits = deadline.before(min(params["timeout"] * LOG_SHARE, LOG_SHARE_MOST_S)) if params["container"] else deadline
    try:
        try:
            ready_after, names = wait_ready(client, params, waits)
            result.update(ready_after_s=round(ready_after, 3), models=names)
            if params["smoke_test"]:
                check_required_files(params, waits)
                result.update(smoke(client, params, size, waits))
                result["answer_check"] = check_answers_of(client, params, result["answer"], waits)
        except DeadlinePassed as passed:
            raise RuntimeError("ready, but the time ran out (timeout: %ss, the whole probe) while waiting for %s. "
                               "Fix: %s" % (params["timeout"], passed.waiting_on, TIMEOUT_FIX)) from None
    except RuntimeError as error:
        logs = container_logs(params["docker"], params["container"], params["log_lines"], deadline) \
            if params["container"] else ""
        where = params["container"] or params["base_url"]
        message = "%s: %s" % (where, error)
        causes = log_causes(logs.splitlines())
        if causes:
            message += "\nCause, from the log: %s" % "; ".join(causes)
        if logs:
            message += "\n--- last %d lines of docker logs %s ---\n%s" % (params["log_lines"], where, logs)
        raise ProbeFailed(message, logs=logs, error=str(error), causes=causes, **result) from None
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            base_url=dict(type="str", default="http://127.0.0.1:8000"),
            model=dict(type="str", required=True),
            api_key=dict(type="str", no_log=True),
            env_file=ENV_FILE_OPTION,
            timeout=dict(type="int", default=900),
            container=dict(type="str"),
            docker=dict(type="str", default="docker"),
            log_lines=dict(type="int", default=40),
            smoke_test=dict(type="bool", default=True),
            prompt=dict(type="str", default=SMOKE_PROMPT),
            image_size=dict(type="str", default="640x480"),
            max_tokens=dict(type="int", default=64, no_log=False),
            request_timeout=dict(type="int", default=300),
            required_files=dict(type="list", elements="str", default=[]),
            answer_check=dict(type="str", default="known", choices=list(CHECKS)),
        ),
        supports_check_mode=True,
        mutually_exclusive=[("api_key", "env_file")],
    )
    params = module.params
    try:
        size = check_options(params)
        key = params["api_key"] or key_from_env_file(params["env_file"])
        if key:
            # A key read from env_file is as secret as api_key: masked in everything returned, should the
            # server echo it back in an answer, an error or its log.
            module.no_log_values.add(key)
        result = probe(Client(params["base_url"], key), params, size)
    except ProbeFailed as error:
        module.fail_json(msg=str(error), **error.result)
    except (OptionError, ClientError) as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # anything unforeseen still names the server, not a traceback
        module.fail_json(msg=unexpected_failure("probing %s" % params["base_url"], error))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
