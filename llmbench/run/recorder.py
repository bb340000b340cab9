"""What the client keeps of one request: its row from submit to finish, each output stamped on arrival."""

from __future__ import annotations

from collections.abc import Iterable

from llmbench.backends.base import ServedOutput
from llmbench.config.schema import WorkloadConfig
from llmbench.engine.request import RequestOutput, SamplingParams, StepOutputs
from llmbench.results.records import RequestRecord
from llmbench.run.workload import WorkloadRequest


def new_record(
    request: WorkloadRequest, trial: int, warmup: bool, submit_time: float, save_tokens: bool
) -> RequestRecord:
    """The row of a request submitted at `submit_time` (seconds from the run start)."""
    return RequestRecord(
        id=request.request_id,
        trial=trial,
        warmup=warmup,
        prompt_len=len(request.prompt_token_ids),
        submit_time=submit_time,
        prompt_token_ids=list(request.prompt_token_ids) if save_tokens else None,
        # a session's turn keeps its answer: the next turn's prompt holds it
        output_token_ids=[] if save_tokens or request.turn is not None else None,
        prompt=request.prompt if save_tokens else None,
        offered_rate=request.offered_rate,
        session=request.session,
        turn=request.turn,
    )


def sampling_params(request: WorkloadRequest, workload: WorkloadConfig) -> SamplingParams:
    return SamplingParams(
        max_tokens=request.output_len,
        temperature=workload.temperature,
        top_p=workload.top_p,
        top_k=workload.top_k,
        ignore_eos=workload.ignore_eos,
    )


def record_outputs(
    live: dict[str, RequestRecord],
    outputs: list[RequestOutput],
    arrival: float,
    run_start: float,
    stamped: bool,
    save_tokens: bool,
) -> list[RequestRecord]:
    """Add one poll's outputs to their live requests' rows (keyed by backend request id): each reached
    the client at `arrival` (perf_counter), or at its own t_emit when the backend stamps outputs.
    Finished requests leave `live`; their rows are returned. Runs between engine steps for
    every running request, so the common output, one more token of a request that goes on, takes a
    short way (on the H200 host the general one cost ~0.4 ms a step at 256 requests)."""
    finished = []
    # one float for the whole poll, unless outputs carry their own times: each token's entry in its
    # request's token_times then points to it, instead of allocating one a token
    seen_at_arrival = arrival - run_start
    for output in outputs:
        record = live.get(output.request_id)
        if record is None:
            continue
        seen = output.t_emit - run_start if stamped else seen_at_arrival
        if (
            len(output.new_token_ids) == 1
            and record.first_token_time is not None
            and not (save_tokens or output.finished)
        ):
            record.token_times.append(seen)
            record.output_len += 1
            continue
        record_output(record, output, seen, save_tokens)
        if output.finished:
            finished.append(live.pop(output.request_id))
    return finished


def record_output(record: RequestRecord, output: RequestOutput, arrival: float, save_tokens: bool) -> None:
    """Add an output that reached the client at `arrival` (run-relative): k tokens arrive together."""
    n = len(output.new_token_ids)
    if n:
        if record.first_token_time is None:
            record.first_token_time = arrival
        if isinstance(output, ServedOutput) and output.event_tokens:
            _mark_same_read_events(record, output.event_tokens)
        record.token_times.extend([arrival] * n)
        record.output_len += n
        if save_tokens:
            record.output_token_ids.extend(output.new_token_ids)
    elif isinstance(output, ServedOutput) and output.submitted is not None:  # its stream loop began it
        record.submit_time = output.submitted + arrival - output.t_emit
        if output.prompt is not None:  # the text the backend made of the prompt: what the server got
            record.prompt, record.prompt_token_ids = output.prompt, output.prompt_token_ids
    if output.finished:
        record.finish_reason = output.finish_reason.value if output.finish_reason else None
        record.error = output.error
        record.finish_time = arrival
        if isinstance(output, ServedOutput):
            _record_served(record, output, arrival - output.t_emit)


def _mark_same_read_events(record: RequestRecord, event_tokens: list[int]) -> None:
    """Where each event of one read after its first begins in token_times, which the read's tokens are
    about to join: the events share the read's time, and ITL counts each as an arrival."""
    starts = record.same_read_events if record.same_read_events is not None else []
    at = len(record.token_times)
    for size in event_tokens[:-1]:
        at += size
        starts.append(at)
    record.same_read_events = starts


def _record_served(record: RequestRecord, output: ServedOutput, shift: float) -> None:
    """An HTTP request's server timestamps and client phases, moved by `shift` onto the run's clock, and
    its prompt as the server counted it."""
    if output.prompt_tokens is not None:
        record.planned_prompt_len, record.prompt_len = record.prompt_len, output.prompt_tokens
    record.cached_prompt_tokens = output.cached_tokens
    record.reasoning_tokens, record.answer_start = output.reasoning_tokens, output.answer_start
    if output.server_timestamps:
        record.server_timestamps = {
            key: [t + shift for t in value] if isinstance(value, list) else value + shift
            for key, value in output.server_timestamps.items()
            if value is not None
        }
    for phase, stamp in (output.http_phases or {}).items():
        if stamp is not None:
            setattr(record, f"{phase}_time", stamp + shift)  # the columns of records.HTTP_PHASE_COLUMNS


class DeferredOutputs:
    """The outputs of a poll that can be recorded during the next one: those of requests that go on.
    Recording a poll's outputs is the client's work, a few hundred us a step for hundreds of streams;
    an in-process engine runs it (as poll's while_waiting) while its next step is on the device, so
    that a synchronous engine's device does not idle for the client. Every output of a request that
    finished in the poll is recorded at once: the request leaves `live` then, and its row is written.
    An engine step's plain decodes (StepOutputs) never finish a request, and are recorded from its
    lists."""

    def __init__(self, live: dict[str, RequestRecord], run_start: float, stamped: bool, save_tokens: bool):
        self.live, self.run_start, self.stamped, self.save_tokens = live, run_start, stamped, save_tokens
        self._kept: tuple[list[RequestOutput], StepOutputs | None, float] | None = None

    def add(self, outputs: Iterable[RequestOutput], arrival: float) -> list[RequestRecord]:
        """A poll's outputs, which reached the client at `arrival`: those of the requests they finish
        recorded now, their rows returned (they left `live`); the others kept for record()."""
        self.record()  # the last poll's, if its backend did not run them while waiting
        step = outputs if isinstance(outputs, StepOutputs) else None
        if step is not None:
            outputs = step.outputs
        finishing = {output.request_id for output in outputs if output.finished}
        if finishing:
            now = [output for output in outputs if output.request_id in finishing]
            outputs = [output for output in outputs if output.request_id not in finishing]
        else:
            now = []
        if outputs or step is not None:
            self._kept = (outputs, step, arrival)
        return record_outputs(self.live, now, arrival, self.run_start, self.stamped, self.save_tokens)

    def record(self) -> None:
        """The kept outputs into their requests' rows (none of them finishes a request)."""
        if self._kept is None:
            return
        outputs, step, arrival = self._kept
        self._kept = None
        record_outputs(self.live, outputs, arrival, self.run_start, self.stamped, self.save_tokens)
        if step is not None:
            self._record_decodes(step, arrival)

    def _record_decodes(self, step: StepOutputs, arrival: float) -> None:
        """One more token each, for requests whose first token is recorded: a token time a request
        (one float for them all), and the token itself when tokens are saved."""
        live, save_tokens = self.live, self.save_tokens
        seen = (step.t_emit if self.stamped else arrival) - self.run_start
        for request_id, token in zip(step.decode_request_ids, step.decode_token_ids, strict=True):
            record = live.get(request_id)
            if record is not None:
                record.token_times.append(seen)
                record.output_len += 1
                if save_tokens:
                    record.output_token_ids.append(token)
