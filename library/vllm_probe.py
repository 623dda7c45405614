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
  - Only reads; supports check mode.
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
    description: Width and height of the generated image, C(WxH).
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
notes:
  - Supports check mode.
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
  returned: success
  type: float
  sample: 142.3
models:
  description: Model names C(/v1/models) listed.
  returned: success
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
  description: Tail of the container's logs, on failure.
  returned: failure
  type: str
  sample: "ERROR ValueError: Ascend 310P does not support dtype bfloat16"
"""

import json
import re
import subprocess
import time
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

from ansible.module_utils.ascend_images import data_url, png_image
from ansible.module_utils.basic import AnsibleModule

POLL_S = 2


def http(method, url, api_key=None, body=None, timeout=10):
    """(status, parsed JSON or text) of one request; (None, reason) when there is no answer."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    data = json.dumps(body).encode("utf-8") if body is not None else None
    try:
        response = urlopen(Request(url, data=data, headers=headers, method=method), timeout=timeout)
        status, text = response.status, response.read().decode("utf-8", "replace")
    except HTTPError as error:
        status, text = error.code, error.read().decode("utf-8", "replace")
    except (URLError, OSError) as error:
        return None, str(getattr(error, "reason", error))
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


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


def wait_ready(params):
    """Seconds until ready and the served names; raises RuntimeError with the reason."""
    started = time.time()
    base = params["base_url"].rstrip("/")
    last = "no answer yet"
    while True:
        if params["container"]:
            running, state = container_state(params["docker"], params["container"])
            if not running:
                raise RuntimeError("%s before it became ready (last check: %s)" % (state, last))
        status, health = http("GET", base + "/health", timeout=5)
        if status == 200:
            status, models = http("GET", base + "/v1/models", params["api_key"], timeout=10)
            names = [entry.get("id") for entry in models.get("data", [])] if isinstance(models, dict) else []
            if status == 200 and params["model"] in names:
                return time.time() - started, names
            last = ("/v1/models answered %s, listing %s, not %s" % (status, names or models, params["model"]))
        else:
            last = "/health answered %s" % (status if status is not None else health)
        if time.time() - started > params["timeout"]:
            raise RuntimeError("not ready after %ss: %s" % (params["timeout"], last))
        time.sleep(POLL_S)


def smoke(params):
    width, height = (int(side) for side in re.match(r"^(\d+)x(\d+)$", params["image_size"]).groups())
    body = {"model": params["model"], "max_tokens": params["max_tokens"], "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": data_url(png_image(width, height))}},
        {"type": "text", "text": params["prompt"]}]}]}
    started = time.time()
    status, reply = http("POST", params["base_url"].rstrip("/") + "/v1/chat/completions", params["api_key"], body,
                         timeout=params["request_timeout"])
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
    if not re.match(r"^\d+x\d+$", params["image_size"]):
        module.fail_json(msg="image_size %r: expected WIDTHxHEIGHT, for example 640x480" % params["image_size"])
    result = {"changed": False}
    try:
        ready_after, names = wait_ready(params)
        result.update(ready_after_s=round(ready_after, 3), models=names)
        if params["smoke_test"]:
            result.update(smoke(params))
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
