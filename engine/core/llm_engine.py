"""The engine's step loop: schedule, launch, read back and process outputs. Requests come in through
add_request and leave from step(), a StepOutputs a call; a bad request fails alone, as an output.
With async_output or async_scheduling the step launched is processed one step later, while its
successor runs; async_output waits for a step's tokens before launching the next, async_scheduling
does not. A streamed multi-step window is handed over one forward per step() call."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable

from llmbench.engine.config import EngineConfig
from llmbench.engine.core.admission import input_problem, rejection
from llmbench.engine.execution.model_runner import ModelRunner
from llmbench.engine.execution.null_executor import NullExecutor
from llmbench.engine.loading.model_facts import resolve_model_facts
from llmbench.engine.observe.nvtx_ranges import nvtx_ranges
from llmbench.engine.observe.profiler import ProfileAnswer, StepProfiler
from llmbench.engine.observe.step_log import StepLog
from llmbench.engine.observe.timing import PhaseClock, StepRecord, step_timer
from llmbench.engine.outputs.in_flight import InFlightStep
from llmbench.engine.outputs.output_processor import OutputProcessor
from llmbench.engine.parallel.launch import start_runner
from llmbench.engine.request import FinishReason, RequestOutput, SamplingParams, StepOutputs
from llmbench.engine.scheduling.block_manager import BlockManager
from llmbench.engine.scheduling.scheduler import Scheduler, SchedulerOutput
from llmbench.engine.scheduling.sequence import Sequence

logger = logging.getLogger(__name__)


def make_executor(config: EngineConfig) -> ModelRunner | NullExecutor:
    """The null executor or the real model runner (rank 0 of a tensor-parallel group when
    tensor_parallel_size > 1); the one place that chooses, and where the model facts are resolved."""
    facts = resolve_model_facts(config)
    if config.model.executor == "null":
        return NullExecutor(config, facts)
    if config.tensor_parallel_size > 1:
        return start_runner(config, facts, lambda group: ModelRunner(config, facts, group))
    return ModelRunner(config, facts)


class LLMEngine:
    def __init__(self, config: EngineConfig, step_hook=None):
        config.check_ranks()
        self.config = config
        # a profiler's step window: before_step() as each step begins (hand-overs are none), close() at end
        self.step_hook = step_hook
        self.executor = make_executor(config)
        self.block_manager = BlockManager(self.executor.num_blocks, config.block_size, config.prefix_caching)
        self.scheduler = Scheduler(config, self.block_manager)
        self.output_processor = OutputProcessor(self.scheduler, self.executor.shape.eos_token_id)
        self._requests: dict[str, Sequence] = {}  # live: waiting or running
        self._pending: list[RequestOutput] = []  # errors, rejections, aborts: emitted by the next step
        self._seq_ids = itertools.count()
        self._generate_ids = itertools.count()
        self._step_count = 0
        self.step_log = StepLog(step_timer(self.executor) if config.step_timing else None)
        self._nvtx = nvtx_ranges()  # None unless a profiler is attached
        self._in_flight: InFlightStep | None = None  # launched, not yet (wholly) processed
        self.profiler = StepProfiler()  # a window opened and closed over HTTP (llmbench serve)

    # requests in

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        arrival_time: float | None = None,
    ) -> None:
        arrival_time = time.perf_counter() if arrival_time is None else arrival_time
        if request_id in self._requests:
            problem = f"duplicate request id {request_id!r}"
        else:
            problem = input_problem(prompt_token_ids, params, self.executor.shape.vocab_size)
        if problem is not None:
            num_prompt = len(prompt_token_ids) if isinstance(prompt_token_ids, (list, tuple)) else 0
            self._finish_early(request_id, FinishReason.ERROR, problem, num_prompt)
            return
        problem = rejection(len(prompt_token_ids), params, self.executor.max_model_len, self.scheduler)
        if problem is not None:
            self._finish_early(request_id, FinishReason.REJECTED, problem, len(prompt_token_ids))
            return
        seq = Sequence(next(self._seq_ids), request_id, prompt_token_ids, params, arrival_time)
        self._requests[request_id] = seq
        self.scheduler.add(seq)

    def _finish_early(self, request_id: str, reason: FinishReason, message: str, num_prompt: int) -> None:
        logger.debug("request %r finishes %s: %s", request_id, reason.value, message)
        output = RequestOutput(request_id, [], True, reason, error=message, num_prompt_tokens=num_prompt)
        self._pending.append(output)  # finished, with its reason

    def abort(self, request_id: str) -> None:
        seq = self._requests.pop(request_id, None)
        if seq is None:
            return  # already finished, or never known
        self.scheduler.abort(seq)
        self._pending.append(
            RequestOutput(
                request_id,
                [],
                finished=True,
                finish_reason=FinishReason.ABORT,
                t_scheduled=seq.t_scheduled,
                num_prompt_tokens=seq.num_prompt_tokens,
                num_cached_tokens=seq.num_cached_tokens,
                token_ids=seq.known_output_ids,
            )
        )

    def reset_prefix_cache(self) -> None:
        self.block_manager.reset_prefix_cache()

    def start_profile(self, trace: str) -> ProfileAnswer:
        """Profile the steps from the next on (engine/observe/profiler.py); a torch trace goes to `trace`."""
        return self.profiler.start(trace)

    def stop_profile(self) -> ProfileAnswer:
        return self.profiler.stop()

    def has_unfinished(self) -> bool:
        return bool(self._requests or self._pending)

    # the loop

    def step(self, while_waiting: Callable[[], object] | None = None) -> StepOutputs:
        """while_waiting, the caller's own work, runs once the step's work is on the device and before
        its tokens are awaited: a benchmark client's bookkeeping is then no idle time of the device."""
        lag = self.config.async_output or self.config.async_scheduling
        in_flight = self._in_flight
        if in_flight is not None and in_flight.streamed and in_flight.num_unread > lag:
            if while_waiting is not None:
                while_waiting()  # the window's later forwards are on the device
            return self._hand_over(in_flight)
        if self.step_hook is not None:
            self.step_hook.before_step()
        clock = PhaseClock(self._nvtx, self._step_count)
        wait_ms = 0.0
        if in_flight is not None and not self.config.async_scheduling:
            # async output: step n is read back before step n+1 is scheduled (a wait, inside the
            # profile's schedule range so that every step keeps the same ranges)
            in_flight.wait()
            wait_ms = (time.perf_counter() - clock.start) * 1e3
        scheduled = self.scheduler.schedule()
        schedule_ms = clock.lap_ms("prepare") - wait_ms
        launched = self._launch(scheduled)
        prepare_ms = clock.lap_ms("sample")
        self.step_log.measure_batch()  # the step before's, as its entries still are
        if while_waiting is not None:
            while_waiting()
        done = launched
        if lag:
            # the step just launched runs on the device while the one before is read back and processed
            done, self._in_flight = in_flight, launched
        first_forward = done.num_read if done is not None else 0
        sampled = done.read(1 if done.streamed and not lag else None) if done is not None else []
        if done is not None and done.num_unread:
            self._in_flight = done  # a streamed window: its later forwards are handed over one by one
        sample_ms = clock.lap_ms("output") + wait_ms
        outputs = self._process(done, sampled, first_forward)
        output_ms = clock.lap_ms()
        if self.config.step_timing:
            self._record(clock, scheduled, launched, schedule_ms, prepare_ms, sample_ms, output_ms)
        self._step_count += 1
        return outputs

    def _hand_over(self, in_flight: InFlightStep) -> StepOutputs:
        """The next forward of a streamed window, processed as soon as its tokens are on the host;
        nothing is scheduled. Its wait and output time go to the next step's record, which starts
        with the first such hand-over."""
        start = time.perf_counter()
        first_forward = in_flight.num_read
        sampled = in_flight.read(1)
        read = time.perf_counter()
        if not in_flight.num_unread:
            self._in_flight = None
        outputs = self._process(in_flight, sampled, first_forward)
        self.step_log.carry(start, (read - start) * 1e3, (time.perf_counter() - read) * 1e3)
        return outputs

    def _record(
        self,
        clock: PhaseClock,
        scheduled: SchedulerOutput,
        launched: InFlightStep | None,
        schedule_ms: float,
        prepare_ms: float,
        sample_ms: float,
        output_ms: float,
    ) -> None:
        """The step's record; its batch shape is filled in while the next step is on the device."""
        record = StepRecord(
            step=self._step_count,
            t_start=clock.start,
            t_end=clock.last,
            num_prefill_tokens=0,  # the batch shape: measured later
            num_decode_seqs=0,
            num_running=len(self.scheduler.running),
            num_waiting=len(self.scheduler.waiting),
            num_blocks_used=self.block_manager.num_used,
            num_preempted=scheduled.num_preempted,
            num_steps=scheduled.batch.num_steps,
            schedule_ms=schedule_ms,
            prepare_ms=prepare_ms,
            sample_ms=sample_ms,
            output_ms=output_ms,
            comm_ms=self.executor.take_comm_ms(),
        )
        span = launched.span if launched is not None else None
        self.step_log.add(record, scheduled.batch, scheduled.num_tokens, span)

    def _launch(self, scheduled: SchedulerOutput) -> InFlightStep | None:
        """Start the batch on the device and move its sequences past it, tokens still unknown."""
        batch = scheduled.batch
        if not batch.seqs:
            return None
        if self._in_flight is not None:
            self._in_flight.launch_rest()
        if batch.feed_rows:
            batch.feed_tokens = self._in_flight.tokens
        streamed = self.config.stream_multi_step and batch.num_steps > 1
        gpu_timer = self.step_log.gpu_timer
        if gpu_timer is None:
            launched = InFlightStep(scheduled, self.executor.execute(batch), streamed=streamed)
        else:
            span = gpu_timer.span()
            forwards = self.executor.execute(batch, before_launch=span.record_start)
            launched = InFlightStep(scheduled, forwards, span, streamed)
            gpu_timer.stop(span)
        self.scheduler.advance(scheduled)
        return launched

    def _process(
        self, done: InFlightStep | None, sampled: list[list[int]], first_forward: int
    ) -> StepOutputs:
        if done is None:
            outputs = StepOutputs([], [], [])
        else:
            outputs, finished = self.output_processor.process(done.scheduled, sampled, first_forward)
            for seq in finished:
                del self._requests[seq.request_id]
        if self._pending:
            now = time.perf_counter()
            for output in self._pending:
                output.t_emit = now
            outputs.outputs[:0] = self._pending
            self._pending = []
        return outputs

    def drain_step_records(self) -> list[StepRecord]:
        """Step records so far, GPU times filled in (engine/observe/step_log.py StepLog.drain)."""
        return self.step_log.drain(idle=not self.has_unfinished())

    def generate(
        self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams]
    ) -> list[list[int]]:
        """Run prompts to completion and return each one's output tokens. Meant for offline use:
        outputs of requests added by other callers meanwhile are dropped."""
        params_list = params if isinstance(params, list) else [params] * len(prompts)
        if len(params_list) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(params_list)} sampling params")
        index = {}
        for prompt, prompt_params in zip(prompts, params_list, strict=True):
            request_id = f"generate-{next(self._generate_ids)}"
            index[request_id] = len(index)
            self.add_request(request_id, prompt, prompt_params)
        results: list[list[int] | None] = [None] * len(prompts)
        problems = []
        while any(r is None for r in results):
            for output in self.step():
                if output.finished and output.request_id in index:
                    results[index[output.request_id]] = output.token_ids
                    if output.error is not None:
                        problems.append(f"prompt {index[output.request_id]}: {output.error}")
        if problems:
            raise ValueError("; ".join(problems))
        return results

    def shutdown(self) -> None:
        self.profiler.close()
        if self.step_hook is not None:
            self.step_hook.close()
        self.executor.shutdown()
