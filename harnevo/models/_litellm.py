"""The one place litellm is imported: offline price map, no banners, quiet scrubbed logging, `hf` provider.

Import cost is 4-5 s, so nothing imports this module at package import time; `load()` does it on
first need and returns the module.
"""

from __future__ import annotations

import logging
import os
import threading
from types import ModuleType

from harnevo.models.secrets import ScrubFilter

_LOCK = threading.Lock()
_MODULE: ModuleType | None = None
_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "LiteLLM Proxy.stdout")


def load() -> ModuleType:
    """Import and configure litellm once per process (thread-safe)."""
    global _MODULE
    if _MODULE is not None:
        return _MODULE
    with _LOCK:
        if _MODULE is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            import litellm

            litellm.suppress_debug_info = True
            litellm.set_verbose = False
            litellm.turn_off_message_logging = True
            if hasattr(litellm, "telemetry"):
                litellm.telemetry = False
            for name in _LOGGERS:
                lg = logging.getLogger(name)
                lg.setLevel(logging.ERROR)
                if not any(isinstance(f, ScrubFilter) for f in lg.filters):
                    lg.addFilter(ScrubFilter())
            _register_hf(litellm)
            _MODULE = litellm
    return _MODULE


def _register_hf(litellm: ModuleType) -> None:
    from harnevo.models.hf import HFHandler

    entries = [e for e in (litellm.custom_provider_map or []) if e.get("provider") != "hf"]
    entries.append({"provider": "hf", "custom_handler": HFHandler()})
    litellm.custom_provider_map = entries
    # litellm reads custom_provider_map into its provider list when a call is routed; registering the
    # name here too lets provider validation see it before the first call.
    from litellm.utils import custom_llm_setup

    custom_llm_setup()


def provider_names() -> set[str]:
    """Every provider prefix litellm routes (plus registered custom providers)."""
    litellm = load()
    names = {getattr(p, "value", p) for p in litellm.provider_list}
    names.update(e["provider"] for e in (litellm.custom_provider_map or []))
    return names
