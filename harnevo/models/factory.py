"""`get_model(spec)`: a --model string to a `Model`.

    sim/<name>            a simulated agent (models/sim/); no litellm
    hf/<dir>              a local transformers checkpoint (relative or absolute dir), run in-process
    <provider>/<model>    any litellm model: openai/..., anthropic/..., hosted_vllm/... with api_base,
                          ollama/...; a bare name litellm knows (gpt-4o) works too
"""

from __future__ import annotations

from pathlib import Path

from harnevo.errors import ModelNotFoundError
from harnevo.models.base import Model
from harnevo.models.cache import CachedModel, ReplyCache
from harnevo.models.retry import RetryPolicy


def get_model(
    spec: str,
    *,
    api_base: str | None = None,
    timeout_s: float = 60,
    max_retries: int = 6,
    max_in_flight: int = 8,
    price: tuple[float, float] | None = None,  # USD per 1M prompt / completion tokens
    cache: ReplyCache | None = None,
    retry: RetryPolicy | None = None,  # overrides max_retries (tests use short delays)
    cache_tag: str | None = None,  # a served-model fingerprint in the reply-cache key ("api_base": the address)
) -> Model:
    """The Model named by `spec`, wrapped in `cache` when one is given. Raises ModelNotFoundError.

    `cache_tag` keeps replies of different models served under one name apart in the reply cache: a
    checkpoint hash or a version ("v2"), or the literal "api_base" to key on the server address."""
    spec = spec.strip()
    if not spec:
        raise ModelNotFoundError("empty --model; give e.g. openai/gpt-4.1, hf/<checkpoint dir> or sim/<agent>")
    policy = retry or RetryPolicy(max_retries=max_retries)
    model: Model
    if spec.startswith("sim/"):
        from harnevo.models.sim import make_sim

        model = make_sim(spec)
    elif spec.startswith("hf/"):
        model = _hf_model(spec, timeout_s=timeout_s, max_in_flight=max_in_flight, price=price)
    else:
        _check_provider(spec)
        from harnevo.models.litellm_model import LiteLLMModel

        model = LiteLLMModel(
            spec, api_base=api_base, timeout_s=timeout_s, retry=policy, max_in_flight=max_in_flight, price=price,
            cache_name=_tagged(spec, cache_tag, api_base),
        )
    if cache_tag is not None and spec.startswith("hf/"):
        model.cache_name = _tagged(model.cache_name, cache_tag, api_base)
    return CachedModel(model, cache) if cache is not None else model


def _tagged(name: str, tag: str | None, api_base: str | None) -> str:
    if tag is None:
        return name
    tag = tag.strip()
    if tag == "api_base":
        if not api_base:
            raise ModelNotFoundError("--cache-tag api_base needs --api-base")
        tag = api_base.rstrip("/")
    if not tag:
        raise ModelNotFoundError("--cache-tag is empty; give a fingerprint of the served model, or 'api_base'")
    return f"{name}#{tag}"


def _hf_model(spec: str, *, timeout_s: float, max_in_flight: int, price: tuple[float, float] | None) -> Model:
    raw = spec[len("hf/"):]
    if not raw:
        raise ModelNotFoundError("hf/ needs a checkpoint directory: hf/<path to a saved transformers model>")
    path = Path(raw).expanduser().resolve()
    if path.suffix.lower() == ".gguf":  # e.g. an Ollama / LM Studio file: converted once into a checkpoint
        from harnevo.models.gguf import resolve_hf_path

        path = resolve_hf_path(path)
    from harnevo.models.checkpoints import checkpoint_fingerprint, is_checkpoint

    if not is_checkpoint(path):
        raise ModelNotFoundError(f"{spec}: no transformers checkpoint (config.json) in {path}")
    from harnevo.models.litellm_model import LiteLLMModel

    return LiteLLMModel(
        spec,
        litellm_model="hf/" + str(path),  # hf//abs/path: litellm hands the handler /abs/path
        cache_name=f"hf/{path}@{checkpoint_fingerprint(path)}",
        timeout_s=None,  # generation runs in-process; a timeout could not stop it
        retry=RetryPolicy(max_retries=0),  # in-process failures are not transient
        max_in_flight=max_in_flight,
        price=price,
    )


def _check_provider(spec: str) -> None:
    from harnevo.models import _litellm

    prefix, sep, rest = spec.partition("/")
    if sep:
        if not rest:
            raise ModelNotFoundError(f"--model {spec!r} names no model after the provider prefix")
        if prefix in _litellm.provider_names():
            return
        raise ModelNotFoundError(
            f"unknown model provider {prefix!r} in {spec!r}; use sim/..., hf/<dir> or a litellm provider prefix (openai/, anthropic/, hosted_vllm/, ollama/, ...)"
        )
    litellm = _litellm.load()
    try:
        litellm.get_llm_provider(spec)
    except Exception:  # litellm raises BadRequestError for names it cannot route
        raise ModelNotFoundError(
            f"litellm does not know the model {spec!r}; prefix it with its provider, e.g. openai/{spec}"
        ) from None
