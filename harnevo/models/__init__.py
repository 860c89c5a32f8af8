"""Models: the only package that imports litellm (lazily: importing this package does not).
See base.py for the contract and factory.py for the --model strings `get_model` accepts."""

from harnevo.models.base import Message, Model, Reply, Usage, approx_tokens
from harnevo.models.cache import CachedModel, ReplyCache
from harnevo.models.cost import Budget, Price, spend_of
from harnevo.models.factory import get_model
from harnevo.models.retry import RetryPolicy

__all__ = [
    "Budget",
    "CachedModel",
    "Message",
    "Model",
    "Price",
    "Reply",
    "ReplyCache",
    "RetryPolicy",
    "Usage",
    "approx_tokens",
    "get_model",
    "spend_of",
]
