"""The generation worker: one thread that owns the model and runs requests with continuous batching.

Every active request is a SequenceRun (generate.py) in its own session (a new one, or a cached one that
holds a prefix of its prompt: PromptCache). Each loop iteration admits the requests waiting in the queue
(up to max_batch at once), prefills one chunk of the oldest prompt not yet in (so the running streams
wait one chunk at most), then advances every active sequence by one batched decode step
(runtime Session::step_batch: each weight read once for all of them), hands each request its new text
through its asyncio.Queue, and drops the finished and the cancelled ones. A request whose client went away
is cancelled and leaves the batch before the next step.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .. import _core
from .._core import InputError
from ..generate import SequenceRun, _common_prefix


log = logging.getLogger("markbase.serve")


class QueueFull(Exception):
    pass


class PromptCache:
    """Sessions of finished requests, with the tokens each holds: a new prompt (without media) that shares a
    prefix with one continues from it — the session rolled back to the common prefix, only the rest
    prefilled (a system prompt, the earlier turns of a conversation). At most `capacity` sessions, the least
    recently used dropped first; a session serves one request at a time (taken out while it runs).

    Reuse stops at a multiple of the prefill chunk inside what the earlier request prefilled: those cache rows
    are bit for bit what a direct prefill of the new prompt writes (the same chunks, cut at the same places), so
    an answer never depends on which requests came before it. Rows written by decode steps, or by a chunk cut
    elsewhere, are f32 sums in another order."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._entries: OrderedDict[int, tuple[Any, list[int]]] = OrderedDict()
        self._next = 0
        self.hits = 0
        self.reused_tokens = 0

    def take(self, prompt, chunk: int) -> tuple[Any, int]:
        """(a session holding prompt.ids[:n], n) for the longest usable shared prefix, or (None, 0); n is a
        multiple of `chunk` (the model's prefill chunk)."""
        if prompt.media or not self._entries:
            return None, 0
        ids = prompt.ids
        best, best_n = None, 0
        for key, (_, held, prefilled) in self._entries.items():
            # at least one token to prefill (it gives the next logits); whole chunks of the earlier prefill only
            n = min(_common_prefix(held, ids), prefilled, len(ids) - 1) // chunk * chunk
            if n > best_n:
                best, best_n = key, n
        if best is None:
            return None, 0
        session, _, _ = self._entries.pop(best)
        if not session.truncate(best_n):  # a sliding ring no longer holds that position
            return None, 0
        self.hits += 1
        self.reused_tokens += best_n
        return session, best_n

    def put(self, session, held: list[int], prefilled: int) -> None:
        """A finished request's session, the tokens it holds and how many of them it prefilled (its prompt)."""
        if self.capacity <= 0:
            return
        self._entries[self._next] = (session, held, prefilled)
        self._next += 1
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)


@dataclass
class Job:
    # Runs on the worker thread: (Prompt, SamplingOptions) of the request (Model.prepare).
    prepare: Callable[[], Any]
    model: Any
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    checked: float = 0.0  # when the client's connection was last checked (time.monotonic)

    def emit(self, kind: str, value: Any) -> None:
        self.loop.call_soon_threadsafe(self.out.put_nowait, (kind, value))

    def cancel(self) -> None:
        self.cancelled.set()


@dataclass
class _Active:
    job: Job
    run: Any    # SequenceRun
    token: int  # what the next step feeds


class Worker:
    def __init__(self, max_queue: int, max_batch: int, prompt_cache: int = 4):
        self.max_batch = max_batch
        self.session_context: int | None = None  # each request's session (None: the model's max_context)
        self.cache = PromptCache(prompt_cache)
        self._jobs: queue.Queue[Job | None] = queue.Queue(maxsize=max_queue)
        self._active: list[_Active] = []
        self._prefilling: list[tuple[Job, Any]] = []  # admitted, prompt not all in yet (SequenceRun)
        self.completed = 0   # requests finished, failed or cancelled
        self.steps = 0       # batched decode steps run
        self.batch_rows = 0  # Σ sequences over those steps (mean batch = batch_rows / steps)
        # The latest scheduling decisions, oldest first: ("prefill", request, tokens) or ("decode", requests).
        self.schedule: deque = deque(maxlen=256)
        self._thread = threading.Thread(target=self._run, name="markbase-serve-worker", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> None:
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            raise QueueFull() from None

    @property
    def waiting(self) -> int:
        return self._jobs.qsize()

    @property
    def running(self) -> int:
        return len(self._active) + len(self._prefilling)

    def stop(self, timeout: float = 10.0) -> None:
        """Stops after the current step; waits at most `timeout` s (the thread is a daemon: a forward still
        running in C++ does not keep the process alive)."""
        self._stopping = True
        try:
            self._jobs.put_nowait(None)
        except queue.Full:
            pass
        self._thread.join(timeout=timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    _stopping = False

    def _finish(self, a: _Active | Job, kind: str, value: Any) -> None:
        if kind == "error":  # not the client's fault: a bug in markbase, answered as a 500
            log.error("markbase serve: a request failed", exc_info=value)
        (a.job if isinstance(a, _Active) else a).emit(kind, value)
        self.completed += 1

    def _done(self, run) -> None:
        """A finished run's session goes to the prompt cache with the tokens it holds."""
        if not run.prompt.media:
            held = (list(run.prompt.ids) + run.generated)[: run.session.position]
            self.cache.put(run.session, held, len(run.prompt.ids))

    def _admit(self, job: Job) -> None:
        """A new request: its SequenceRun, the prompt left for _prefill_some (media prompts go in whole)."""
        if job.cancelled.is_set():
            self.completed += 1
            return
        try:
            prompt, opts = job.prepare()
            session, prefix = self.cache.take(prompt, job.model.prefill_chunk)
            run = SequenceRun(job.model, session or job.model.session(self.session_context), prompt, opts, prefix,
                              prefill=False)
        except InputError as e:
            return self._finish(job, "input_error", e)
        except Exception as e:  # noqa: BLE001 - a 500 for this request; the worker lives on
            return self._finish(job, "error", e)
        if run.prefilled:
            self._start(job, run)
        else:
            self._prefilling.append((job, run))

    def _prefill_some(self) -> None:
        """One prefill chunk (the model's prefill_chunk tokens, the same cut as a whole prefill) of the oldest
        request still prefilling: between two decode steps the running streams wait for one chunk at most."""
        job, run = self._prefilling[0]
        if job.cancelled.is_set():
            self._prefilling.pop(0)
            return self._finish(job, "cancelled", None)
        try:
            before = run.session.position
            done = run.prefill_step(job.model.prefill_chunk)
            self.schedule.append(("prefill", id(job), run.session.position - before))
        except InputError as e:
            self._prefilling.pop(0)
            return self._finish(job, "input_error", e)
        except Exception as e:  # noqa: BLE001
            self._prefilling.pop(0)
            return self._finish(job, "error", e)
        if done:
            self._prefilling.pop(0)
            self._start(job, run)

    def _start(self, job: Job, run) -> None:
        """A prefilled request: its first token, then it joins the batch."""
        try:
            token = run.first_token()
            text = run.advance(token)
        except Exception as e:  # noqa: BLE001
            return self._finish(job, "input_error" if isinstance(e, InputError) else "error", e)
        if text:
            job.emit("text", text)
        if run.done:
            self._done(run)
            return self._finish(job, "done", run.result())
        self._active.append(_Active(job, run, token))

    def _step(self) -> None:
        """One batched decode step for every active sequence."""
        act = self._active
        try:
            nxt = _core.gemma4.step_batch([a.run.session._s for a in act], np.array([a.token for a in act], np.int32),
                                          [a.run.sampler for a in act])
        except Exception as e:  # noqa: BLE001 - every request in the failed step gets the error
            for a in act:
                self._finish(a, "input_error" if isinstance(e, InputError) else "error", e)
            self._active = []
            return
        self.steps += 1
        self.batch_rows += len(act)
        self.schedule.append(("decode", tuple(id(a.job) for a in act)))
        still = []
        for a, token in zip(act, nxt):
            text = a.run.advance(int(token))
            if text:
                a.job.emit("text", text)
            if a.run.done:
                self._done(a.run)
                self._finish(a, "done", a.run.result())
            else:
                a.token = int(token)
                still.append(a)
        self._active = still

    def _run(self) -> None:
        while not self._stopping:
            # Admit what is waiting (block only when nothing runs).
            while self.running < self.max_batch:
                try:
                    job = self._jobs.get(block=not self.running)
                except queue.Empty:
                    break
                if job is None:
                    return
                self._admit(job)
            if self._prefilling:
                self._prefill_some()
            # Cancelled requests leave before the step.
            for a in [a for a in self._active if a.job.cancelled.is_set()]:
                self._finish(a, "cancelled", None)
            self._active = [a for a in self._active if not a.job.cancelled.is_set()]
            if self._active:
                self._step()
