"""Action masks from labels: the first ACTION_DIM action labels (current action) and the rest (next ones)."""

import torch

from prismatic.vla.constants import ACTION_DIM, ACTION_TOKEN_BEGIN_IDX, IGNORE_INDEX


def _counted(labels: torch.Tensor) -> torch.Tensor:
    return torch.cumsum(labels != IGNORE_INDEX, dim=1)


def get_current_action_mask(labels: torch.Tensor) -> torch.Tensor:
    n = _counted(labels)
    return (n >= 1) & (n <= ACTION_DIM) & (labels > ACTION_TOKEN_BEGIN_IDX)


def get_next_actions_mask(labels: torch.Tensor) -> torch.Tensor:
    return (_counted(labels) > ACTION_DIM) & (labels > ACTION_TOKEN_BEGIN_IDX)
