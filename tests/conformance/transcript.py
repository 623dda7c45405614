"""A server's answer to one case, reduced to what a client can rely on, and the differences of two of them.

Kept as they are: status, content type, JSON keys and their kinds, error messages, types, params and codes,
the order and shape of stream events, finish reasons, usage that does not depend on the tokenizer. Replaced by
placeholders: ids, times, generated text, text-token counts and token ids (real vLLM's tokenizer here is a
byte-level one, not Qwen's). Image tokens are kept as prompt tokens minus the server's text-only baseline. A
stream's timing order is kept as one fact: whether the role chunk comes with the first token (vLLM sends it
when the first token is made) or before it.
"""
import http.client
import json
import re
import time

from . import cases as conformance_cases

# A sample line of vLLM's /metrics: name, labels, value.
METRIC_LINE = re.compile(r"^(vllm:[a-z_:]+)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# Labels whose values name this run (the model's path or name) rather than the series.
RUN_LABELS = ("model_name",)
TEXT_KEYS = ("content", "reasoning_content")
TIME_KEYS = ("created",)
# Counts of the tokenizer (text) or of the engine's natural answer length: they differ between any two servers.
COUNT_KEYS = ("prompt_tokens", "total_tokens", "completion_tokens", "count")
# Token ids the tokenizer makes (/tokenize's answer): a list whose length is a count of text tokens too.
TOKEN_ID_KEYS = ("tokens",)
# vLLM quotes the prompt's length, text tokens included, when it refuses a prompt as too long.
INPUT_LENGTH = re.compile(r"Input length \((\d+)\)")
# Validation errors name the file of vLLM's code they were raised in, wherever it is installed.
INSTALL_PATH = re.compile(r'File "[^"]*/site-packages/')


def send(base_url, case, timeout=120):
    """(status, headers, body bytes or [(seconds since sent, data line)]) of one case."""
    host, port = base_url.split("//", 1)[1].rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        started = time.monotonic()
        connection.request(case.method, case.path, body=case.body, headers=case.headers())
        response = connection.getresponse()
        headers = {name.lower(): value for name, value in response.getheaders()}
        if headers.get("content-type", "").startswith("text/event-stream"):
            events = []
            for line in response:
                line = line.strip()
                if line:
                    events.append((time.monotonic() - started, line.decode("utf-8")))
            return response.status, headers, events
        return response.status, headers, response.read()
    finally:
        connection.close()


def placeholder(value):
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return "<number>"
    if isinstance(value, str):
        return "<text>" if value else ""
    return value


def normalise(value, natural=False, key=None):
    """JSON with ids, times, generated text, token counts and token ids replaced; every key and other value kept.
    natural: the answer ends where the engine stops (no ignore_eos), so its finish reason is the engine's."""
    if key in TOKEN_ID_KEYS and isinstance(value, list):
        return "<token ids>"
    if isinstance(value, dict):
        return {name: normalise(item, natural, name) for name, item in value.items()}
    if isinstance(value, list):
        return [normalise(item, natural, key) for item in value]
    if key == "id" or key in TEXT_KEYS or key in TIME_KEYS or key in COUNT_KEYS or key == "root":
        return placeholder(value)
    if key == "finish_reason" and natural and value in ("stop", "length"):
        return "<the engine's>"
    if key == "message" and isinstance(value, str):
        return INSTALL_PATH.sub('File "<site-packages>/', value)
    return value


def usage_of(events):
    for event in events:
        if isinstance(event, dict) and event.get("usage"):
            return event["usage"]
    return None


def metrics(text):
    """The vllm: series as name{labels}, labels naming the run replaced, sorted; and the running gauge."""
    series, running = set(), None
    for line in text.splitlines():
        match = METRIC_LINE.match(line)
        if not match:
            continue
        name, labels, value = match.groups()
        pairs = sorted((label, "<run>" if label in RUN_LABELS else text_value)
                       for label, text_value in LABEL.findall(labels or ""))
        series.add("%s{%s}" % (name, ",".join('%s="%s"' % pair for pair in pairs)))
        if name == "vllm:num_requests_running":
            running = float(value)
    return {"series": sorted(series), "num_requests_running": running}


def transcript(base_url, case):
    """The case's answer as a JSON-able dict (see the module's docstring)."""
    status, headers, body = send(base_url, case)
    record = {"status": status, "content_type": headers.get("content-type")}
    natural = not case.ignores_eos()
    if isinstance(body, list):
        events, raw = [], []
        for seconds, line in body:
            payload = line[len("data:"):].strip() if line.startswith("data:") else line
            parsed = payload if payload == "[DONE]" else json.loads(payload)
            raw.append((seconds, parsed))
            events.append(normalise(parsed, natural))
        record["events"] = events
        record["usage"] = usage_of(parsed for _, parsed in raw)
        record["timing"] = stream_timing(raw)
    elif case.path == "/metrics":
        record["metrics"] = metrics(body.decode("utf-8"))
    else:
        text = body.decode("utf-8")
        try:
            parsed = json.loads(text)
        except ValueError:
            record["text"] = text
        else:
            record["json"] = normalise(parsed, natural)
            if isinstance(parsed, dict) and parsed.get("usage"):
                record["usage"] = parsed["usage"]
            if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
                record["error_message"] = parsed["error"].get("message")
    return record


def stream_timing(raw):
    """When the role chunk came, as a share of when the first content came: about 1 when they come together."""
    role = first = None
    for seconds, event in raw:
        if not isinstance(event, dict):
            continue
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            if role is None and "role" in delta:
                role = seconds
            if first is None and delta.get("content"):
                first = seconds
    if role is None or not first:
        return None
    return {"role_chunk_with_first_token": role >= 0.5 * first}


def finish(transcripts):
    """Usage reduced to what does not depend on the tokenizer, once a server's cases are all recorded: image
    tokens from the server's text-only baseline, completion tokens where ignore_eos fixes them."""
    baselines = {server: transcripts[name]["usage"]["prompt_tokens"]
                 for server, name in conformance_cases.BASELINES.items() if name in transcripts}
    for name, record in transcripts.items():
        case = CASES[name]
        usage, message = record.pop("usage", None), record.pop("error_message", None)
        length = INPUT_LENGTH.search(message or "")
        if case.image and length:
            # The image's tokens as the refusal counts them: the quoted length less the text's.
            record["image_tokens"] = int(length.group(1)) - baselines[case.server]
            record["json"]["error"]["message"] = INPUT_LENGTH.sub("Input length (<text + image tokens>)", message)
        if usage is None:
            continue
        if case.ignores_eos():
            record["completion_tokens"] = usage.get("completion_tokens")
        if case.image:
            record["image_tokens"] = usage["prompt_tokens"] - baselines[case.server]
    return transcripts


CASES = {case.name: case for case in conformance_cases.cases()}


def record_all(base_urls):
    """Every case against the servers named in base_urls ({server: url}); {case name: transcript}."""
    found = {}
    for case in CASES.values():
        found[case.name] = transcript(base_urls[case.server], case)
    return finish(found)


def differences(expected, actual, path=""):
    """Where two transcripts (or parts) differ, as readable lines; empty when they agree. A /metrics answer
    agrees when every series it has is one of the expected (vLLM has hundreds; the stand-in the few it counts)."""
    if path.endswith("metrics.series"):
        return ["%s: %s is not one of vLLM's series" % (path, series) for series in actual if series not in expected]
    if isinstance(expected, dict) and isinstance(actual, dict):
        lines = []
        for key in sorted(set(expected) | set(actual)):
            where = "%s.%s" % (path, key) if path else key
            if key not in actual:
                lines.append("%s: missing (expected %s)" % (where, json.dumps(expected[key], ensure_ascii=False)))
            elif key not in expected:
                lines.append("%s: not expected (got %s)" % (where, json.dumps(actual[key], ensure_ascii=False)))
            else:
                lines += differences(expected[key], actual[key], where)
        return lines
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return ["%s: %d items, expected %d: %s" % (path, len(actual), len(expected),
                                                       json.dumps(actual, ensure_ascii=False)[:600])]
        lines = []
        for index, (want, got) in enumerate(zip(expected, actual)):
            lines += differences(want, got, "%s[%d]" % (path, index))
        return lines
    if expected != actual:
        return ["%s: %s, expected %s" % (path, json.dumps(actual, ensure_ascii=False),
                                         json.dumps(expected, ensure_ascii=False))]
    return []
