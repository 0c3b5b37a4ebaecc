"""Why the engine refuses a request; the HTTP layer maps each to a status code."""


class RequestError(ValueError):
    """A request the engine refuses (bad ids, beyond the context size...): HTTP 400."""


class EngineBusy(RuntimeError):
    """Another generation holds the model: HTTP 503."""
