# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the vllm_benchmark module does (library/vllm_benchmark.py holds its documentation and main()): the load
test of an OpenAI-compatible endpoint over a matrix of image sizes, output lengths and concurrencies, or a search
for the largest concurrency that meets an SLO; its plan and estimate in check mode, every request recorded as it
ends, a cut run resumed. ARGUMENT_SPEC, the module's options, is here for the tests and callers that build
parameters the way the module does."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import functools
import math
import os
import random
import sys
import threading
import time

from ansible_collections.ascend.fleet.plugins.module_utils.answer_check import CHECKS, asker, check_answers
from ansible_collections.ascend.fleet.plugins.module_utils.bench_record import (
    GROUP_FIELDS,
    PROGRESS_EVERY_S,
    ProgressWriter,
    answer_check_record,
    append_result,
    group_key,
    hold_results,
    max_in_flight,
    read_probes,
    read_results,
    summarise,
    summary,
)
from ansible_collections.ascend.fleet.plugins.module_utils.capacity_search import (
    ConcurrencySearch,
    check_slo,
    judge,
    probe_requests,
)
from ansible_collections.ascend.fleet.plugins.module_utils.openai_client import (
    ENV_FILE_OPTION,
    Client,
    ImageChat,
    StreamResult,
    image_data_url,
    key_from_env_file,
)
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import (
    OptionError,
    number_above,
    number_at_least,
)
from ansible_collections.ascend.fleet.plugins.module_utils.png_images import (
    MAX_SIDE,
    ImageSeries,
    generated_size,
    parse_size,
)

# Decode time per output token on the seed's hardware, a 310P3 pair with TP 2 (about 23 s for a 256-token answer):
# check mode's estimate unless estimate_seconds_per_token says otherwise.
SEED_SECONDS_PER_TOKEN = 0.09

ARGUMENT_SPEC = dict(
    base_url=dict(type="str", default="http://127.0.0.1:8000"),
    model=dict(type="str"),
    api_key=dict(type="str", no_log=True),
    env_file=ENV_FILE_OPTION,
    image_sizes=dict(type="list", elements="str", default=["1920x1080", "1280x720", "640x480"]),
    max_tokens=dict(type="list", elements="int", default=[256, 64, 32], no_log=False),
    concurrency=dict(type="list", elements="int", default=[1, 8, 16, 32, 64]),
    requests_per_group=dict(type="int", default=64),
    prompt=dict(type="str", default="描述一下图片"),
    ignore_eos=dict(type="bool", default=True),
    unique_images=dict(type="bool", default=True),
    image_files=dict(type="list", elements="path", default=[]),
    warmup_requests=dict(type="int", default=2),
    request_timeout_s=dict(type="float", default=600),
    new_group_deadline_s=dict(type="float", default=0),
    error_threshold=dict(type="float", default=0.05),
    results_file=dict(type="path"),
    resume=dict(type="bool", default=False),
    estimate_seconds_per_token=dict(type="float", default=SEED_SECONDS_PER_TOKEN, no_log=False),
    answer_check=dict(type="str", default="known", choices=list(CHECKS)),
    search=dict(type="str", default="none", choices=["none", "concurrency"]),
    slo=dict(type="dict"),
    search_tolerance=dict(type="int", default=1),
    search_confidence=dict(type="float", default=0.9),
    search_probe_requests=dict(type="int", default=16),
    open_loop_requests=dict(type="int", default=32),
    open_loop_burstiness=dict(type="float", default=1.0),
)
# The warm-up's answers are short: it only has to get the server past its first, slow requests.
WARMUP_MAX_TOKENS = 16


# Every error of the load test's own is an option's value it cannot use (a model the server does not serve
# included); an endpoint it cannot reach is a ClientError.
BenchmarkError = OptionError


# How a PNG and a JPEG file begin: a file that begins otherwise would fail every request of the run.
IMAGE_SIGNATURES = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff")


def check_results_file(path):
    """Refuse a results file that cannot be one, before its progress file is written beside it."""
    if not path:
        return
    fix = "Fix: give a file path such as /var/lib/vllm-bench/vllm-ascend.jsonl (the vllm_bench role makes one in " \
          "vllm_bench_results_dir)"
    if os.path.isdir(path):
        raise BenchmarkError("results_file %s is a folder: expected a JSON Lines file. %s" % (path, fix))
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise BenchmarkError("results_file %s is below %s, which is a file: expected a path whose folders are "
                             "folders. %s" % (path, folder, fix))


def check_image_file(path):
    if not os.path.exists(path):
        problem = "does not exist on the host"
    elif os.path.isdir(path):
        problem = "is a folder"
    else:
        with open(path, "rb") as handle:
            start = handle.read(8)
        if start.startswith(IMAGE_SIGNATURES):
            return
        problem = "is not a PNG or JPEG (it starts with %r)" % start
    raise BenchmarkError("image_files: %s %s: expected PNG or JPEG files on the host. Fix: copy the images there "
                         "first, or leave image_files empty to send generated ones" % (path, problem))


def validate(params):
    """The client of base_url, once every option is one the module can use; BenchmarkError or ClientError,
    naming the option, otherwise."""
    for option in ("image_sizes", "max_tokens", "concurrency"):
        values = params[option]
        if not values:
            raise BenchmarkError("%s: the list is empty: expected at least one value. Fix: give one, or leave %s "
                                 "out for the default" % (option, option))
        for value in values:
            if values.count(value) > 1:
                raise BenchmarkError("%s: %s is listed twice: expected each value once, as each group is measured "
                                     "once. Fix: list it once" % (option, value))
    # Sizes only label the groups of image_files; generated images must be small enough to make on the host.
    size_of = parse_size if params["image_files"] else generated_size
    for size in params["image_sizes"]:
        try:
            size_of(size)
        except ValueError as error:
            raise BenchmarkError("image_sizes: %s. Fix: give sizes as WIDTHxHEIGHT, each side at most %d; for larger "
                                 "images send image_files" % (error, MAX_SIDE)) from None
    for option in ("max_tokens", "concurrency"):
        for value in params[option]:
            if value < 1:
                raise BenchmarkError("%s: %d is not allowed: expected every value at least 1. Fix: correct it"
                                     % (option, value))
    number_at_least(params, "requests_per_group", 1, "give how many requests each group sends")
    number_at_least(params, "warmup_requests", 0, "give 0 for no warm-up")
    number_above(params, "request_timeout_s", 0, "give the seconds a request may wait for any byte")
    number_at_least(params, "new_group_deadline_s", 0, "give 0 for no deadline")
    number_at_least(params, "estimate_seconds_per_token", 0, "give the decode time of a token, about 0.09 s on 310P3")
    if not (math.isfinite(params["error_threshold"]) and 0 <= params["error_threshold"] <= 1):
        raise BenchmarkError("error_threshold: %s is not allowed: expected a number between 0 and 1. Fix: give the "
                             "share of failed requests that makes a group unreliable, such as 0.05"
                             % params["error_threshold"])
    for path in params["image_files"]:
        check_image_file(path)
    if params["search"] == "concurrency":
        params["slo"] = check_slo(params["slo"])
        number_at_least(params, "search_tolerance", 1, "give how many users apart the search may stop, such as 2")
        number_at_least(params, "search_probe_requests", 1, "give how many requests a probe counts, such as 16")
        number_at_least(params, "open_loop_requests", 0, "give how many open-loop requests check a capacity, or 0")
        number_above(params, "open_loop_burstiness", 0, "give 1 for a Poisson process, less for burstier arrivals")
        if not 0.5 < params["search_confidence"] < 1:
            raise BenchmarkError("search_confidence: %s is not allowed: expected a number more than 0.5 and less "
                                 "than 1. Fix: give the confidence a probe's percentiles are judged with, such as "
                                 "0.9" % params["search_confidence"])
    elif params["slo"] is not None:
        raise BenchmarkError("slo: given, but search is none, which measures the matrix and holds it to no SLO. "
                             "Fix: add search: concurrency to find the largest concurrency that meets it, or leave "
                             "slo out")
    if params["resume"] and not params["results_file"]:
        raise BenchmarkError("resume: needs results_file, the file the finished groups are read from. Fix: give "
                             "results_file, or set resume to false")
    return Client(params["base_url"], params["api_key"] or key_from_env_file(params["env_file"]),
                  params["request_timeout_s"])


def doubling(top):
    """The concurrencies a capacity search probes before its first failure, at most: 1, 2, 4, ... and top."""
    search, steps = ConcurrencySearch(top, 1), []
    while search.next() is not None:
        steps.append(search.next())
        search.record(steps[-1], True)
    return steps


def workloads(params):
    """(image size, max_tokens) of every line of the matrix, or of every search, in the order they run."""
    return [(size, tokens) for size in params["image_sizes"] for tokens in params["max_tokens"]]


def plan(params):
    """The groups in the order they run, each with its requests: the matrix, or for each capacity search the probes
    from 1 up to its first failure, an estimate (where a search starts, and the bisection after it, are decided by
    what the probes measure)."""
    if params.get("search") == "concurrency":
        return [{"image_size": size, "max_tokens": tokens, "concurrency": concurrency,
                 "requests": probe_requests(concurrency, params["search_probe_requests"])}
                for size, tokens in workloads(params) for concurrency in doubling(max(params["concurrency"]))]
    return [{"image_size": size, "max_tokens": tokens, "concurrency": concurrency,
             "requests": params["requests_per_group"]}
            for size, tokens in workloads(params) for concurrency in params["concurrency"]]


def units_done(params, result):
    """(done, total) in the progress file's units: groups of the matrix, or searches (one per image size and
    max_tokens)."""
    if params["search"] == "concurrency":
        return len(result["capacity"]), len(workloads(params))
    return len(result["groups"]), result["planned_groups"]


def planned_groups(params):
    """The groups in the order they run, each with its requests and its share of the estimate: what the
    controller's follow step and live view measure progress by."""
    return [dict(group, estimated_seconds=estimate_seconds([group], params)) for group in plan(params)]


def estimate_basis(params):
    """What the estimate is based on, for whoever reads it: on other hardware, or a stand-in, the seed's pace is not its
    own."""
    if params["estimate_seconds_per_token"] == SEED_SECONDS_PER_TOKEN:
        return ("estimated from the seed's 310P timings (real hardware: %g s per output token on a 310P3 pair with TP "
                "2); other hardware, or a stand-in, runs at its own pace" % SEED_SECONDS_PER_TOKEN)
    return "estimated at %g s per output token (estimate_seconds_per_token, as given)" % (
        params["estimate_seconds_per_token"])


def estimate_seconds(groups, params):
    total = 0.0
    for group in groups:
        waves = math.ceil(group["requests"] / float(group["concurrency"]))
        total += waves * group["max_tokens"] * params["estimate_seconds_per_token"]
    return round(total, 1)


class Images:
    """The image of each request, as a data URL: generated per size, or the operator's files in turn."""

    def __init__(self, paths, unique):
        self.files = []
        for path in paths:
            with open(path, "rb") as handle:
                self.files.append(handle.read())
        self.unique = unique
        self.sent = 0
        self.series = {}

    def next_url(self, size):
        number = self.sent if self.unique else 0
        self.sent += 1
        if self.files:
            return image_data_url(self.files[number % len(self.files)])
        if size not in self.series:
            self.series[size] = ImageSeries(*parse_size(size))
        return image_data_url(self.series[size].png(number))


class LoadTest:
    def __init__(self, params, client, model):
        self.params = params
        self.client = client
        self.model = model
        self.images = Images(params["image_files"], params["unique_images"])

    def chat(self, max_tokens):
        return ImageChat(self.model, self.params["prompt"], max_tokens, stream=True,
                         ignore_eos=self.params["ignore_eos"])

    def bodies(self, group):
        """Every request body of a group, built before its clock starts."""
        chat, count = self.chat(group["max_tokens"]), group["requests"]
        if self.images.unique:
            return [chat.body(self.images.next_url(group["image_size"])) for _request in range(count)]
        return [chat.body(self.images.next_url(group["image_size"]))] * count

    def warm_up(self, group):
        tokens = min(group["max_tokens"], WARMUP_MAX_TOKENS)
        body = self.chat(tokens).body(self.images.next_url(group["image_size"]))
        self.client.stream_chat(body, StreamResult(), tokens)

    def run_group(self, group, bodies, request_done, alive=lambda: None):
        """Closed loop: `concurrency` workers, each sending the next body when its last request ended. While they
        run, alive() is called every PROGRESS_EVERY_S: answers of hundreds of tokens at high concurrency take
        minutes on 310P, and whoever follows the progress file must not take streams still delivering for a
        stalled run (a request that gets no byte for request_timeout_s ends, so a live process is a run that
        moves)."""
        results = [None] * len(bodies)
        lock = threading.Lock()
        next_index = [0]

        def worker():
            while True:
                with lock:
                    index = next_index[0]
                    if index >= len(bodies):
                        return
                    next_index[0] += 1
                result = StreamResult()
                self.client.stream_chat(bodies[index], result, group["max_tokens"])
                results[index] = result
                request_done()

        workers = [threading.Thread(target=worker, daemon=True)
                   for _worker in range(min(group["concurrency"], len(bodies)))]
        with quick_thread_switches():
            for thread in workers:
                thread.start()
            wait_for(workers, alive)
        return results

    def run_open_loop(self, group, bodies, rate, burstiness, request_done, alive=lambda: None):
        """Open loop: requests sent at their arrival times whether or not earlier ones were answered, the gaps
        between arrivals drawn from a gamma distribution of mean 1/rate and shape burstiness (1: a Poisson process;
        less: burstier), as vLLM's `vllm bench serve --request-rate --burstiness`. The arrivals are the same at
        every run (a fixed seed), so two runs differ only by the server."""
        arrivals = random.Random(len(bodies))
        results = [None] * len(bodies)

        def send(index):
            result = StreamResult()
            self.client.stream_chat(bodies[index], result, group["max_tokens"])
            results[index] = result
            request_done()

        senders = []
        with quick_thread_switches():
            due = time.monotonic()
            for index in range(len(bodies)):
                due += arrivals.gammavariate(burstiness, 1.0 / (rate * burstiness))
                left = due - time.monotonic()
                while left > 0:
                    time.sleep(min(left, PROGRESS_EVERY_S))
                    alive()
                    left = due - time.monotonic()
                senders.append(threading.Thread(target=send, args=(index,), daemon=True))
                senders[-1].start()
            wait_for(senders, alive)
        return results


@contextlib.contextmanager
def quick_thread_switches():
    """Hand the GIL between threads every 0.5 ms rather than 5 ms: a request whose answer arrived must not wait
    behind others to read it, or its latency would include the client's own queueing."""
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    try:
        yield
    finally:
        sys.setswitchinterval(switch_interval)


def wait_for(threads, alive):
    """Wait until the threads end, calling alive() every PROGRESS_EVERY_S meanwhile."""
    for thread in threads:
        while thread.is_alive():
            thread.join(PROGRESS_EVERY_S)
            alive()


def count_request(progress, state):
    """A request of the running group finished: the progress file says so (at most every few seconds)."""
    state["requests_done"] += 1
    progress.update(state)


def keep(path, record, what, result):
    """Append a record to the results file; a write that fails (a full disk) ends the run, naming what was kept."""
    try:
        append_result(path, record)
    except OSError as error:
        raise BenchmarkError(
            "results_file %s: the record of %s could not be written (%s); the %d groups recorded before it stay. "
            "Fix: free space on the host (df %s), then rerun with -e vllm_bench_resume=true, which measures only "
            "the groups not recorded" % (path, what, error.strerror or error, len(result["groups"]),
                                         os.path.dirname(path) or ".")) from None


def check_answers_now(params, client, model, when, result, progress):
    """Ask the answer check's questions (before or after the matrix), keep the verdict in the results and the
    results file."""
    if params["answer_check"] == "none":
        return
    ask_server = asker(client, model, params["request_timeout_s"])
    state = {"answer_check": when, "groups_done": len(result["groups"]), "groups_total": result["planned_groups"]}

    def ask(question):
        # Each question may take request_timeout_s: whoever follows the progress file sees that the run lives.
        progress.update(state, force=True)
        return ask_server(question)

    record = answer_check_record(when, check_answers(ask, params["answer_check"]))
    if params["results_file"]:
        keep(params["results_file"], record, "the answer check %s the groups" % when, result)
    result["answer_checks"].append(record)


def measure(params, client, groups, result, progress):
    served = client.models()
    model = params["model"] or (served[0] if served else None)
    if model not in served:
        raise BenchmarkError("model %r is not served at %s; it serves: %s" % (
            model, params["base_url"], ", ".join(served) or "nothing"))
    result["model"] = model
    load_test = LoadTest(params, client, model)
    finished = {}
    if params["resume"]:
        # A group recorded as unreliable (say, run while the server was down) runs again.
        finished = {group_key(record): record for record in read_results(params["results_file"])[0]
                    if not record.get("unreliable")}
    # The answers vouch for the groups measured now: a resume with nothing left to measure asks nothing. (A
    # search's probes to come are known only as it goes: it asks.)
    pending = len(finished) < len(groups) or params["search"] == "concurrency"
    if pending:
        check_answers_now(params, client, model, "before", result, progress)
        for _request in range(params["warmup_requests"]):
            progress.update({"groups_done": 0, "groups_total": len(groups)}, force=True)
            load_test.warm_up(groups[0])
    if params["search"] == "concurrency":
        search_capacity(params, load_test, result, progress)
    else:
        measure_matrix(params, load_test, groups, finished, result, progress)
    if pending:
        check_answers_now(params, client, model, "after", result, progress)


def measure_matrix(params, load_test, groups, finished, result, progress):
    # The deadline counts from the first group this run starts, which always runs (the module's documentation).
    started = None
    not_run = []
    for number, group in enumerate(groups, 1):
        if group_key(group) in finished:
            result["groups"].append(dict(finished[group_key(group)], resumed=True))
            continue
        if started is not None and params["new_group_deadline_s"] \
                and time.monotonic() - started > params["new_group_deadline_s"]:
            not_run.append({name: group[name] for name in GROUP_FIELDS})
            continue
        started = time.monotonic() if started is None else started
        bodies = load_test.bodies(group)
        state = {"group": group, "group_number": number, "groups_total": len(groups), "requests_done": 0,
                 "requests_total": len(bodies), "groups_done": len(result["groups"])}
        progress.update(state, force=True)
        results = load_test.run_group(group, bodies, functools.partial(count_request, progress, state),
                                      functools.partial(progress.update, state))
        record = summarise(group, results, params["error_threshold"])
        if params["results_file"]:
            keep(params["results_file"], record, "group %d of %d" % (number, len(groups)), result)
        result["groups"].append(dict(record, resumed=False))
    if not_run:
        # Said where each reader looks: the result, the results file the report reads and the progress file.
        deadline = {"new_group_deadline_s": params["new_group_deadline_s"],
                    "elapsed_s": round(time.monotonic() - started, 1), "groups_total": len(groups),
                    "not_run": not_run, "stopped_at": time.time()}
        result.update(stopped_by_deadline=True, deadline=deadline)
        if params["results_file"]:
            keep(params["results_file"], {"deadline": deadline}, "the deadline's stop", result)


def probe_judgment(params):
    """What a probe's verdict depends on besides its group: a probe recorded with the same is not run again."""
    return {"slo": params["slo"], "confidence": params["search_confidence"],
            "minimum": params["search_probe_requests"]}


# What a resumed search reads of a recorded probe, and the types it must have there.
PROBE_FIELDS = {"passed": (bool,), "sent": (int,), "duration_s": (int, float), "figures": (dict,), "failed": (list,)}
RECORD_FIELDS = {"image_size": (str,), "max_tokens": (int,), "concurrency": (int,), "max_in_flight": (int,),
                 "rps": (int, float, type(None)), "output_tokens_per_s": (int, float, type(None))}


def typed(value, types):
    """isinstance, except that a bool is no number (JSON's true is not one request)."""
    return isinstance(value, types) and (bool in types or not isinstance(value, bool))


def recorded_probes(path):
    """The probes of a results file a resumed search may take as run, by (group, kind): reliable, and complete
    with the types it reads. A line cut or written by anything else is not one: its probe runs again."""
    recorded = {}
    for line in read_probes(path):
        parts = ((line, RECORD_FIELDS), (line["probe"], PROBE_FIELDS))
        if line.get("unreliable") is False and all(typed(record.get(name), types) for record, wanted in parts
                                                   for name, types in wanted.items()):
            recorded[(group_key(line), line["probe"].get("kind"))] = line
    return recorded


def search_capacity(params, load_test, result, progress):
    """Each image size and output length's capacity search and open-loop check, each probe appended to the results
    file as it ends."""
    judgment = probe_judgment(params)
    recorded = recorded_probes(params["results_file"]) if params["resume"] else {}
    cells = workloads(params)

    def probe(number, kind, concurrency, requests, **arrivals):
        """The probe of search `number` (of cells), run now, or as a resumed search recorded it."""
        size, tokens = cells[number - 1]
        group = {"image_size": size, "max_tokens": tokens, "concurrency": concurrency, "requests": requests}
        asked = dict(judgment, kind=kind, **arrivals)
        kept = recorded.get((group_key(group), kind))
        # Judged as this search judges, with as many requests: else its verdict is not this search's.
        if kept is not None and all(kept["probe"].get(name) == value
                                    for name, value in dict(asked, sent=requests).items()):
            return dict(kept, resumed=True)
        return run_probe(params, load_test, group, asked, (number, len(cells)), result, progress)

    for number, (size, tokens) in enumerate(cells, 1):
        start = neighbours_capacity(result["capacity"], tokens)
        search = ConcurrencySearch(max(params["concurrency"]), params["search_tolerance"], start)
        probes = []
        while search.next() is not None:
            concurrency = search.next()
            probes.append(probe(number, "closed", concurrency,
                                probe_requests(concurrency, params["search_probe_requests"])))
            search.record(concurrency, probes[-1]["probe"]["passed"])
        record = capacity_record(size, tokens, search, probes)
        if record["rps"] and params["open_loop_requests"]:
            # At the capacity's throughput, arrivals that do not wait for answers, as a gateway's users send them;
            # the first `capacity` of them fill an idle server and are not counted, as a probe's first wave.
            checked = probe(number, "open_loop", search.capacity, search.capacity + params["open_loop_requests"],
                            rate_rps=record["rps"], burstiness=params["open_loop_burstiness"])
            record["open_loop"] = dict({name: checked["probe"][name] for name in (
                "rate_rps", "burstiness", "sent", "passed", "figures", "failed", "duration_s")},
                max_in_flight=checked["max_in_flight"], resumed=checked["resumed"])
        if params["results_file"]:
            keep(params["results_file"], {"capacity": record}, "the capacity found at %s, max_tokens %d" % (
                size, tokens), result)
        result["capacity"].append(record)


def neighbours_capacity(found, tokens):
    """Where the search of an output length starts: the capacity last found for it (at another image size, which
    moves it least), else the capacity last found; 1 for the first search, or after one that met the SLO nowhere."""
    same_length = [record for record in found if record["max_tokens"] == tokens]
    return max(1, (same_length or found or [{"max_concurrency": 1}])[-1]["max_concurrency"])


def run_probe(params, load_test, group, judgment, position, result, progress):
    """One probe - a closed loop at its concurrency, or open-loop arrivals at a rate - whose first `concurrency`
    requests are not counted and the rest judged against the SLO; its record is kept."""
    bodies = load_test.bodies(group)
    number, cells = position
    state = {"group": group, "probe": judgment["kind"], "group_number": number, "groups_total": cells,
             "requests_done": 0, "requests_total": len(bodies), "groups_done": number - 1}
    progress.update(state, force=True)
    started = time.monotonic()
    done, alive = functools.partial(count_request, progress, state), functools.partial(progress.update, state)
    if judgment["kind"] == "open_loop":
        results = load_test.run_open_loop(group, bodies, judgment["rate_rps"], judgment["burstiness"], done, alive)
    else:
        results = load_test.run_group(group, bodies, done, alive)
    # Requests are sent in the order of their bodies: the first `concurrency` results are the first ones sent.
    counted = results[group["concurrency"]:]
    record = summarise(group, counted, params["error_threshold"])
    record["max_in_flight"] = max_in_flight(results)
    record["probe"] = dict(judgment, sent=len(results), duration_s=round(time.monotonic() - started, 4),
                           **judge(counted, params["slo"], params["search_confidence"]))
    if params["results_file"]:
        keep(params["results_file"], record, "the %s probe of %d users at %s, max_tokens %d" % (
            judgment["kind"].replace("_", " "), group["concurrency"], group["image_size"], group["max_tokens"]),
            result)
    return dict(record, resumed=False)


def capacity_record(size, tokens, search, probes):
    """What a finished search found for one image size and output length, and what it spent."""
    at = next((probe for probe in probes if probe["concurrency"] == search.capacity), None)
    return {"image_size": size, "max_tokens": tokens, "slo": probes[0]["probe"]["slo"],
            "max_concurrency": search.capacity, "limited_by": search.limited_by, "rps": at and at["rps"],
            "output_tokens_per_s": at and at["output_tokens_per_s"],
            "slo_figures": at and at["probe"]["figures"], "started_at": search.start,
            "probes": [{"concurrency": probe["concurrency"], "passed": probe["probe"]["passed"]} for probe in probes],
            "requests": sum(probe["probe"]["sent"] for probe in probes),
            "seconds": round(sum(probe["probe"]["duration_s"] for probe in probes), 2),
            "resumed_probes": sum(1 for probe in probes if probe["resumed"]), "open_loop": None}


def run(params, check_mode=False):
    """The module's result: the matrix planned and, unless in check mode, measured. Whoever follows the
    progress file learns at once that the run ended, and why."""
    check_results_file(params["results_file"])
    # Before anything is written: a run that started earlier on this file still appends to it (a resume started
    # too soon, a second benchmark at once); in check mode the lock is only tried, so the plan refuses early.
    held = hold_results(params["results_file"], hold=not check_mode) if params["results_file"] else None
    progress = ProgressWriter(None if check_mode else params["results_file"])
    result = {"base_url": params["base_url"], "model": params["model"], "results_file": params["results_file"],
              "planned_groups": 0, "planned_requests": 0, "estimated_seconds": 0.0, "estimate_basis": None,
              "planned": [], "stopped_by_deadline": False, "deadline": None, "groups": [], "answer_checks": [],
              "capacity": [], "progress_error": None}
    try:
        client = validate(params)
        groups = plan(params)
        result.update(planned_groups=len(groups), planned_requests=sum(group["requests"] for group in groups),
                      estimated_seconds=estimate_seconds(groups, params), estimate_basis=estimate_basis(params),
                      planned=planned_groups(params))
        if not check_mode:
            measure(params, client, groups, result, progress)
    except BaseException as error:
        progress.finish(*units_done(params, result), error=str(error) or type(error).__name__)
        raise
    finally:
        if held is not None:
            os.close(held)
    progress.finish(*units_done(params, result), deadline=result["deadline"])
    result["progress_error"] = progress.error
    if not check_mode:
        result["ansible_facts"] = {"vllm_benchmark": dict(
            {name: result[name] for name in ("base_url", "model", "results_file", "groups", "answer_checks",
                                             "capacity")},
            finished_at=time.time(), summary=summary(result["groups"]))}
    return result
