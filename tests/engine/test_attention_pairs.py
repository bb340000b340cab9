"""A step record counts its attention's causal query-key pairs: a prompt chunk of n tokens after p
cached ones n*p + n(n+1)/2, a decode its sequence's length (what prefill attention FLOPs are from)."""

from llmbench.engine.request import SamplingParams

from tests.engine.helpers import model_engine


def test_a_chunked_prompt_counts_its_causal_pairs_and_decodes_their_length():
    engine = model_engine(max_num_batched_tokens=16, chunked_prefill=True)
    engine.add_request("a", list(range(3, 33)), SamplingParams(max_tokens=3, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    records = engine.drain_step_records()
    shapes = [(r.num_prefill_tokens, r.num_decode_seqs, r.num_context_tokens) for r in records]
    assert shapes == [(16, 0, 16), (14, 0, 30), (0, 1, 31), (0, 1, 32)]
    # 16 tokens from position 0; 14 after 16 cached: 14 * 16 + 14 * 15 / 2; decodes: their length
    assert [r.num_attention_pairs for r in records] == [136, 329, 31, 32]
