"""What is sent to both servers: the project's own requests (the probe's and the benchmark's bodies, made by the
modules' code), every error case the roles and the benchmark meet, with and without an API key.

Four servers, each started the same way as real vLLM and as the stand-in:
- ``plain``: the seed's flags, no key, no pixel cap;
- ``guarded``: an API key and the pixel cap as the vllm_server role renders it (vllm_server_max_pixels);
- ``lone_cap``: ``{"max_pixels": N}`` alone, which vLLM 0.18 with transformers 4.57 ignores (its fast image
  processor takes a cap only with min_pixels beside it);
- ``faulty``: its first two chat requests end in an engine error after 3 tokens, as a KV-load failure does.

Cases run in order, one at a time, each server's ``metrics_idle`` last (after every request has ended).
"""
import importlib
import json

import yaml

from ansible_collections.ascend.fleet.plugins.module_utils import openai_client, png_images

from .rendered import pixel_cap_flags

MODEL = "Qwen3-VL-8B-Instruct"
API_KEY = "conformance-key"
MAX_MODEL_LEN = 8192
# vllm_server_max_pixels' default: 1920x1080 comes to 1224 image tokens instead of 2042.
MAX_PIXELS = 1310720

SERVERS = {
    "plain": {"args": [], "faults": {}},
    "guarded": {"args": ["--api-key", API_KEY] + pixel_cap_flags(MAX_PIXELS), "faults": {}},
    "lone_cap": {"args": ["--mm-processor-kwargs", json.dumps({"max_pixels": MAX_PIXELS})], "faults": {}},
    "faulty": {"args": [], "faults": {"error": [1, 2]}},
}



MODULES = "ansible_collections.ascend.fleet.plugins.modules."

def module_default(module, option):
    """An option's default as the module documents it (what the roles send unless told otherwise)."""
    options = yaml.safe_load(importlib.import_module(MODULES + module).DOCUMENTATION)["options"]
    return options[option]["default"]


def image_url(width, height, seed=0):
    return openai_client.image_data_url(png_images.png_image(width, height, seed))


def probe_body(width=640, height=480):
    """vllm_probe's smoke request: whole answer, natural end."""
    chat = openai_client.ImageChat(MODEL, module_default("vllm_probe", "prompt"),
                                   module_default("vllm_probe", "max_tokens"))
    return chat.body(image_url(width, height))


def bench_body(width, height, max_tokens=4, model=MODEL):
    """vllm_benchmark's request: streamed, usage included, ignore_eos so every answer is max_tokens long."""
    chat = openai_client.ImageChat(model, module_default("vllm_benchmark", "prompt"), max_tokens, stream=True,
                                   ignore_eos=True)
    return chat.body(image_url(width, height))


def text_body(max_tokens=4, stream=True):
    """The benchmark's prompt without an image: the baseline that image-token counts are measured from."""
    body = {"messages": [{"role": "user", "content": [
        {"type": "text", "text": module_default("vllm_benchmark", "prompt")}]}],
        "model": MODEL, "max_tokens": max_tokens, "ignore_eos": True}
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    return json.dumps(body, ensure_ascii=False).encode()


def tokenize_body():
    """/tokenize's chat form: the benchmark's prompt as a chat, no image."""
    return json.dumps({"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "text", "text": module_default("vllm_benchmark", "prompt")}]}]}, ensure_ascii=False).encode()


def chat_json(**fields):
    body = {"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": image_url(640, 480)}},
        {"type": "text", "text": module_default("vllm_benchmark", "prompt")}]}]}
    body.update(fields)
    return json.dumps(body, ensure_ascii=False).encode()


class Case:
    """One request. ``image`` marks a request whose image-token count is compared (prompt tokens minus the
    server's text-only baseline); ``timing`` one whose stream's timing order is compared."""

    def __init__(self, name, server, method, path, body=None, key=None, image=None, timing=False, about=""):
        self.name, self.server, self.method, self.path = name, server, method, path
        self.body, self.key, self.image, self.timing, self.about = body, key, image, timing, about

    def ignores_eos(self):
        """Whether the answer's length is max_tokens on any server (else it ends where the engine stops)."""
        try:
            return bool(json.loads(self.body).get("ignore_eos"))
        except (TypeError, ValueError, AttributeError):
            return False

    def headers(self):
        headers = {"Content-Type": "application/json"} if self.body is not None else {}
        if self.key:
            headers["Authorization"] = "Bearer " + self.key
        return headers


def cases():
    guarded = {"server": "guarded", "key": API_KEY}
    found = [
        Case("health", "plain", "GET", "/health"),
        Case("models", "plain", "GET", "/v1/models", about="the probe's first question"),
        Case("version", "plain", "GET", "/version"),
        Case("not_found", "plain", "GET", "/v1/nothing-here"),
        Case("text_only", "plain", "POST", "/v1/chat/completions", text_body()),
        Case("probe", "plain", "POST", "/v1/chat/completions", probe_body(), about="vllm_probe's smoke request"),
    ]
    for width, height in ((640, 480), (1280, 720), (1920, 1080)):
        found.append(Case("bench_%dx%d" % (width, height), "plain", "POST", "/v1/chat/completions",
                          bench_body(width, height), image=(width, height), timing=True,
                          about="vllm_benchmark's request"))
    found += [
        # 1: the prompt and max_tokens together above max_model_len: vLLM lowers max_tokens and answers.
        Case("context_over", "plain", "POST", "/v1/chat/completions", chat_json(max_tokens=8000),
             about="prompt + max_tokens > max_model_len"),
        # 2: max_tokens alone above it, and a prompt alone too long (3008x3008 uncapped: 8838 image tokens).
        Case("max_tokens_over", "plain", "POST", "/v1/chat/completions", chat_json(max_tokens=MAX_MODEL_LEN + 1)),
        Case("prompt_too_long", "plain", "POST", "/v1/chat/completions", bench_body(3008, 3008), image=(3008, 3008)),
        Case("max_tokens_zero", "plain", "POST", "/v1/chat/completions", chat_json(max_tokens=0)),
        # 5: error bodies.
        Case("unknown_model", "plain", "POST", "/v1/chat/completions", bench_body(64, 64, model="no-such-model")),
        Case("bad_image", "plain", "POST", "/v1/chat/completions", json.dumps({
            "model": MODEL, "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,bm90IGFuIGltYWdl"}},
                {"type": "text", "text": "?"}]}]}).encode()),
        Case("bad_json", "plain", "POST", "/v1/chat/completions", b"{not json"),
        Case("no_messages", "plain", "POST", "/v1/chat/completions", json.dumps({"model": MODEL}).encode()),
        Case("metrics_idle", "plain", "GET", "/metrics", about="after every request ended"),
        # An API key: /v1 needs it, /health and /metrics do not.
        Case("models_no_key", "guarded", "GET", "/v1/models"),
        Case("models_wrong_key", "guarded", "GET", "/v1/models", key="not-the-key"),
        Case("chat_no_key", "guarded", "POST", "/v1/chat/completions", bench_body(64, 64)),
        Case("health_no_key", "guarded", "GET", "/health"),
        Case("models_key", "guarded", "GET", "/v1/models", key=API_KEY),
        Case("text_only_key", "guarded", "POST", "/v1/chat/completions", text_body(), key=API_KEY),
        Case("probe_key", "guarded", "POST", "/v1/chat/completions", probe_body(), key=API_KEY),
        Case("bench_1920x1080_capped", body=bench_body(1920, 1080), method="POST", path="/v1/chat/completions",
             image=(1920, 1080), timing=True, about="max_pixels 1310720", **guarded),
        Case("bench_3008x3008_capped", body=bench_body(3008, 3008), method="POST", path="/v1/chat/completions",
             image=(3008, 3008), **guarded),
        # ... and only /v1: SageMaker's /invocations answers a chat body as /v1/chat/completions would, and
        # /tokenize answers, both without the key (what the instance firewall is for).
        Case("invocations_no_key", "guarded", "POST", "/invocations", probe_body(),
             about="a chat body without the key: answered"),
        Case("tokenize_no_key", "guarded", "POST", "/tokenize", tokenize_body(), about="without the key: answered"),
        Case("metrics_no_key", "guarded", "GET", "/metrics"),
        Case("text_only_lone_cap", "lone_cap", "POST", "/v1/chat/completions", text_body()),
        Case("bench_1920x1080_lone_cap", "lone_cap", "POST", "/v1/chat/completions", bench_body(1920, 1080),
             image=(1920, 1080)),
        # 4: the engine fails mid-request.
        Case("engine_error_stream", "faulty", "POST", "/v1/chat/completions", bench_body(640, 480, max_tokens=8)),
        Case("engine_error_whole", "faulty", "POST", "/v1/chat/completions", chat_json(max_tokens=8,
                                                                                       ignore_eos=True)),
        Case("metrics_after_errors", "faulty", "GET", "/metrics"),
    ]
    return found


# The text-only case that image-token counts on a server are measured from.
BASELINES = {"plain": "text_only", "guarded": "text_only_key", "lone_cap": "text_only_lone_cap"}
