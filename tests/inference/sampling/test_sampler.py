"""The batched sampler on crafted logits: masks, penalties, seeds, greedy, logprobs."""

from __future__ import annotations

import time

import pytest
import torch

from inference.sampling import Sampler, SamplingParams, SamplingRow, make_generator, token_logprobs

VOCAB = 8


def row(
    params: SamplingParams,
    prompt: list[int] | None = None,
    output: list[int] | None = None,
    blocked: frozenset[int] = frozenset(),
) -> SamplingRow:
    return SamplingRow(
        params=params,
        token_ids=[*(prompt or []), *(output or [])],
        num_prompt_tokens=len(prompt or []),
        generator=make_generator(params.seed),
        min_tokens_blocked_ids=blocked,
    )


def drawn(logits: torch.Tensor, params: SamplingParams, draws: int = 400) -> set[int]:
    """Tokens ever drawn for one row, sampled as one batch of identical rows."""
    sampler = Sampler(logits.shape[-1])
    batch = logits.view(1, -1).repeat(draws, 1)
    return set(sampler(batch, [row(params) for _ in range(draws)]).token_ids)


LOGITS = torch.log(torch.tensor([0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.015, 0.005]))


def test_top_k_limits_draws_to_k_most_likely() -> None:
    assert drawn(LOGITS, SamplingParams(top_k=2)) == {0, 1}


def test_top_p_keeps_smallest_prefix_reaching_mass() -> None:
    # 0.4 + 0.25 = 0.65 < 0.7, so the third token is needed and the fourth never is.
    assert drawn(LOGITS, SamplingParams(top_p=0.7)) == {0, 1, 2}


def test_min_p_drops_tokens_below_fraction_of_top() -> None:
    # threshold 0.3 * 0.4 = 0.12: tokens with p >= 0.12 are 0, 1, 2.
    assert drawn(LOGITS, SamplingParams(min_p=0.3)) == {0, 1, 2}


def test_no_truncation_reaches_tail() -> None:
    assert drawn(LOGITS, SamplingParams(), draws=3000) >= {0, 1, 2, 3, 4, 5}


def test_sampling_frequencies_follow_softmax() -> None:
    draws = 4000
    out = Sampler(VOCAB)(LOGITS.repeat(draws, 1), [row(SamplingParams()) for _ in range(draws)])
    share = sum(1 for t in out.token_ids if t == 0) / draws
    assert abs(share - 0.4) < 0.04


def test_top_k_mixed_with_untruncated_rows() -> None:
    sampler = Sampler(VOCAB)
    rows = [row(SamplingParams(top_k=1)), row(SamplingParams(top_k=3, top_p=0.6))] * 200
    out = sampler(LOGITS.repeat(len(rows), 1), rows)
    assert set(out.token_ids[0::2]) == {0}
    assert set(out.token_ids[1::2]) == {
        0,
        1,
    }  # within the top 3, 0.4 / 0.8 = 0.5 < 0.6: the second token is kept


def test_seeded_rows_reproduce_across_batch_composition_and_position() -> None:
    sampler = Sampler(VOCAB)
    logits = torch.randn(5, VOCAB, generator=torch.Generator().manual_seed(0))
    target = logits[2]

    def run_alone(steps: int) -> list[int]:
        r = row(SamplingParams(seed=7))
        return [sampler(target.view(1, -1), [r]).token_ids[0] for _ in range(steps)]

    def run_in_batch(steps: int, position: int) -> list[int]:
        seeded = row(SamplingParams(seed=7))
        others = [row(SamplingParams(temperature=0.5, top_k=3)) for _ in range(4)]
        rows = [*others[:position], seeded, *others[position:]]
        batch = torch.cat([logits[:position], target.view(1, -1), logits[position:4]])
        return [sampler(batch, rows).token_ids[position] for _ in range(steps)]

    alone = run_alone(30)
    assert run_in_batch(30, 0) == alone
    assert run_in_batch(30, 4) == alone
    other_seed = row(SamplingParams(seed=8))
    assert [sampler(target.view(1, -1), [other_seed]).token_ids[0] for _ in range(30)] != alone


def test_greedy_equals_argmax_and_padded_columns_ignored() -> None:
    logits = torch.randn(4, VOCAB + 3)
    logits[:, VOCAB:] = 100.0  # padded vocabulary columns must never win
    out = Sampler(VOCAB)(logits, [row(SamplingParams(temperature=0)) for _ in range(4)])
    assert out.token_ids == logits[:, :VOCAB].argmax(dim=1).tolist()
    bf16 = Sampler(VOCAB)(logits.bfloat16(), [row(SamplingParams(temperature=0))] * 4)
    assert bf16.token_ids == logits[:, :VOCAB].bfloat16().float().argmax(dim=1).tolist()


def test_repetition_penalty_matches_hand_computed() -> None:
    logits = torch.tensor([[2.0, -1.0, 1.0, 0.5]])
    # token 0 (prompt) and 1 (output) seen: 2.0 / 4 = 0.5 and -1.0 * 4 = -4.0.
    # Greedy then picks token 2 (1.0) over token 3 (0.5) and the penalised token 0.
    params = SamplingParams(temperature=0, repetition_penalty=4.0)
    out = Sampler(4)(logits, [row(params, prompt=[0], output=[1])])
    assert out.token_ids == [2]
    adjusted = Sampler(4)._adjust(logits.clone(), [row(params, prompt=[0], output=[1])])
    assert adjusted.tolist() == [[0.5, -4.0, 1.0, 0.5]]


def test_presence_and_frequency_penalties_match_openai_rule() -> None:
    logits = torch.tensor([[1.0, 1.0, 1.0, 1.0]])
    params = SamplingParams(presence_penalty=0.5, frequency_penalty=0.25)
    r = row(params, prompt=[3, 3, 3], output=[0, 0, 1])  # prompt tokens are not counted
    adjusted = Sampler(4)._adjust(logits.clone(), [r])
    expected = [1.0 - 0.5 - 2 * 0.25, 1.0 - 0.5 - 0.25, 1.0, 1.0]
    assert adjusted[0].tolist() == pytest.approx(expected)


def test_logit_bias_moves_greedy_choice() -> None:
    logits = torch.tensor([[3.0, 0.0, 0.0, 0.0]])
    params = SamplingParams(temperature=0, logit_bias={2: 5.0})
    assert Sampler(4)(logits, [row(params)]).token_ids == [2]
    with pytest.raises(ValueError, match="logit_bias"):
        Sampler(4)(logits, [row(SamplingParams(logit_bias={9: 1.0}))])


def test_min_tokens_blocks_eos_until_reached() -> None:
    logits = torch.tensor([[0.0, 10.0, 0.0, 1.0]])  # eos = 1 is by far the most likely
    params = SamplingParams(temperature=0, min_tokens=2)
    eos = frozenset({1})
    sampler = Sampler(4)
    assert sampler(logits, [row(params, output=[0], blocked=eos)]).token_ids == [3]
    assert sampler(logits, [row(params, output=[0, 3], blocked=eos)]).token_ids == [1]
    sampled = drawn(logits[0], SamplingParams(min_tokens=1))  # no blocked ids given
    assert 1 in sampled


def test_logprobs_are_raw_log_softmax_with_rank_and_top() -> None:
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0]])
    params = SamplingParams(temperature=0, logprobs=2, repetition_penalty=2.0)
    out = Sampler(4)(logits, [row(params, prompt=[1]), row(SamplingParams(temperature=0))][:1])
    item = out.logprobs[0]
    assert item is not None
    logp = torch.log_softmax(logits[0], dim=0)
    assert item.token_id == 2  # penalty: 3.0 / 2 = 1.5 < 2.0
    assert item.logprob == pytest.approx(logp[2].item())  # before the penalty
    assert item.rank == 2
    assert [t for t, _ in item.top] == [1, 2]
    assert item.top[0][1] == pytest.approx(logp[1].item())
    plain = token_logprobs(logits, torch.tensor([3]), 0)[0]
    assert plain.rank == 4 and plain.top == []
    none = Sampler(4)(logits, [row(SamplingParams())]).logprobs
    assert none == [None]


def test_step_time_batch_64_vocab_49152() -> None:
    vocab = 49152
    sampler = Sampler(vocab)
    logits = torch.randn(64, vocab)
    rows = [
        row(
            SamplingParams(
                temperature=0.8,
                top_p=0.9,
                top_k=50,
                min_p=0.05,
                repetition_penalty=1.1,
                presence_penalty=0.2,
                frequency_penalty=0.1,
                seed=i if i % 2 else None,
            ),
            prompt=list(range(i, i + 128)),
            output=list(range(i, i + 64)),
        )
        for i in range(64)
    ]
    sampler(logits, rows)  # warm-up
    start = time.perf_counter()
    out = sampler(logits, rows)
    elapsed = time.perf_counter() - start
    greedy_rows = [row(SamplingParams(temperature=0)) for _ in range(64)]
    start = time.perf_counter()
    sampler(logits, greedy_rows)
    greedy_elapsed = time.perf_counter() - start
    print(
        f"\nsampler step, 64 rows x {vocab}: "
        f"full {elapsed * 1e3:.1f} ms, greedy {greedy_elapsed * 1e3:.2f} ms"
    )
    assert len(out.token_ids) == 64 and all(0 <= t < vocab for t in out.token_ids)


def test_penalties_touch_only_the_rows_that_set_them() -> None:
    logits = torch.tensor([[2.0, -1.0, 1.0, 0.5]]).repeat(3, 1)
    rows = [
        row(SamplingParams(repetition_penalty=4.0), prompt=[0], output=[1]),
        row(SamplingParams(), prompt=[0], output=[1]),  # same history, no penalty
        row(SamplingParams(frequency_penalty=1.0), prompt=[0], output=[1, 1]),
    ]
    adjusted = Sampler(4)._adjust(logits.clone(), rows)
    assert adjusted[0].tolist() == [0.5, -4.0, 1.0, 0.5]
    assert adjusted[1].tolist() == logits[1].tolist()
    assert adjusted[2].tolist() == [2.0, -3.0, 1.0, 0.5]  # the prompt's 0 is not output


def test_a_row_reads_its_sequence_without_copying() -> None:
    from inference.engine.request_state import SampleState
    from inference.engine.sequence import Sequence

    seq = Sequence("r", [5, 6, 7], SamplingParams(min_tokens=2))
    state = SampleState(seq, None, None, None, frozenset({1}))  # type: ignore[arg-type]
    first = state.sampling_row()
    assert first.token_ids is seq.token_ids and state.sampling_row() is first
    assert first.num_output_tokens == 0 and first.min_tokens_blocking
    seq.append_token(3)
    seq.append_token(1)
    assert first.num_output_tokens == 2 and not first.min_tokens_blocking
    assert list(first.output_token_ids()) == [3, 1]
