"""Log-probabilities of chosen tokens, with their rank and the top alternatives."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class TokenLogprobs:
    """One position's chosen token, its log-probability and rank, and the top ``k``."""

    token_id: int
    logprob: float
    rank: int  # 1 = the most likely token
    top: list[tuple[int, float]]  # (token id, logprob), most likely first


def token_logprobs(
    logits: torch.Tensor, token_ids: torch.Tensor, k: int, vocab_size: int | None = None
) -> list[TokenLogprobs]:
    """Raw log-softmax of the model's ``logits`` (N, V) at ``token_ids`` (N,).

    The values come from the model's own distribution, before penalties or temperature,
    which is what OpenAI reports. ``vocab_size`` drops padded vocabulary columns.
    """
    if logits.dim() != 2:
        raise ValueError(f"logits must be 2-D (N, V), got shape {tuple(logits.shape)}")
    if token_ids.numel() != logits.shape[0]:
        raise ValueError(f"token_ids has {token_ids.numel()} ids for {logits.shape[0]} rows")
    if k < 0:
        raise ValueError(f"k must be non-negative, got {k}")
    if vocab_size is not None:
        logits = logits[:, :vocab_size]
    if logits.shape[0] == 0:
        return []
    logp = torch.log_softmax(logits.float(), dim=-1)  # (N, V)
    ids = token_ids.to(device=logp.device, dtype=torch.long).view(-1, 1)
    chosen = logp.gather(1, ids)  # (N, 1)
    # Ties count in the token's favour: rank = 1 + number of strictly more likely tokens.
    ranks = (logp > chosen).sum(dim=1) + 1
    k = min(k, logp.shape[1])
    top_values, top_ids = logp.topk(k, dim=1) if k else (logp[:, :0], ids[:, :0])
    chosen_list = chosen.view(-1).tolist()
    ranks_list = ranks.tolist()
    ids_list = ids.view(-1).tolist()
    top_values_list = top_values.tolist()
    top_ids_list = top_ids.tolist()
    return [
        TokenLogprobs(
            token_id=int(ids_list[i]),
            logprob=float(chosen_list[i]),
            rank=int(ranks_list[i]),
            top=list(zip(top_ids_list[i], top_values_list[i], strict=True)),
        )
        for i in range(len(ids_list))
    ]
