"""Typed, user-facing errors. Library code raises them with the fix in the message; the CLI prints
one line and exits with code 2. Per-episode failures are never exceptions: they are results."""


class HarnevoError(Exception):
    """A systemic fault (bad input, missing data, bad config) explained in one line."""


class DataNotFoundError(HarnevoError):
    """No ALFWorld games where we looked."""


class HarnessError(HarnevoError):
    """A harness file or template is invalid or unsafe."""


class ModelNotFoundError(HarnevoError):
    """A --model string names no known provider or no usable local checkpoint."""


class ModelCallError(Exception):
    """One model call failed for good (after retries). The episode records it as its failure reason."""


class BudgetExhausted(HarnevoError):
    """The spend limit was reached; nothing new is started."""
