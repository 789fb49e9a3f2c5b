"""An exponential moving average of the weights, as openpi's JAX trainer keeps one.

openpi (``scripts/train.py: train_step``) updates, after every optimizer step,
``ema = decay * ema + (1 - decay) * params`` over every parameter, starting from the initial weights
(``init_train_state``: ``ema_params = params``), and serves the EMA: its checkpoints' ``params/`` item IS
the EMA when one is kept (``training/checkpoints.py: _split_params``). Decays (``training/config.py``):
``TrainConfig.ema_decay = 0.99`` by default (pi0_libero), ``0.999`` for pi05_libero, ``None`` (no EMA) for
the LoRA configs (``*_low_mem_finetune``). :func:`default_decay` follows that table; GR00T and OpenVLA-OFT
train without an EMA upstream, so they get none.

``vlarl sft`` keeps the average in float32 on the weights' device and writes it beside the raw weights:
``<checkpoint>/ema/`` is a complete policy folder (the family's files + ``config.yaml``) next to the raw
one. :func:`choose_weights` makes loaders (``vlarl eval --checkpoint``, ``actor.model.model_path``) take
``ema/`` when it exists, as openpi serves its EMA, and says so; ``VLARL_EMA=0`` picks the raw weights.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

__all__ = ["EMA_FOLDER", "WeightEMA", "choose_weights", "default_decay"]

EMA_FOLDER = "ema"
_OPENPI_DECAY = {"pi0": 0.99, "pi05": 0.999}


def default_decay(model_type: str, config_name: str | None, trainable: str) -> float | None:
    """openpi's decay for its recipes: pi0 0.99, pi0.5 0.999, none under LoRA; None for other families."""
    mt = model_type.lower()
    if mt == "openpi":
        mt = "pi05" if (config_name or "").lower().startswith("pi05") else "pi0"
    if trainable == "lora":
        return None
    return _OPENPI_DECAY.get(mt)


class WeightEMA:
    """``decay * ema + (1 - decay) * w`` for every trainable parameter, in float32."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"EMA decay must be in (0, 1), got {decay}")
        self.decay = decay
        self.names = [n for n, p in model.named_parameters() if p.requires_grad]
        params = dict(model.named_parameters())
        self.shadow = {n: params[n].detach().float().clone() for n in self.names}

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        params = dict(model.named_parameters())
        for n in self.names:
            self.shadow[n].mul_(self.decay).add_(params[n].detach().float(), alpha=1.0 - self.decay)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return dict(self.shadow)

    def full(self) -> WeightEMA:
        """This EMA with every sharded (FSDP2 DTensor) entry gathered into a full tensor; itself when nothing
        is sharded. Collective over the shards' ranks: every rank calls it."""
        if not any(hasattr(t, "full_tensor") for t in self.shadow.values()):
            return self
        out = WeightEMA.__new__(WeightEMA)
        out.decay, out.names = self.decay, list(self.names)
        out.shadow = {n: t.full_tensor() if hasattr(t, "full_tensor") else t for n, t in self.shadow.items()}
        return out

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        missing = [n for n in self.names if n not in state]
        if missing:
            raise KeyError(f"EMA state lacks {missing[:3]}")
        for n in self.names:
            self.shadow[n].copy_(state[n])

    @contextmanager
    def applied(self, model: nn.Module) -> Iterator[None]:
        """Within the block, ``model`` holds the EMA weights (cast to each parameter's dtype); restored after."""
        params = dict(model.named_parameters())
        backup = {n: params[n].detach().clone() for n in self.names}
        with torch.no_grad():
            for n in self.names:
                params[n].copy_(self.shadow[n].to(params[n].dtype))
        try:
            yield
        finally:
            with torch.no_grad():
                for n in self.names:
                    params[n].copy_(backup[n])


def restore_from(ema: WeightEMA, checkpoint: Path) -> bool:
    """Load the EMA from ``<checkpoint>/ema/`` (weights under the model's own names); False when absent
    (a checkpoint written without an EMA: the average restarts from the current weights)."""
    from safetensors.torch import load_file

    from vlarl_cli.checkpoints.detect import weight_files

    folder = checkpoint / EMA_FOLDER
    if not folder.is_dir():
        return False
    state: dict[str, torch.Tensor] = {}
    for f in weight_files(folder):
        state.update(load_file(f))
    ema.load_state_dict(state)
    return True


def choose_weights(path: str, say: object = print) -> str:
    """``<path>/ema`` when ``path`` holds an EMA beside its raw weights (unless ``VLARL_EMA=0``), else
    ``path``; the choice is printed either way when there is one to make."""
    folder = Path(path)
    ema = folder / EMA_FOLDER
    if not (ema / "config.yaml").is_file():
        return path
    if os.environ.get("VLARL_EMA", "1") == "0":
        say(f"weights: the raw weights of {folder} (VLARL_EMA=0; the EMA is in {ema})")  # type: ignore[operator]
        return path
    say(f"weights: the EMA of {folder} ({ema}), as openpi serves its EMA; VLARL_EMA=0 for the raw weights")  # type: ignore[operator]
    return str(ema)


def for_sft(model: nn.Module, model_type: str, config_name: str | None, trainable: str | None,
            say: object = print) -> WeightEMA | None:
    """The EMA ``vlarl sft`` keeps for this model (openpi's decay), announced; None where openpi keeps none."""
    decay = default_decay(model_type, config_name, trainable or "full")
    if decay is None:
        return None
    say(f"EMA of the weights: decay {decay} (openpi's for {model_type}), saved beside the raw weights in "  # type: ignore[operator]
        f"<checkpoint>/{EMA_FOLDER}/")
    return WeightEMA(model, decay)
