"""Iteration-level batching (Orca) over a paged KV cache (vLLM): which requests run in each iteration.

Owns the serving loop's bookkeeping, not its timing: `IterationScheduler.step()` returns one
iteration's batch, and a caller times it (or `run_to_completion` asks a latency function).

The step convention is pimdsl's (pimdsl/loops/step/step_run.py): a request runs one prefill of its
`input_len` tokens, then `output_len` decode steps of one token each; its KV cache grows from
`input_len` to `input_len + output_len` tokens. Requests join and leave only at iteration
boundaries ([ORCA] Yu et al., OSDI '22, iteration-level scheduling; NeuPIMs, section 4 item 1:
requests wait "until the on-going iteration is completed and a new iteration commences").

Choices the papers leave open, made here:
- A newly admitted request does its prefill in the iteration that admits it, beside the other
  requests' decode steps (Orca's selective batching, which NeuPIMs section 2.2 cites). It takes a
  batch slot like any other entry. NeuPIMs runs prefill on standalone NPUs (section 4 item 1); a
  caller modelling that times the `prefill` entries on those NPUs and the `decode` entries on the
  device.
- Admission is strict first-come first-served in arrival order (ties by request order): when the
  oldest waiting request does not fit, no younger one is admitted past it, so none starves.
- Admission policy (`kv_admission`):
  - `reserve` (Orca): no preemption. A request is admitted only when the pages of its whole life
    (`input_len + output_len` tokens) fit beside the lifetime pages promised to the running ones,
    as Orca reserves a request's maximum tokens at admission (Orca's Algorithm 1, n_rsrv). Pages
    are still taken on demand, so `used_pages` is the real occupancy, and no decode step can find
    the cache full.
  - `on_demand` (vLLM, [VLLM] Kwon et al., SOSP '23, which NeuPIMs adopts, section 2.2 "Memory paging for
    attention ... effectively increases the batch size"): a request is admitted when its prompt's
    pages fit beside the running requests' next tokens and a watermark of 1% of the pages (vLLM's
    default). When the running requests' next tokens need more pages than are free, the most
    recently admitted running requests are preempted (vLLM's recompute preemption): they free
    their pages and go back to the head of the queue; on readmission their prefill covers the
    prompt and the tokens generated so far, and they go on from the decode step they reached.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, NamedTuple, Sequence

from .requests import Request


class PagedKVCache:
    """KV cache in whole pages of `page_tokens` tokens; a request owns the pages of its tokens.

    `bytes_per_token` is one token's K and V over every layer the cache holds (for example
    2 x layers x kv_heads x head_dim x dtype bytes); `capacity_bytes` is what is left for KV.
    The cache holds floor(capacity / page bytes) pages."""

    def __init__(self, capacity_bytes: int, page_tokens: int, bytes_per_token: int):
        if page_tokens < 1 or bytes_per_token <= 0 or capacity_bytes < 0:
            raise ValueError("page_tokens must be >= 1, bytes_per_token > 0 and capacity_bytes >= 0")
        self.page_tokens = page_tokens
        self.bytes_per_token = bytes_per_token
        self.page_bytes = page_tokens * bytes_per_token
        self.total_pages = int(capacity_bytes // self.page_bytes)
        self._tokens: dict[int, int] = {}
        self.used_pages = 0

    def pages_for(self, tokens: int) -> int:
        """Whole pages that hold `tokens` tokens."""
        return math.ceil(tokens / self.page_tokens)

    @property
    def free_pages(self) -> int:
        return self.total_pages - self.used_pages

    def tokens_of(self, request_id: int) -> int:
        return self._tokens[request_id]

    def pages_of(self, request_id: int) -> int:
        return self.pages_for(self._tokens[request_id])

    def allocate(self, request_id: int, tokens: int) -> None:
        """Pages for a new request's first `tokens` tokens."""
        if request_id in self._tokens:
            raise ValueError(f"request {request_id} already holds KV pages")
        self._tokens[request_id] = 0
        self.extend(request_id, tokens)

    def extend(self, request_id: int, tokens: int = 1) -> None:
        """Append `tokens` tokens to a request's cache, taking a new page when its last is full."""
        held = self._tokens[request_id]
        more = self.pages_for(held + tokens) - self.pages_for(held)
        if more > self.free_pages:
            raise MemoryError(f"request {request_id} needs {more} more KV pages, {self.free_pages} are free")
        self._tokens[request_id] = held + tokens
        self.used_pages += more

    def growth(self, request_ids: Iterable[int]) -> int:
        """The new pages one more token of each request takes (a request whose last page is full
        takes one)."""
        tokens, page = self._tokens, self.page_tokens
        return sum(1 for r in request_ids if tokens[r] % page == 0)

    def append_token(self, request_ids: Iterable[int]) -> list[int]:
        """`extend(r, 1)` for each request in turn (the serving loop's decode step, in one call);
        returns the tokens each held before."""
        tokens, page, held_before = self._tokens, self.page_tokens, []
        for r in request_ids:
            held = tokens[r]
            if held % page == 0:                  # its last page is full (or it has none)
                if self.used_pages >= self.total_pages:
                    raise MemoryError(f"request {r} needs 1 more KV pages, {self.free_pages} are free")
                self.used_pages += 1
            tokens[r] = held + 1
            held_before.append(held)
        return held_before

    def free(self, request_id: int) -> int:
        """Release a request's pages; returns how many."""
        pages = self.pages_for(self._tokens.pop(request_id))
        self.used_pages -= pages
        return pages


class BatchEntry(NamedTuple):
    """One request's work in one iteration (a named tuple: hundreds of thousands are made per run)."""
    request_id: int
    phase: str                    # "prefill" (the admitting iteration) or "decode"
    past_len: int                 # tokens already in its KV cache
    new_tokens: int               # tokens it processes now (input_len, or 1)
    decode_step: int              # decode steps done (a prefill: 0, or those before a preemption)

    @property
    def context_len(self) -> int:
        """The tokens its attention reads: the past ones and the new ones."""
        return self.past_len + self.new_tokens


@dataclass(frozen=True)
class Iteration:
    index: int
    start_s: float                # the scheduler's clock when the iteration starts
    entries: tuple[BatchEntry, ...]   # running requests' decode steps in admission order, then prefills
    admitted: tuple[int, ...]
    finished: tuple[int, ...]     # requests whose last decode step is this iteration; freed after it
    kv_used_pages: int            # pages in use during the iteration (before the finished free theirs)
    preempted: tuple[int, ...] = ()   # on_demand: requests sent back to the queue before this iteration


class IterationScheduler:
    """Orca-style iteration-level scheduling of `requests` with at most `max_batch` per iteration."""

    WATERMARK = 0.01              # on_demand: pages kept free at admission (vLLM's default watermark)

    def __init__(self, requests: Sequence[Request], max_batch: int, kv_cache: PagedKVCache,
                 admission: str = "reserve"):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if admission not in ("reserve", "on_demand"):
            raise ValueError(f"admission must be reserve or on_demand, got {admission!r}")
        self.admission = admission
        ids = [r.id for r in requests]
        if len(set(ids)) != len(ids):
            raise ValueError("request ids must be unique")
        self.max_batch = max_batch
        self.kv = kv_cache
        too_big = [r.id for r in requests if self._lifetime_pages(r) > kv_cache.total_pages]
        if too_big:
            raise ValueError(f"requests {too_big} need more KV pages than the cache's "
                             f"{kv_cache.total_pages} over their life; they could never run")
        # sorted() is stable: equal arrivals keep the caller's order
        self._waiting = deque(sorted(requests, key=lambda r: r.arrival))
        self._running: list[Request] = []
        self._steps: dict[int, int] = {}          # request id -> decode steps done
        self._promised = 0                        # lifetime pages of the running requests
        self.clock_s = 0.0
        self._index = 0

    def _lifetime_pages(self, r: Request) -> int:
        return self.kv.pages_for(r.input_len + r.output_len)

    @property
    def waiting(self) -> int:
        """Requests not admitted yet."""
        return len(self._waiting)

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def done(self) -> bool:
        return not self._waiting and not self._running

    def _prompt_tokens(self, r: Request) -> int:
        """What a (re)admitted request prefills: its input, and the tokens it generated before a
        preemption (recompute)."""
        return r.input_len + self._steps.get(r.id, 0)

    def _growth(self, r: Request) -> int:
        """The new page (0 or 1) a running request's next decode token takes."""
        return int(self.kv.tokens_of(r.id) % self.kv.page_tokens == 0)

    def _fits(self, r: Request, pending: int, growth: int) -> bool:
        if self.admission == "reserve":
            return self._promised + self._lifetime_pages(r) <= self.kv.total_pages
        # the watermark only guards running requests (an idle cache takes any request that fits)
        watermark = math.ceil(self.WATERMARK * self.kv.total_pages) if self._running else 0
        need = self.kv.pages_for(self._prompt_tokens(r))
        return pending + need + growth + watermark <= self.kv.free_pages

    def _admit(self) -> list[Request]:
        admitted, pending = [], 0                 # pending: prompt pages of this round's admissions
        growth = self.kv.growth(r.id for r in self._running) if self.admission == "on_demand" else 0
        while self._waiting and len(self._running) + len(admitted) < self.max_batch:
            r = self._waiting[0]
            if r.arrival > self.clock_s or not self._fits(r, pending, growth):
                break                             # strict FCFS: nobody overtakes the oldest
            self._waiting.popleft()
            self._promised += self._lifetime_pages(r)
            pending += self.kv.pages_for(self._prompt_tokens(r))
            self._steps.setdefault(r.id, 0)
            admitted.append(r)
        self._running.extend(admitted)
        return admitted

    def _preempt(self) -> list[int]:
        """on_demand: free the youngest running requests until every running one can take its
        next token (vLLM recompute preemption); they go back to the head of the queue."""
        victims = []
        growth = self.kv.growth(r.id for r in self._running)
        while self._running and growth > self.kv.free_pages:
            r = self._running.pop()
            growth -= self._growth(r)
            self.kv.free(r.id)
            self._promised -= self._lifetime_pages(r)
            self._waiting.appendleft(r)
            victims.append(r.id)
        return victims

    def step(self) -> Iteration | None:
        """The next iteration's batch, or None when every request has finished. When nothing runs
        and the oldest waiting request has not arrived yet, the clock jumps to its arrival."""
        if self.done:
            return None
        preempted = self._preempt() if self.admission == "on_demand" else []
        admitted = self._admit()
        if not self._running:
            self.clock_s = max(self.clock_s, self._waiting[0].arrival)
            admitted = self._admit()
        fresh = {r.id for r in admitted}
        entries, finished, steps = [], [], self._steps
        decoding = [r for r in self._running if r.id not in fresh]
        for r, past in zip(decoding, self.kv.append_token([r.id for r in decoding])):
            step = steps[r.id] + 1
            entries.append(BatchEntry(r.id, "decode", past, 1, step))
            steps[r.id] = step
            if step == r.output_len:
                finished.append(r.id)
        for r in admitted:
            tokens = self._prompt_tokens(r)
            entries.append(BatchEntry(r.id, "prefill", 0, tokens, self._steps[r.id]))
            self.kv.allocate(r.id, tokens)
        iteration = Iteration(self._index, self.clock_s, tuple(entries), tuple(r.id for r in admitted),
                              tuple(finished), self.kv.used_pages, tuple(preempted))
        # leave at the iteration boundary: free pages and promises for the next admission
        done = set(finished)
        for r in self._running:
            if r.id in done:
                self.kv.free(r.id)
                self._promised -= self._lifetime_pages(r)
                del self._steps[r.id]
        self._running = [r for r in self._running if r.id not in done]
        self._index += 1
        return iteration

    def run_to_completion(self, iteration_latency: Callable[[Iteration], float] | None = None
                          ) -> Iterator[Iteration]:
        """Every iteration until all requests finish. `iteration_latency(iteration)` (seconds)
        advances the clock that arrivals are compared with; without it iterations take no time."""
        while (iteration := self.step()) is not None:
            if iteration_latency is not None:
                self.clock_s += iteration_latency(iteration)
            yield iteration
