"""Rejection sampling of proposed tokens follows the target distribution exactly.

Chi-square bound on a vocabulary of 8, seeded: 8 categories, 7 degrees of freedom, whose
0.999 quantile is 24.32. For the first emitted token with proposal d = 3 (p(d) = 0.10),
at N = 4000 the verifier scores 8.4 (and 7.8 for the token after an accepted d; the
statistic's mean is 7); always accepting d scores N (1 - p(d)) / p(d) = 36000, and
accepting with p(d) but drawing from p itself on rejection (no residual) scores 377, so
both naive variants fail the bound by far (the test computes them too).
"""

from __future__ import annotations

import torch

from inference.sampling.params import SamplingParams
from inference.sampling.sampler import Sampler, SamplingRow
from inference.sampling.speculative import verify

CHI2_999_DF7 = 24.32
PROBS = torch.tensor([0.30, 0.20, 0.15, 0.10, 0.10, 0.08, 0.05, 0.02])
N = 4000


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def row(seed: int, **kw: object) -> SamplingRow:
    params = SamplingParams(temperature=1.0, seed=seed, **kw)  # type: ignore[arg-type]
    generator = torch.Generator().manual_seed(seed)
    return SamplingRow(params, [5, 6, 7], 3, generator, frozenset())


def first_tokens(proposed: list[int]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Counts of the first and (after an accepted first) second emitted token."""
    sampler = Sampler(8)
    logits = PROBS.log().repeat(len(proposed) + 1, 1)
    r = row(1234)
    first = torch.zeros(8)
    second = torch.zeros(8)
    accepted = 0
    for _ in range(N):
        out = verify(sampler, logits, r, proposed)
        first[out.token_ids[0]] += 1
        if out.num_accepted >= 1:
            accepted += 1
            second[out.token_ids[1]] += 1
    return first, second, accepted


def test_emitted_tokens_follow_the_target_distribution() -> None:
    first, second, accepted = first_tokens([3, 0])
    assert chi_square(first, PROBS) < CHI2_999_DF7
    # Given the first proposal was accepted, the next token is again drawn from p.
    assert chi_square(second, PROBS) < CHI2_999_DF7
    assert abs(accepted / N - 0.10) < 0.02  # d accepted with probability p(d)


def test_naive_acceptance_fails_the_same_bound() -> None:
    first, _, _ = first_tokens([3])
    always = torch.zeros(8)
    always[3] = N  # accepting every proposal
    assert chi_square(always, PROBS) > 1000 * CHI2_999_DF7
    # Accept with p(d), else draw from p itself (not the residual): d is over-represented.
    generator = torch.Generator().manual_seed(7)
    no_residual = torch.zeros(8)
    for _ in range(N):
        if float(torch.rand(1, generator=generator)) < float(PROBS[3]):
            no_residual[3] += 1
        else:
            no_residual[int(torch.multinomial(PROBS, 1, generator=generator))] += 1
    assert chi_square(no_residual, PROBS) > CHI2_999_DF7
    assert chi_square(first, PROBS) < CHI2_999_DF7


def test_greedy_accepts_while_the_argmax_agrees() -> None:
    sampler = Sampler(8)
    logits = torch.full((4, 8), -5.0)
    for position, best in enumerate([4, 1, 6, 2]):
        logits[position, best] = 5.0
    greedy = SamplingRow(SamplingParams(temperature=0), [0], 1, None, frozenset())
    out = verify(sampler, logits, greedy, [4, 1, 0])
    assert out.token_ids == [4, 1, 6] and out.num_accepted == 2
    out = verify(sampler, logits, greedy, [4, 1, 6])
    assert out.token_ids == [4, 1, 6, 2] and out.num_accepted == 3
    out = verify(sampler, logits, greedy, [0, 1, 6])
    assert out.token_ids == [4] and out.num_accepted == 0


def test_penalties_see_the_proposed_tokens_before_each_position() -> None:
    sampler = Sampler(8)
    logits = torch.zeros(3, 8)
    logits[:, 4] = 1.0
    logits[:, 5] = 0.9
    params = SamplingParams(temperature=0, repetition_penalty=2.0)
    greedy = SamplingRow(params, [0], 1, None, frozenset())
    # Row 0 prefers 4; row 1 has seen 4 (penalised to 0.5), so it prefers 5.
    out = verify(sampler, logits, greedy, [4, 4])
    assert out.token_ids == [4, 5] and out.num_accepted == 1
