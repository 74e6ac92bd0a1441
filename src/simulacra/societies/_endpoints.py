"""A society run over several model endpoints: ``sim.llm.endpoints`` and ``sim.llm.routing``.

::

    sim:
      llm:
        endpoints:
          local:  {preset: llamacpp, model: qwen2.5-7b, concurrency: 8, fallback: hosted}
          hosted: {preset: openai, model: gpt-4o-mini, rate_limit: 5,
                   pricing: {prompt_per_mtok: 0.15, completion_per_mtok: 0.6}}
        routing:
          default: local
          rules:
            - {agents: "0-9", endpoint: hosted}           # ids, ranges, globs
            - {request_model: "planner", endpoint: hosted}
          function: route.py:pick                         # for the rest

:func:`build_router` turns that into a :class:`~simulacra.llm.Router`: each
endpoint's model (a scripted model, an OpenAI-compatible client, or a pool of
them), guarded like ``sim.llm``'s provider (:class:`ProviderGuard`), rate
limited and priced. The route of a call is the first rule that matches its
agent and its request's model name, else the function's answer, else the
default: a pure function of the call, so routing changes who answers and
never what the run does. :func:`preflight_endpoints` checks every server
before step 0.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from simulacra._util import install_hint
from simulacra.errors import ConfigError, ProviderUnavailable
from simulacra.executors import RefLoader

from ._config import PRESETS, endpoint_provider
from ._provider import ProviderGuard, check_server, preflight

if TYPE_CHECKING:
    from simulacra.llm import CallSite, Completion, CompletionRequest, LanguageModel, Router

    from ._config import RunConfig

__all__ = ["build_router", "endpoint_pricer", "endpoints_info", "preflight_endpoints",
           "preflight_run", "uses_endpoints"]

_RANGE = re.compile(r"(-?\d+)-(-?\d+)")
#: How ``sim.llm.routing.function`` is loaded (as ``sim.world.factory`` is).
_FUNCTIONS = RefLoader(file_module=lambda path: f"_simulacra_route_{path.stem}",
                       package_files=True)


def uses_endpoints(config: RunConfig) -> bool:
    """Whether the run declares ``sim.llm.endpoints``."""
    return bool(config.sim.llm.endpoints)


def _setting(config: RunConfig, name: str) -> dict[str, Any]:
    """Endpoint *name*'s settings: its own, else its preset's, else ``sim.llm``'s."""
    llm = config.sim.llm
    endpoint = llm.endpoints[name]
    preset = PRESETS.get(endpoint.preset or "", {})
    key_env = endpoint.api_key_env
    if key_env is None:
        key_env = preset.get("api_key_env", llm.api_key_env)
    servers = (list(endpoint.servers) if endpoint.servers is not None else
               [endpoint.base_url or preset.get("base_url")])
    pricing = endpoint.pricing if endpoint.pricing is not None else llm.pricing
    return {
        "provider": endpoint_provider(endpoint),
        "preset": endpoint.preset,
        "model": endpoint.model or ("scripted" if endpoint_provider(endpoint) == "scripted"
                                    else None),
        "servers": servers,
        "affinity": endpoint.affinity,
        "api_key_env": key_env or None,
        "timeout": llm.timeout if endpoint.timeout is None else endpoint.timeout,
        "max_retries": llm.max_retries if endpoint.max_retries is None else endpoint.max_retries,
        "backoff_base": (llm.backoff_base if endpoint.backoff_base is None
                         else endpoint.backoff_base),
        "concurrency": llm.concurrency if endpoint.concurrency is None else endpoint.concurrency,
        "rate_limit": endpoint.rate_limit,
        "prompt_per_mtok": float(pricing.prompt_per_mtok),
        "completion_per_mtok": float(pricing.completion_per_mtok),
        "fallback": endpoint.fallback,
        "schema_format": endpoint.schema_format or preset.get("schema_format", "json_schema"),
        "seed": endpoint.seed,
    }


def endpoints_info(config: RunConfig) -> dict[str, dict[str, Any]]:
    """What the run's files say of each endpoint: provider, model, URLs, key *variable*, fallback.

    Never a key: only the name of the variable that holds it.
    """
    out: dict[str, dict[str, Any]] = {}
    for name in config.sim.llm.endpoints:
        setting = _setting(config, name)
        scripted = setting["provider"] == "scripted"
        out[name] = {"provider": setting["provider"], "preset": setting["preset"],
                     "model": setting["model"],
                     "base_urls": [] if scripted else list(setting["servers"]),
                     "api_key_env": None if scripted else setting["api_key_env"],
                     "fallback": setting["fallback"], "rate_limit": setting["rate_limit"],
                     "pricing": {"prompt_per_mtok": setting["prompt_per_mtok"],
                                 "completion_per_mtok": setting["completion_per_mtok"]}}
    return out


def preflight_endpoints(config: RunConfig) -> dict[str, ProviderUnavailable]:
    """Check every server of every OpenAI-compatible endpoint before step 0.

    Returns the endpoints found down that declare a fallback (a line on stderr
    says so): their calls go to the fallback from the first one.

    Raises:
        ProviderUnavailable: A server of an endpoint without a fallback cannot
            serve the run (or the ``llm`` extra is missing); the message
            names the endpoint.
    """
    down: dict[str, ProviderUnavailable] = {}
    for name in config.sim.llm.endpoints:
        setting = _setting(config, name)
        if setting["provider"] != "openai_compatible":
            continue
        try:
            import httpx  # noqa: F401, PLC0415  (an optional extra)
        except ImportError:
            raise ProviderUnavailable(
                f"sim.llm.endpoints.{name} is openai_compatible, which needs the httpx "
                f"package, and it is not installed: {install_hint('llm')}") from None
        servers = setting["servers"]
        pool = len(servers) > 1 or config.sim.llm.endpoints[name].servers is not None
        lost: dict[int, ProviderUnavailable] = {}
        for index, url in enumerate(servers):
            where = (f"sim.llm.endpoints.{name}.servers[{index}]" if pool
                     else f"sim.llm.endpoints.{name}.base_url")
            _check_key(name, setting, url, where)
            try:
                check_server(url, setting["model"], api_key_env=setting["api_key_env"] or "",
                             timeout=float(setting["timeout"]),
                             names=(where, f"sim.llm.endpoints.{name}.model"))
            except ProviderUnavailable as exc:
                lost[index] = exc
        if not lost:
            continue
        if len(lost) < len(servers):  # the pool serves on its other servers
            for index, why in lost.items():
                down[f"{name}#{index}"] = why
                _say(f"simulacra: server {servers[index]} of endpoint {name!r} is down "
                     f"({why}); the pool serves on its other servers")
            continue
        first = next(iter(lost.values()))
        if setting["fallback"] is None:
            raise ProviderUnavailable(f"endpoint {name!r}: {first}") from None
        down[name] = first
        _say(f"simulacra: endpoint {name!r} is down ({first}); its calls go to its "
             f"fallback {setting['fallback']!r}")
    return down


def _say(line: str) -> None:
    """Print *line* on stderr once per process (the CLI's preflight, then the run's)."""
    if line not in _SAID:
        _SAID.add(line)
        print(line, file=sys.stderr)


def _check_key(name: str, setting: Mapping[str, Any], url: str, where: str) -> None:
    """A server off loopback needs its key variable set, or ``api_key_env: ""`` (send none).

    Raises:
        ConfigError: One line naming the endpoint, the variable and the way out.
    """
    variable = setting["api_key_env"]
    if not variable or os.environ.get(variable) or _on_loopback(url):
        return
    raise ConfigError(
        f"sim.llm.endpoints.{name}.api_key_env: ${variable} is not set, and {where}={url!r} "
        "is not on loopback, so every call would be refused before it is sent; set the "
        "variable, or set api_key_env: \"\" to send no key")


def _on_loopback(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


#: The lines :func:`preflight_endpoints` printed in this process.
_SAID: set[str] = set()


def preflight_run(config: RunConfig) -> dict[str, ProviderUnavailable]:
    """Check the run's provider, or each of its endpoints; return the endpoints found down.

    Raises:
        ProviderUnavailable: The provider, or an endpoint without a fallback,
            cannot serve the run.
        ConfigError: ``sim.llm.base_url`` is missing.
    """
    return preflight_endpoints(config) if uses_endpoints(config) else preflight(config)


def _server(config: RunConfig, setting: Mapping[str, Any], url: str) -> LanguageModel:
    from simulacra.llm import OpenAICompatible  # noqa: PLC0415  (lazy)

    return OpenAICompatible(base_url=url, model=setting["model"],
                            api_key_env=setting["api_key_env"], timeout=setting["timeout"],
                            max_retries=setting["max_retries"],
                            backoff_base=setting["backoff_base"],
                            concurrency=setting["concurrency"],
                            schema_format=setting["schema_format"])


def _endpoint_model(config: RunConfig, name: str, setting: Mapping[str, Any]) -> LanguageModel:
    from simulacra.llm import ScriptedModel, ServerPool  # noqa: PLC0415  (lazy)

    if setting["provider"] == "scripted":
        seed = setting["seed"]
        if seed is None:
            seed = config.seed if config.sim.llm.seed is None else config.sim.llm.seed
        return ScriptedModel(seed=seed)
    limit = config.run.max_consecutive_provider_failures
    urls = list(setting["servers"])
    if len(urls) == 1 and config.sim.llm.endpoints[name].servers is None:
        return ProviderGuard(_server(config, setting, urls[0]), limit)
    # A pool: each server guarded on its own, so that one dead server leaves the others.
    return ServerPool([ProviderGuard(_server(config, setting, url), limit) for url in urls],
                      affinity=setting["affinity"], names=urls)


class _AgentMatch:
    """Whether an agent id matches a rule's ``agents``: ids, int ranges, globs."""

    __slots__ = ("exact", "globs", "ranges")

    def __init__(self, spec: object) -> None:
        items = spec if isinstance(spec, list) else [spec]
        self.exact: set[str] = set()
        self.ranges: list[tuple[int, int]] = []
        self.globs: list[str] = []
        for item in items:
            text = str(item)
            match = _RANGE.fullmatch(text) if isinstance(item, str) else None
            if match is not None:
                self.ranges.append((int(match.group(1)), int(match.group(2))))
            elif isinstance(item, str) and any(c in text for c in "*?["):
                self.globs.append(text)
            else:
                self.exact.add(text)

    def __call__(self, agent: str) -> bool:
        if agent in self.exact:
            return True
        if self.ranges:
            try:
                number = int(agent)
            except ValueError:
                number = None
            if number is not None and any(lo <= number <= hi for lo, hi in self.ranges):
                return True
        return any(fnmatch.fnmatchcase(agent, glob) for glob in self.globs)

    def unmatched(self, agents: Iterable[str]) -> list[str]:
        """The parts of the spec that match none of *agents*."""
        ids = list(agents)
        known = set(ids)
        missing = sorted(self.exact - known)
        numbers = [int(a) for a in ids if a.lstrip("-").isdigit()]
        missing += [f"{lo}-{hi}" for lo, hi in self.ranges
                    if not any(lo <= n <= hi for n in numbers)]
        missing += [g for g in self.globs if not any(fnmatch.fnmatchcase(a, g) for a in ids)]
        return missing


def _route(config: RunConfig, agent_ids: list[str]
           ) -> Callable[[CallSite | None, CompletionRequest], str]:
    """The run's routing as a function of the call (rules, then the function, then the default).

    Raises:
        ConfigError: A rule names agents the society does not have.
    """
    routing = config.sim.llm.routing
    default: str = str(routing.default or next(iter(config.sim.llm.endpoints)))
    rules: list[tuple[_AgentMatch | None, str | None, str]] = []
    for i, rule in enumerate(routing.rules):
        match = None if rule.agents is None else _AgentMatch(rule.agents)
        if match is not None:
            missing = match.unmatched(agent_ids)
            if missing:
                shown = ", ".join(repr(m) for m in missing[:5])
                raise ConfigError(
                    f"sim.llm.routing.rules[{i}].agents names {shown}, which match no agent "
                    f"of this society ({len(agent_ids)} agents, e.g. "
                    f"{', '.join(agent_ids[:3])})")
        rules.append((match, rule.request_model, rule.endpoint))
    function: Callable[..., Any] | None = None
    if routing.function is not None:
        function = _FUNCTIONS.resolve(routing.function, "sim.llm.routing.function")
    # An agent's rules without a request_model decide alone: cached per agent.
    by_agent: dict[str, str | None] = {}
    by_model_rules = any(model is not None for _match, model, _name in rules)

    def route(site: CallSite | None, request: CompletionRequest) -> str:
        agent = "" if site is None else site.agent
        if not by_model_rules:
            found = by_agent.get(agent, "")
            if found == "":
                found = next((name for match, _m, name in rules
                              if match is not None and match(agent)), None)
                by_agent[agent] = found
            if found is not None:
                return found
        else:
            for match, model, name in rules:
                if match is not None and not match(agent):
                    continue
                if model is not None and not fnmatch.fnmatchcase(request.model, model):
                    continue
                return name
        if function is not None:
            answer = function(site, request)
            if answer is not None:
                return str(answer)
        return default

    return route


def endpoint_pricer(config: RunConfig) -> Callable[[Completion], float | None]:
    """``price(completion)``: its cost at the pricing of the endpoint that served it.

    From the endpoint named in the completion's metadata (a replay prices the
    recorded replies so, with no endpoint built); None for a completion that
    names no declared endpoint.
    """
    from simulacra.llm import endpoint_of  # noqa: PLC0415  (lazy)

    prices = {name: (info["pricing"]["prompt_per_mtok"], info["pricing"]["completion_per_mtok"])
              for name, info in endpoints_info(config).items()}

    def price(completion: Completion) -> float | None:
        name, _moved = endpoint_of(completion)
        rates = None if name is None else prices.get(name)
        if rates is None:
            return None
        return float(completion.prompt_tokens * rates[0]
                     + completion.completion_tokens * rates[1]) / 1e6

    return price


def build_router(config: RunConfig, agent_ids: Iterable[object],
                 down: Mapping[str, ProviderUnavailable] | None = None) -> Router:
    """The :class:`~simulacra.llm.Router` of ``sim.llm.endpoints`` and ``sim.llm.routing``.

    *down* (from :func:`preflight_endpoints`) are endpoints already found
    unusable: their calls go to their fallbacks from the first one.

    Raises:
        ConfigError: A rule names agents the society does not have, or the
            routing function cannot be loaded.
    """
    from simulacra.llm import Endpoint, RateLimit, Router, ServerPool  # noqa: PLC0415  (lazy)

    ids = [str(agent) for agent in agent_ids]
    route = _route(config, ids)
    info = endpoints_info(config)
    endpoints = []
    for name in config.sim.llm.endpoints:
        setting = _setting(config, name)
        model = _endpoint_model(config, name, setting)
        prompt, completion = setting["prompt_per_mtok"], setting["completion_per_mtok"]

        def price(p: int, c: int, prompt: float = prompt, completion: float = completion
                  ) -> float:
            return float(p * prompt + c * completion) / 1e6

        endpoints.append(Endpoint(
            name, model, fallback=setting["fallback"],
            rate=None if setting["rate_limit"] is None else RateLimit(setting["rate_limit"]),
            price=price, info=info[name]))
    router = Router(endpoints, route)
    for key, error in (down or {}).items():
        name, _sep, server = key.partition("#")
        if server:  # one server of a pool
            pool = router.endpoints[name].model
            if isinstance(pool, ServerPool):
                pool.down[int(server)] = error
        else:
            router.down[name] = error
    return router
