"""Rollout ranks -> actor ranks: every rollout epoch's env columns go to the actor rank that trains on them.

A piece is a dict of tensors with the envs on dim 1 (``[T, N, ...]``, ``[T + 1, N, ...]``), plus a
``"replay"`` dict of the same layout (``training.rollout.Rollout.columns`` makes one, ``Rollout.from_columns``
reads one back). Actor ``A[i]`` gets envs ``[i N/|A|, (i+1) N/|A|)`` from whichever rollout ranks hold them
(:class:`.placement.Roles`); nothing moves between ranks when every rank does everything.
"""

from __future__ import annotations

from typing import Any

import torch

from vlarl_cli.distributed.placement import Roles
from vlarl_cli.distributed.transport import isend_dict, recv_dict

Columns = dict[str, Any]  # name -> tensor [T(+1), N, ...], and "replay" -> {name: tensor [T, N, ...]}


def select_columns(piece: Columns, cols: range) -> Columns:
    """Envs ``cols`` (positions in ``piece``) of a piece."""
    sl = slice(cols.start, cols.stop)
    out: Columns = {k: v[:, sl] for k, v in piece.items() if k != "replay"}
    out["replay"] = {k: v[:, sl] for k, v in piece["replay"].items()}
    return out


def join_columns(parts: list[Columns]) -> Columns:
    """Concatenate pieces (in env order) along the env axis."""
    out: Columns = {k: torch.cat([p[k] for p in parts], dim=1) for k in parts[0] if k != "replay"}
    out["replay"] = {k: torch.cat([p["replay"][k] for p in parts], dim=1) for k in parts[0]["replay"]}
    return out


def _overlap(have: range, want: range) -> range:
    return range(max(have.start, want.start), min(have.stop, want.stop))


def redistribute(epochs: list[Columns] | None, roles: Roles) -> list[Columns] | None:
    """Move every rollout epoch's env columns from the rollout ranks to the actor ranks that train on them.
    Called on every rank; returns the actor's epochs (None on ranks that are not actors)."""
    sends = []
    mine: dict[int, dict[str, Any]] = {}
    if roles.is_rollout:
        assert epochs is not None
        have = roles.rollout_columns(roles.rank)
        for a in roles.actor:
            both = _overlap(have, roles.actor_columns(a))
            if not both:
                continue
            local = range(both.start - have.start, both.stop - have.start)
            piece = {"epochs": [select_columns(e, local) for e in epochs]}
            if a == roles.rank:
                mine[both.start] = piece
            else:
                sends.append(isend_dict(piece, a))
    out = None
    if roles.is_actor:
        want = roles.actor_columns(roles.rank)
        for src in roles.rollout:
            both = _overlap(roles.rollout_columns(src), want)
            if both and src != roles.rank:
                mine[both.start] = recv_dict(src)
        pieces = [mine[k] for k in sorted(mine)]
        out = [join_columns([p["epochs"][e] for p in pieces]) for e in range(len(pieces[0]["epochs"]))]
    for s in sends:
        s.wait()
    return out
