"""The `hf` litellm provider: a transformers causal LM checkpoint from a local directory, in-process.

litellm routes `hf/<model>` here; for an absolute path the string is `hf//abs/path` and `model`
arrives as `/abs/path`. The checkpoint (AutoModelForCausalLM + AutoTokenizer, local files only) is
loaded once per path per process and kept; it runs on CUDA when available, else CPU (override with
HARNEVO_HF_DEVICE=cpu|cuda|cuda:1). The prompt is the checkpoint's own chat template; decoding is
greedy at temperature 0 and sampling otherwise, at most `max_tokens` new tokens; sampling is seeded by the
request's `seed` (the sample index) and the prompt text, so the same prompt and sample give the same reply in
any run, at any concurrency, while different prompts (every turn's differs) draw differently. `acompletion` runs
generation in a worker thread, so the event loop keeps running; generations on one checkpoint are
serialised (one at a time).

Imported only through models/_litellm.py (this module subclasses litellm's CustomLLM).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402  (after the environment default above)
from litellm import CustomLLM  # noqa: E402

from harnevo.models.checkpoints import is_checkpoint, quiet_progress  # noqa: E402


@dataclass
class _Loaded:
    model: Any
    tokenizer: Any
    device: str
    lock: threading.Lock


def _device() -> str:
    forced = os.environ.get("HARNEVO_HF_DEVICE")
    if forced:
        return forced
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _sampling_seed(seed: Any, prompt: str) -> int:
    """A 63-bit torch seed from the request's seed (the sample index; None counts as 0) and the prompt."""
    digest = hashlib.sha256(f"{seed or 0}\x00{prompt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def _cuda_devices(device: str) -> list[int]:
    """The CUDA devices whose RNG state fork_rng must save and restore (none on CPU)."""
    if not device.startswith("cuda"):
        return []
    return [int(device.split(":")[1])] if ":" in device else [0]


class HFHandler(CustomLLM):
    def __init__(self) -> None:
        super().__init__()
        self._loaded: dict[str, _Loaded] = {}
        self._load_lock = threading.Lock()

    def load(self, path: str) -> _Loaded:
        """The checkpoint at `path`, loaded on first use and kept for the process."""
        key = str(Path(path).resolve())
        got = self._loaded.get(key)
        if got is not None:
            return got
        with self._load_lock:
            got = self._loaded.get(key)
            if got is None:
                if not is_checkpoint(key):
                    raise FileNotFoundError(f"no transformers checkpoint (config.json) in {key}")
                import torch
                from transformers import AutoModelForCausalLM, AutoTokenizer

                device = _device()
                tok = AutoTokenizer.from_pretrained(key, local_files_only=True)
                if tok.chat_template is None:
                    raise ValueError(f"the tokenizer in {key} has no chat template")
                dtype = torch.float32 if device == "cpu" else "auto"
                with quiet_progress():
                    model = AutoModelForCausalLM.from_pretrained(key, local_files_only=True, dtype=dtype)
                model.to(device).eval()
                got = self._loaded[key] = _Loaded(model, tok, device, threading.Lock())
        return got

    def generate(self, path: str, messages: list[dict], optional_params: dict) -> tuple[str, int, int, str]:
        """(text, prompt_tokens, completion_tokens, finish_reason) for one chat."""
        import torch

        ld = self.load(path)
        tok = ld.tokenizer
        max_new = int(optional_params.get("max_tokens") or optional_params.get("max_completion_tokens") or 256)
        temperature = float(optional_params.get("temperature") or 0.0)
        chat = [{"role": m["role"], "content": m.get("content") or ""} for m in messages]
        prompt = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        enc = tok(prompt, return_tensors="pt", add_special_tokens=False).to(ld.device)
        eos = ld.model.generation_config.eos_token_id or tok.eos_token_id
        pad = tok.pad_token_id if tok.pad_token_id is not None else (eos if isinstance(eos, int) else None)
        gen: dict[str, Any] = {"max_new_tokens": max_new, "pad_token_id": pad, "eos_token_id": eos}
        if temperature > 0:
            gen.update(do_sample=True, temperature=temperature, top_p=float(optional_params.get("top_p") or 1.0), top_k=0)
        else:
            gen.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        with ld.lock, torch.inference_mode(), torch.random.fork_rng(devices=_cuda_devices(ld.device)):
            if temperature > 0:
                torch.manual_seed(_sampling_seed(optional_params.get("seed"), prompt))
            out = ld.model.generate(**enc, **gen)
        new = out[0, enc["input_ids"].shape[1]:]
        text = tok.decode(new, skip_special_tokens=True)
        finish = "length" if len(new) >= max_new else "stop"
        stop = optional_params.get("stop")
        for s in [stop] if isinstance(stop, str) else (stop or []):
            if s and s in text:
                text, finish = text[: text.index(s)], "stop"
        return text, int(enc["input_ids"].shape[1]), int(len(new)), finish

    def _response(self, model: str, messages: list, optional_params: dict, model_response: Any) -> Any:
        text, pt, ct, finish = self.generate(model, messages, optional_params)
        model_response.choices = [
            litellm.Choices(index=0, message=litellm.Message(role="assistant", content=text), finish_reason=finish)
        ]
        model_response.model = "hf/" + model
        model_response.created = int(time.time())
        model_response.usage = litellm.Usage(prompt_tokens=pt, completion_tokens=ct, total_tokens=pt + ct)
        return model_response

    def completion(self, model: str, messages: list, api_base: str, custom_prompt_dict: dict, model_response: Any,
                   print_verbose: Any, encoding: Any, api_key: Any, logging_obj: Any, optional_params: dict,
                   acompletion: Any = None, litellm_params: Any = None, logger_fn: Any = None, headers: dict | None = None,
                   timeout: Any = None, client: Any = None) -> Any:
        return self._response(model, messages, optional_params, model_response)

    async def acompletion(self, model: str, messages: list, api_base: str, custom_prompt_dict: dict, model_response: Any,
                          print_verbose: Any, encoding: Any, api_key: Any, logging_obj: Any, optional_params: dict,
                          acompletion: Any = None, litellm_params: Any = None, logger_fn: Any = None,
                          headers: dict | None = None, timeout: Any = None, client: Any = None) -> Any:
        return await asyncio.to_thread(self._response, model, messages, optional_params, model_response)
