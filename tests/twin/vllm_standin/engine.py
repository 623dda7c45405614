"""Continuous-batching latency model of vLLM-Ascend on a 310P3 pair (TP 2), calibrated to the seed.

The scheduler works like vLLM's: every step decodes one token for each running sequence and spends what is
left of the token budget on prefill (chunked, in arrival order). A step takes

    step_base_s + step_per_seq_s * decoding sequences + prefill_per_token_s * prefill tokens

A sequence's first token comes at the end of the step that finishes its prefill; one more token comes at the
end of each later step. The same scheduler runs in real time inside the stand-in server and in virtual time
in ``simulate_closed_loop`` so that the calibration can be computed instead of waited for.

Calibration (seed): one 1920x1080 request alone with max_tokens 256 takes about 23 s; 640x480, max_tokens 32,
concurrency 32, 64 requests: p95 about 4.2 s. A decode step of about 0.09 s alone is what an 8B fp16 model
split over two 310P3 chips costs when memory-bound; the seed's finding that image size hardly matters means
prefill is cheap next to decode.
"""
import collections
import dataclasses


@dataclasses.dataclass(frozen=True)
class LatencyModel:
    step_base_s: float = 0.0892
    step_per_seq_s: float = 0.0001
    prefill_per_token_s: float = 0.00005
    max_batched_tokens: int = 2048
    max_num_seqs: int = 256


SEED_MODEL = LatencyModel()


class Sequence:
    """One request inside the scheduler."""

    __slots__ = ("key", "prompt_tokens", "output_tokens", "prefilled", "emitted", "finish_reason", "arrived_s")

    def __init__(self, key, prompt_tokens, output_tokens, finish_reason="length", arrived_s=None):
        self.key = key
        self.arrived_s = arrived_s  # wall-clock time the engine got it: where vLLM's TTFT and e2e latency start
        self.finish_reason = finish_reason  # how it ends after output_tokens: length, stop or error
        self.prompt_tokens = prompt_tokens
        self.output_tokens = max(1, output_tokens)
        self.prefilled = 0
        self.emitted = 0


class Scheduler:
    """Plans steps; the caller decides whether a step's time is slept or only counted."""

    def __init__(self, model=SEED_MODEL):
        self.model = model
        self.waiting = collections.deque()
        self.running = []

    def add(self, sequence):
        self.waiting.append(sequence)

    def has_work(self):
        return bool(self.waiting or self.running)

    def plan(self):
        """Admit what fits and return (duration, decoding, prefill chunks) of the next step."""
        while self.waiting and len(self.running) < self.model.max_num_seqs:
            self.running.append(self.waiting.popleft())
        decoding = [seq for seq in self.running if seq.prefilled >= seq.prompt_tokens]
        budget = self.model.max_batched_tokens - len(decoding)
        chunks = []
        for seq in self.running:
            if budget <= 0:
                break
            missing = seq.prompt_tokens - seq.prefilled
            if missing > 0:
                take = min(missing, budget)
                chunks.append((seq, take))
                budget -= take
        prefill_tokens = sum(take for _, take in chunks)
        duration = (self.model.step_base_s + self.model.step_per_seq_s * len(decoding)
                    + self.model.prefill_per_token_s * prefill_tokens)
        return duration, decoding, chunks

    def apply(self, decoding, chunks):
        """Finish a planned step: return the sequences that got a token and those that are done."""
        advanced = list(decoding)
        for seq, take in chunks:
            seq.prefilled += take
            if seq.prefilled >= seq.prompt_tokens:
                advanced.append(seq)
        finished = []
        for seq in advanced:
            seq.emitted += 1
            if seq.emitted >= seq.output_tokens:
                finished.append(seq)
        if finished:
            done = set(id(seq) for seq in finished)
            self.running = [seq for seq in self.running if id(seq) not in done]
        return advanced, finished


@dataclasses.dataclass
class SimulatedRequest:
    sent_s: float
    first_token_s: float = None
    finished_s: float = None

    @property
    def latency_s(self):
        return self.finished_s - self.sent_s

    @property
    def ttft_s(self):
        return self.first_token_s - self.sent_s


def simulate_closed_loop(prompt_tokens, output_tokens, concurrency, requests, model=SEED_MODEL):
    """Virtual-time run of ``concurrency`` clients that each send their next request when the last ends."""
    scheduler = Scheduler(model)
    clock = 0.0
    results = []
    sent = 0

    def send():
        nonlocal sent
        request = SimulatedRequest(sent_s=clock)
        results.append(request)
        scheduler.add(Sequence(request, prompt_tokens, output_tokens))
        sent += 1

    for _ in range(min(concurrency, requests)):
        send()
    while scheduler.has_work():
        duration, decoding, chunks = scheduler.plan()
        clock += duration
        advanced, finished = scheduler.apply(decoding, chunks)
        for seq in advanced:
            if seq.key.first_token_s is None:
                seq.key.first_token_s = clock
        for seq in finished:
            seq.key.finished_s = clock
            if sent < requests:
                send()
    return results
