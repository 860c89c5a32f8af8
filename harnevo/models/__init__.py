"""Models: the only package that imports litellm. See base.py for the contract."""

from harnevo.models.base import Message, Model, Reply, Usage, approx_tokens

__all__ = ["Message", "Model", "Reply", "Usage", "approx_tokens"]
