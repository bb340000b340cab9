"""The token embedding split by vocabulary rows over the tensor-parallel ranks."""

from __future__ import annotations

import torch
from llmbench.engine.parallel.group import Group
from torch import nn


class VocabParallelEmbedding(nn.Module):
    """This rank's rows of the embedding: a token outside them embeds as zeros, and the all-reduce
    adds the one rank that holds its row. One rank holds every row and skips both."""

    def __init__(self, vocab_size: int, hidden_size: int, group: Group):
        super().__init__()
        self.group = group
        self.rows = -(-vocab_size // group.size)  # the last rank's slice padded up to this
        self.start = group.rank * self.rows
        # the loader always sets the weights: no init (slow under the meta device)
        self.weight = nn.Parameter(torch.empty(self.rows, hidden_size))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.group.size == 1:
            return nn.functional.embedding(input_ids, self.weight)
        local = input_ids - self.start
        outside = (local < 0) | (local >= self.rows)
        hidden = nn.functional.embedding(local.masked_fill(outside, 0), self.weight)
        return self.group.all_reduce(hidden.masked_fill(outside[:, None], 0.0))
