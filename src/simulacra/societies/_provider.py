"""Before and during a society run: is the model provider usable?

``preflight(config)`` checks, before step 0 and before anything is written or
spent, that the configured provider can serve the run: its package is
installed, the server answers, accepts the credentials and serves the model.
``ProviderGuard`` wraps the model during the run and turns the errors that mean
every further call would fail (connection refused, HTTP 401 / 403 / 404 / 405
/ 501 / 505, or ``run.max_consecutive_provider_failures`` exhausted calls in a
row) into :class:`~simulacra.ProviderUnavailable`, which stops the run instead
of failing every remaining turn. An isolated failure passes through: it fails its turn.
"""

from __future__ import annotations

import json
import os
import threading
from typing import TYPE_CHECKING, Any

from simulacra._util import ModelWrapper, install_hint
from simulacra.errors import ConfigError, ProviderError, ProviderUnavailable

if TYPE_CHECKING:
    from simulacra.llm import CallSite, Completion, CompletionRequest, LanguageModel

    from ._config import RunConfig

__all__ = ["ProviderGuard", "preflight"]

#: HTTP statuses after which no call of this run can succeed.
_FATAL_STATUS = {401: "refused the credentials (HTTP 401)", 403: "refused access (HTTP 403)",
                 404: "has no such model or endpoint (HTTP 404)",
                 405: "does not allow this request's method (HTTP 405)",
                 501: "does not implement chat completions (HTTP 501)",
                 505: "does not support this HTTP version (HTTP 505)"}


def _transport_failure(error: BaseException) -> str | None:
    """'connection refused' (and kin) when *error* was caused by a failed connection."""
    cause: BaseException | None = error
    while cause is not None:
        names = {klass.__name__ for klass in type(cause).__mro__}
        if "ConnectError" in names or isinstance(cause, ConnectionRefusedError):
            return f"cannot be reached ({type(cause).__name__}: {cause})"
        cause = cause.__cause__
    return None


def _fatal_reason(error: ProviderError) -> str | None:
    if error.status in _FATAL_STATUS:
        return _FATAL_STATUS[error.status]
    return _transport_failure(error)


def preflight(config: RunConfig) -> dict[str, ProviderUnavailable]:
    """Check that the provider ``sim.llm`` names can serve the run; do nothing for ``scripted``.

    With ``sim.llm.endpoints``, the run checks each endpoint's servers instead
    (``_endpoints.preflight_endpoints``, which returns the endpoints found down
    that have a fallback); this returns ``{}``, the same type.

    Raises:
        ProviderUnavailable: The package is missing (the message names the
            extra to install), the server does not answer, refuses the
            credentials, or does not list the configured model.
        ConfigError: ``sim.llm.base_url`` is missing.
    """
    llm = config.sim.llm
    if llm.provider != "openai_compatible":
        return {}
    try:
        import httpx  # noqa: F401, PLC0415  (an optional extra)
    except ImportError:
        raise ProviderUnavailable(
            "sim.llm.provider 'openai_compatible' needs the httpx package, which is not "
            f"installed: {install_hint('llm')}") from None
    if not llm.base_url:
        raise ConfigError("sim.llm.base_url is required when sim.llm.provider is "
                          "'openai_compatible' (e.g. http://localhost:8000/v1)")

    check_server(llm.base_url, llm.model, api_key_env=llm.api_key_env,
                 timeout=float(llm.timeout), names=("sim.llm.base_url", "sim.llm.model"))
    return {}


def _is_json(text: str) -> bool:
    """Whether *text* is JSON (an API's error body) rather than a page or nothing."""
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def check_server(base_url: str, model: str, *, api_key_env: str = "OPENAI_API_KEY",
                 timeout: float = 10.0, names: tuple[str, str] = ("base_url", "model"),
                 strict: bool = False) -> None:
    """Check that the OpenAI-compatible server at *base_url* answers and lists *model*.

    ``GET {base_url}/models``, the key (if any) from ``$api_key_env``. A
    server without a model list (a JSON 404, or not an OpenAI-style list)
    passes unless *strict*: the first call will tell. A 404 that is not JSON
    (a web server's page: no API answers there) fails. *names* are how the
    caller's settings are called in the messages.

    Raises:
        ProviderUnavailable: The server does not answer, refuses the
            credentials, or does not list *model*.
    """
    import httpx  # noqa: PLC0415  (an optional extra)

    url_name, model_name = names
    url = base_url.rstrip("/") + "/models"
    headers = {}
    key = os.environ.get(api_key_env)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    try:
        response = httpx.get(url, headers=headers, timeout=min(timeout, 10.0))
    except httpx.HTTPError as exc:
        raise ProviderUnavailable(
            f"preflight: GET {url} failed ({type(exc).__name__}: {exc}); is the server "
            f"running at {url_name}={base_url!r}?") from None
    status = response.status_code
    if status in (401, 403):
        sent = (f"the key is read from ${api_key_env}, which is {'set' if key else 'not set'}"
                if api_key_env else "no key is sent: api_key_env is empty")
        raise ProviderUnavailable(
            f"preflight: GET {url} answered HTTP {status}: the server refused the credentials "
            f"({sent})")
    not_openai = (f"preflight: GET {url} answered HTTP {status} without an OpenAI-style model "
                  f"list: is {url_name}={base_url!r} an OpenAI-compatible server (vLLM, "
                  "llama.cpp's server, Ollama)?")
    if status == 404:
        if strict or not _is_json(response.text):
            raise ProviderUnavailable(not_openai)
        return  # an API without a model list: the first call will tell
    if status != 200:
        raise ProviderUnavailable(f"preflight: GET {url} answered HTTP {status}: "
                                  f"{' '.join(response.text[:200].split())}")
    try:
        listed = [str(item["id"]) for item in response.json()["data"]]
    except (ValueError, KeyError, TypeError):
        if strict:
            raise ProviderUnavailable(not_openai) from None
        return  # not an OpenAI-style list: do not guess
    if strict and not listed:
        raise ProviderUnavailable(f"preflight: the server at {base_url} lists no model "
                                  f"({url} answered an empty list)")
    if listed and model not in listed:
        shown = ", ".join(repr(m) for m in listed[:8]) + (", ..." if len(listed) > 8 else "")
        raise ProviderUnavailable(
            f"preflight: the server at {base_url} does not serve {model_name}="
            f"{model!r}; it serves {shown}")


class ProviderGuard(ModelWrapper):
    """A model wrapper that stops a run whose provider has become unusable.

    Args:
        inner: The model to call.
        limit: Calls in a row that may fail with a :class:`ProviderError`
            (retries exhausted) before the provider counts as unusable.
    """

    __slots__ = ("_lock", "_streak", "inner", "limit", "tripped")

    inner: LanguageModel

    def __init__(self, inner: LanguageModel, limit: int) -> None:
        self.inner = inner
        self.limit = limit
        self._lock = threading.Lock()
        self._streak = 0
        #: Set once the provider is deemed unusable: every later call raises it.
        self.tripped: ProviderUnavailable | None = None

    def _check(self) -> None:
        tripped = self.tripped
        if tripped is not None:
            raise ProviderUnavailable(str(tripped)) from tripped

    def _failed(self, error: ProviderError) -> ProviderUnavailable | None:
        with self._lock:
            if self.tripped is not None:
                return self.tripped
            self._streak += 1
            reason = _fatal_reason(error)
            if reason is None and self._streak >= self.limit:
                reason = (f"failed {self._streak} calls in a row "
                          f"(run.max_consecutive_provider_failures={self.limit})")
            if reason is None:
                return None
            where = f" at {error.url}" if error.url else ""
            self.tripped = ProviderUnavailable(f"the provider{where} {reason}; last error: "
                                               f"{type(error).__name__}: {error}")
            return self.tripped

    def _succeeded(self) -> None:
        with self._lock:
            self._streak = 0

    def _unusable(self, error: ProviderError) -> ProviderUnavailable | None:
        """The error to raise instead of *error* when the provider is now unusable."""
        stop = self._failed(error)
        return None if stop is None else ProviderUnavailable(str(stop))

    def complete(self, request: CompletionRequest, *, site: CallSite | None = None) -> Completion:
        self._check()
        try:
            completion = self.inner.complete(request, site=site)
        except ProviderError as exc:
            raise self._unusable(exc) or exc from exc
        self._succeeded()
        return completion

    async def acomplete(self, request: CompletionRequest, *,
                        site: CallSite | None = None) -> Completion:
        self._check()
        try:
            completion = await self.inner.acomplete(request, site=site)
        except ProviderError as exc:
            raise self._unusable(exc) or exc from exc
        self._succeeded()
        return completion

    def __getattr__(self, name: str) -> Any:
        # usage, calls_served...: whatever the wrapped model reports.
        return getattr(self.inner, name)
