"""Reading and checking a safetensors file's header without loading any tensor.

Its own module because both :mod:`vlarl_cli.checkpoints.detect` (format detection) and
:mod:`vlarl_cli.checkpoints.safety` (loading) check headers, and detection already depends on safety.
"""

from __future__ import annotations

import json
import math
import os
import struct
from typing import Any

__all__ = ["read_safetensors_header"]

# A safetensors header is a JSON object; real ones are < 10 MB even for 1000s of tensors. The cap keeps
# a corrupted length field from making us allocate gigabytes.
_MAX_HEADER_BYTES = 100 * 1024 * 1024
# bytes per element of the safetensors dtype names (safetensors format spec); others are not size-checked
_DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2,
                "U16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def read_safetensors_header(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Return the JSON header of a safetensors file (tensor name -> {dtype, shape, data_offsets}).

    The ``__metadata__`` entry, if any, is kept. Raises ValueError naming the file for anything that is
    not a complete safetensors file: too short, a header length past the end of the file, a header that
    is not a JSON object, or tensor data offsets past the end (a truncated download or a lying header).
    """
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path} is too short to be a safetensors file ({size} bytes)")
        (n,) = struct.unpack("<Q", raw)  # little-endian u64 header length (safetensors format spec)
        if n > _MAX_HEADER_BYTES:
            raise ValueError(f"{path}: safetensors header length {n} is implausible; the file is not safetensors")
        if 8 + n > size:
            raise ValueError(f"{path}: its safetensors header length ({n} bytes) reaches past the end of the "
                             f"file ({size} bytes); the file is truncated or not safetensors")
        data = fh.read(n)
    try:
        header = json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: the safetensors header is not valid JSON ({err})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: safetensors header is not a JSON object")
    _check_offsets(path, header, size - 8 - n)
    return header


def _check_offsets(path: str | os.PathLike[str], header: dict[str, Any], data_bytes: int) -> None:
    """Every tensor entry is an object whose data lies inside the file (a truncated file fails here)."""
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        try:
            start, end = (int(x) for x in meta["data_offsets"])
            elements = math.prod(int(d) for d in meta["shape"])
            itemsize = _DTYPE_BYTES.get(str(meta["dtype"]))
        except (TypeError, KeyError, ValueError):
            raise ValueError(f"{path}: the safetensors header entry of {name!r} is malformed") from None
        if not 0 <= start <= end <= data_bytes:
            raise ValueError(f"{path}: tensor {name!r} lies at bytes {start}..{end} of the data but the file holds "
                             f"only {data_bytes} bytes of data; the file is truncated")
        if itemsize is not None and end - start != elements * itemsize:
            raise ValueError(f"{path}: tensor {name!r} has {elements} {meta['dtype']} elements but {end - start} "
                             "bytes of data; the header is wrong")
