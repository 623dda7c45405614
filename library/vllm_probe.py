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
  - While waiting, watches the container (when C(container) is given) and gives up at once when it stopped,
    returning the tail of its C(docker logs); a model load on 310P takes minutes, a crash should not.
  - Then sends the request an operator sends by hand - one generated image plus a text prompt - and requires
    a non-empty answer and a C(usage) block. The image is made on the host (PNG, standard library), so hosts
    without internet can be probed.
  - Only reads.
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
  timeout:
    description: Seconds to wait for readiness.
    type: int
    default: 900
  container:
    description: Docker container running the server, watched while waiting and whose logs a failure shows.
    type: str
  docker:
    description: Docker CLI to use for C(container).
    type: str
    default: docker
  log_lines:
    description: Lines of C(docker logs) to return on failure.
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
    description: Width and height of the generated image, C(WIDTHxHEIGHT).
    type: str
    default: 640x480
  max_tokens:
    description: C(max_tokens) of the smoke request.
    type: int
    default: 64
  request_timeout:
    description: Seconds to wait for the smoke answer.
    type: int
    default: 300
attributes:
  check_mode:
    description: Can run in check mode and probe as without it.
    support: full
    details: It only reads - the readiness checks and the smoke request change nothing on the host.
  diff_mode:
    description: Would show what the module changed.
    support: none
    details: It only reads, so there is never a change to show.
  platform:
    description: Target OS families it runs on.
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: Wait for the instance and ask it about an image
  vllm_probe:
    base_url: http://127.0.0.1:8000
    model: Qwen3-VL-8B-Instruct
    container: vllm-ascend
    timeout: 1200
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
smoke_latency_s:
  description: Seconds the smoke request took.
  returned: when smoke_test
  type: float
  sample: 5.9
logs:
  description: Tail of the container's logs, on failure (empty without C(container)).
  returned: failure
  type: str
  sample: "ERROR ValueError: Ascend 310P does not support dtype bfloat16"
"""

import json
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.openai_client import Client, ClientError, ImageChat, image_data_url, served_models
from ansible.module_utils.png_images import parse_size, png_image

POLL_S = 2


def container_state(docker, name):
    """(running, status text) of a container, or (False, reason) when it does not exist."""
    result = subprocess.run([docker, "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", name],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    if result.returncode != 0:
        return False, "container %s does not exist" % name
    status, _space, code = result.stdout.strip().partition(" ")
    return status == "running", "container %s is %s (exit code %s)" % (name, status, code)


def container_logs(docker, name, lines):
    result = subprocess.run([docker, "logs", "--tail", str(lines), name], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    return result.stdout.strip()


def wait_ready(client, params):
    """Seconds until ready and the served names; raises RuntimeError with the reason."""
    started = time.time()
    last = "no answer yet"
    while True:
        if params["container"]:
            running, state = container_state(params["docker"], params["container"])
            if not running:
                raise RuntimeError("%s before it became ready (last check: %s)" % (state, last))
        status, health = client.call("GET", "/health", timeout=5)
        if status == 200:
            status, models = client.call("GET", "/v1/models", timeout=10)
            names = served_models(models)
            if status == 200 and params["model"] in names:
                return time.time() - started, names
            last = ("/v1/models answered %s, listing %s, not %s" % (status, names or models, params["model"]))
        else:
            last = "/health answered %s" % (status if status is not None else health)
        if time.time() - started > params["timeout"]:
            raise RuntimeError("not ready after %ss: %s" % (params["timeout"], last))
        time.sleep(POLL_S)


def smoke(client, params, size):
    body = ImageChat(params["model"], params["prompt"], params["max_tokens"]).body(image_data_url(png_image(*size)))
    started = time.time()
    status, reply = client.chat(body, timeout=params["request_timeout"])
    elapsed = time.time() - started
    if status != 200 or not isinstance(reply, dict):
        raise RuntimeError("the image request answered %s: %s" % (status, str(reply)[:500]))
    choices = reply.get("choices") or [{}]
    answer = ((choices[0].get("message") or {}).get("content") or "").strip()
    if not answer:
        raise RuntimeError("the image request got an empty answer: %s" % json.dumps(reply)[:500])
    if not isinstance(reply.get("usage"), dict):
        raise RuntimeError("the image request's answer has no usage block")
    return {"answer": answer[:200], "usage": reply["usage"], "smoke_latency_s": round(elapsed, 3)}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            base_url=dict(type="str", default="http://127.0.0.1:8000"),
            model=dict(type="str", required=True),
            api_key=dict(type="str", no_log=True),
            timeout=dict(type="int", default=900),
            container=dict(type="str"),
            docker=dict(type="str", default="docker"),
            log_lines=dict(type="int", default=40),
            smoke_test=dict(type="bool", default=True),
            prompt=dict(type="str", default="请描述一下图片"),
            image_size=dict(type="str", default="640x480"),
            max_tokens=dict(type="int", default=64, no_log=False),
            request_timeout=dict(type="int", default=300),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        size = parse_size(params["image_size"])
    except ValueError as error:
        module.fail_json(msg="image_size: %s" % error)
    try:
        client = Client(params["base_url"], params["api_key"])
    except ClientError as error:
        module.fail_json(msg=str(error))
    result = {"changed": False}
    try:
        ready_after, names = wait_ready(client, params)
        result.update(ready_after_s=round(ready_after, 3), models=names)
        if params["smoke_test"]:
            result.update(smoke(client, params, size))
    except RuntimeError as error:
        logs = container_logs(params["docker"], params["container"], params["log_lines"]) \
            if params["container"] else ""
        where = params["container"] or params["base_url"]
        message = "%s: %s" % (where, error)
        if logs:
            message += "\n--- last %d lines of docker logs %s ---\n%s" % (params["log_lines"], where, logs)
        module.fail_json(msg=message, logs=logs, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
