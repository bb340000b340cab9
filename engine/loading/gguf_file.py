"""A GGUF file (llama.cpp's model format): its metadata, its tensor table, and each tensor dequantized to
float32 numpy by the `gguf` package (llama.cpp's own Python code, the optional extra `llmbench[real]`).

The header is parsed here rather than by gguf.GGUFReader: that reader builds a numpy view for every
string of the vocabulary and the merges, 7.6 s for SmolLM2's 98,000 strings on an idle core where this
parser takes a fraction of a second, and a run pays it at every start. No torch: a client reads a
model's shape and tokenizer from the file alone."""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# the tensor types a Llama file may hold that load here; each is tested against transformers
SUPPORTED_TYPES = (
    "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
)  # fmt: skip

_MAGIC = b"GGUF"
# metadata value type id -> struct format; 8 (string) and 9 (array) are read apart
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q"}
_SCALARS[12] = "<d"
_STRING, _ARRAY = 8, 9
_DEFAULT_ALIGNMENT = 32


class GGUFError(ValueError):
    """A file that is not a GGUF this reader takes (a user error: the message names the file)."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # numpy order: rows first (GGUF lists the innermost dimension first)
    type_name: str  # ggml's name of the storage type, e.g. "Q4_1"
    offset: int  # bytes from the start of the file
    nbytes: int


class GGUFFile:
    """One GGUF file, memory-mapped: `metadata` (key -> value) and `tensors` (name -> TensorInfo) are
    read at construction, tensor data only by read()."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        _require_gguf(self.path)
        try:
            with open(self.path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            raise GGUFError(f"{self.path}: cannot read ({e.strerror})") from None
        except ValueError:  # an empty file cannot be mapped
            raise GGUFError(f"{self.path}: empty file, not a GGUF model") from None
        try:
            self.metadata, self.tensors = _parse(self._map, self.path)
        except (struct.error, UnicodeDecodeError, OverflowError) as e:
            raise GGUFError(f"{self.path}: truncated or corrupt GGUF header ({e})") from None

    def read(self, name: str) -> np.ndarray:
        """The tensor `name` as float32, in its numpy shape, dequantized from its storage type."""
        import gguf

        info = self.tensors[name]
        self.check_types([info])
        raw = np.frombuffer(self._map, np.uint8, info.nbytes, info.offset)
        if info.type_name == "F32":
            return raw.view(np.float32).reshape(info.shape).copy()
        if info.type_name == "F16":
            return raw.view(np.float16).reshape(info.shape).astype(np.float32)
        if info.type_name == "BF16":  # bfloat16 is the top half of a float32: widening is exact
            return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(info.shape)
        qtype = gguf.GGMLQuantizationType[info.type_name]
        rows = raw.reshape(int(np.prod(info.shape[:-1])), -1)
        return gguf.quants.dequantize(rows, qtype).reshape(info.shape)

    def check_types(self, tensors: list[TensorInfo] | None = None) -> None:
        """A GGUFError naming the first tensor (of all, or of `tensors`) whose type does not load here."""
        for info in self.tensors.values() if tensors is None else tensors:
            if info.type_name not in SUPPORTED_TYPES:
                raise GGUFError(
                    f"{self.path}: tensor {info.name} has type {info.type_name}, not supported "
                    f"(supported: {', '.join(SUPPORTED_TYPES)})"
                )

    def close(self) -> None:
        self._map.close()


def _require_gguf(path: Path) -> None:
    try:
        import gguf  # noqa: F401  (optional: the extra llmbench[real])
    except ModuleNotFoundError:
        raise GGUFError(
            f"{path}: reading a GGUF model needs the gguf package: pip install gguf (llmbench's [real] extra)"
        ) from None


def _parse(data: mmap.mmap, path: Path) -> tuple[dict[str, Any], dict[str, TensorInfo]]:
    if data[:4] != _MAGIC:
        raise GGUFError(f"{path}: not a GGUF file (it starts {bytes(data[:4])!r}, not {_MAGIC!r})")
    version, tensor_count, kv_count = struct.unpack_from("<IQQ", data, 4)
    if version not in (2, 3):
        raise GGUFError(f"{path}: GGUF version {version} is not supported (2 or 3, little-endian)")
    reader = _Reader(data, 24)
    metadata = {}
    for _ in range(kv_count):
        key = reader.string()
        metadata[key] = reader.value(reader.scalar("<I"))
    entries = []
    for _ in range(tensor_count):
        name = reader.string()
        dims = [reader.scalar("<Q") for _ in range(reader.scalar("<I"))]
        entries.append((name, tuple(reversed(dims)), reader.scalar("<I"), reader.scalar("<Q")))
    alignment = int(metadata.get("general.alignment", _DEFAULT_ALIGNMENT))
    start = -(-reader.offset // alignment) * alignment
    tensors = {}
    for name, shape, type_id, offset in entries:
        type_name, nbytes = _storage(type_id, shape, path, name)
        if start + offset + nbytes > len(data):
            raise GGUFError(f"{path}: tensor {name} runs past the end of the file (truncated download?)")
        tensors[name] = TensorInfo(name, shape, type_name, start + offset, nbytes)
    return metadata, tensors


def _storage(type_id: int, shape: tuple[int, ...], path: Path, name: str) -> tuple[str, int]:
    """The type's name and the tensor's size in bytes, from ggml's block sizes."""
    import gguf

    try:
        qtype = gguf.GGMLQuantizationType(type_id)
    except ValueError:
        raise GGUFError(f"{path}: tensor {name} has unknown ggml type id {type_id}") from None
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    elements = int(np.prod(shape))
    if shape and shape[-1] % block_elems:
        raise GGUFError(f"{path}: tensor {name} rows of {shape[-1]} do not fill {qtype.name} blocks")
    return qtype.name, elements // block_elems * block_bytes


class _Reader:
    """Sequential little-endian reads from the header."""

    def __init__(self, data: mmap.mmap, offset: int):
        self.data, self.offset = data, offset

    def scalar(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(fmt, self.data, self.offset)
        self.offset += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        length = self.scalar("<Q")
        text = self.data[self.offset : self.offset + length].decode("utf-8")
        self.offset += length
        return text

    def value(self, type_id: int) -> Any:
        if type_id == _STRING:
            return self.string()
        if type_id == _ARRAY:
            item_type, count = self.scalar("<I"), self.scalar("<Q")
            if item_type in _SCALARS:  # one unpack for the whole array: token types, scores
                fmt = _SCALARS[item_type]
                values = struct.unpack_from(f"<{count}{fmt[1]}", self.data, self.offset)
                self.offset += count * struct.calcsize(fmt)
                return list(values)
            return [self.value(item_type) for _ in range(count)]
        if type_id not in _SCALARS:
            raise struct.error(f"unknown metadata value type {type_id}")
        return self.scalar(_SCALARS[type_id])
