"""One table of precision names: short names, long aliases, dtypes, the CPU fallback."""

from __future__ import annotations

import pytest
import torch

from vlarl_cli.errors import ConfigError
from vlarl_cli.precision import DTYPES, PRECISIONS, canonical, resolve_dtype, to_dtype


@pytest.mark.parametrize(("name", "dtype"), [("fp32", torch.float32), ("float32", torch.float32),
                                             ("bf16", torch.bfloat16), ("bfloat16", torch.bfloat16),
                                             ("fp16", torch.float16), ("float16", torch.float16)])
def test_short_and_long_names_give_the_same_dtype(name: str, dtype: torch.dtype) -> None:
    assert to_dtype(name) is dtype
    assert DTYPES[canonical(name)] is dtype
    assert resolve_dtype(name, torch.device("meta")) is dtype
    assert resolve_dtype(name, torch.device("cpu")) is torch.float32  # half precision falls back on the CPU


def test_every_short_name_has_a_dtype_and_unknown_names_are_refused() -> None:
    assert set(DTYPES) == set(PRECISIONS)
    with pytest.raises(ConfigError, match=r'Unknown precision "bf61"\. Did you mean "bf16"'):
        to_dtype("bf61")


def test_old_homes_still_answer() -> None:
    from vlarl_cli.distributed.device import resolve_dtype as old

    assert old is resolve_dtype
