"""The operator's settings, read from the environment the Helm chart sets (never at import time).

| variable | default | what |
|---|---|---|
| `DAGLINE_DB_URL` | (required) | the database every replica shares |
| `DAGLINE_NAMESPACE` | empty: all | the namespace whose DAG, DagRun, Backfill and Pool objects are served |
| `DAGLINE_HEALTH_PORT` | 8080 | `/healthz` (liveness) and `/readyz` (readiness); 0 picks a free port |
| `DAGLINE_METRICS_PORT` | 9090 | `/metrics` (Prometheus text format); 0 picks a free port |
| `DAGLINE_DAGRUN_HISTORY_LIMIT` | 50 | finished DagRun objects kept per DAG (the annotation overrides it) |
| `DAGLINE_STATUS_INTERVAL` | 2 | seconds between two status syncs (database -> object status) |
| `DAGLINE_LIVENESS_TIMEOUT` | 60 | seconds without progress of kopf or the scheduler loop before `/healthz` fails |
| `DAGLINE_WATCH_TIMEOUT` | 300 | seconds one watch request lasts (kopf's `server_timeout`; client: 30 s more) |
| `DAGLINE_WATCH_INACTIVITY_TIMEOUT` | 70 | seconds a watch stream may bring nothing before kopf opens a new one |
| `DAGLINE_WATCH_CONNECT_TIMEOUT` | 30 | seconds to connect a watch request |
| `DAGLINE_LIST_INTERVAL` | 60 | seconds between two listings (`k8s.listing`: the watch check, the sweep) |
| `DAGLINE_EXECUTOR` | spark-k8s | the scheduler loop's executor, a name in `executors.registry` (`noop`: demos) |
| `DAGLINE_PARALLELISM` | 32 | tries the executor runs at once |
| `DAGLINE_LOG_FORMAT` | text | `json`: one JSON object per log line, and a line per scheduler decision |
| `DAGLINE_API_PORT` | 8793 | the HTTP API (`/api/v1/signals`), served by every replica; 0: a free port; -1: off |
| `DAGLINE_API_URL` | `http://127.0.0.1:<api port>` | the API's address as tries reach it (the chart sets it) |
| `DAGLINE_API_ANONYMOUS_READ` | false | allow GET without a token |
| `DAGLINE_SPARK_ALLOWED_CONF` | empty | Spark conf keys (or prefixes ending `*`) the Spark policy allows after all |
| `DAGLINE_PLATFORM_POOLS` | `{}` | JSON `{"name": slots}`: the platform's shared pools (the chart's `pools`) |

The platform's pools (`default` among them) are set at every replica's start and belong to no
namespace: only the chart's values change them, never a Pool object (docs/adr/0050).

Callback delivery reads `DAGLINE_CALLBACK_*` (`dagline.scheduler.deliveries.CallbackSettings`).

A bad value is an `InvalidInput` naming the variable.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping

from dagline.domain.spark_policy import ALLOWED_CONF_SETTING, SparkPolicy
from dagline.errors import InvalidInput
from dagline.executors import registry
from dagline.limits import MAX_SETTING_SECONDS

WATCH_CLIENT_GRACE_S = 30.0  # client_timeout = DAGLINE_WATCH_TIMEOUT + this
_POOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,255}")  # used with fullmatch
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # used with fullmatch


@dataclasses.dataclass(frozen=True)
class OperatorSettings:
    db_url: str | None = None
    namespace: str | None = None  # None: every namespace
    health_port: int = 8080
    metrics_port: int = 9090
    dagrun_history_limit: int = 50
    status_interval_s: float = 2.0
    liveness_timeout_s: float = 60.0
    watch_timeout_s: float = 300.0             # kopf's settings.watching.server_timeout (docs/adr/0082)
    watch_inactivity_timeout_s: float = 70.0   # kopf's settings.watching.inactivity_timeout
    watch_connect_timeout_s: float = 30.0      # kopf's settings.watching.connect_timeout
    list_interval_s: float = 60.0              # the listing: watch check and sweep (`k8s.listing`)
    executor: str = "spark-k8s"
    parallelism: int = 32
    log_format: str = "text"
    api_port: int = 8793          # -1: no API in this replica
    api_url: str | None = None    # None: http://127.0.0.1:<api_port>
    spark_allowed_conf: str = ""  # DAGLINE_SPARK_ALLOWED_CONF (`dagline.domain.spark_policy`)
    platform_pools: tuple[tuple[str, int], ...] = ()  # (name, slots) of the platform's shared pools

    @property
    def spark_policy(self) -> SparkPolicy:
        """The Spark policy DAG objects are applied with."""
        return SparkPolicy.parse(self.spark_allowed_conf, field=ALLOWED_CONF_SETTING)

    @property
    def watch_client_timeout_s(self) -> float:
        """kopf's `client_timeout`: a watch request ends on the client's side even if neither the API server
        nor a load balancer between closes it."""
        return self.watch_timeout_s + WATCH_CLIENT_GRACE_S

    @property
    def watch_bound_s(self) -> float:
        """How long an object the API lists may stay unseen by the watch before `/healthz` fails: a healthy
        kopf opens a new stream within the inactivity timeout (or at the end of a request), and the new
        stream brings what it missed; the liveness timeout is the slack."""
        return min(self.watch_inactivity_timeout_s, self.watch_client_timeout_s) + self.liveness_timeout_s

    @property
    def try_api_url(self) -> str:
        """The API's address handed to every try."""
        return self.api_url or f"http://127.0.0.1:{self.api_port if self.api_port > 0 else 8793}"

    def __post_init__(self):
        self.spark_policy  # noqa: B018 - a bad list is an error naming the variable, at start
        if self.namespace is not None and not _DNS_LABEL.fullmatch(self.namespace):
            raise InvalidInput(f"{self.namespace!r} is not a namespace name", field="DAGLINE_NAMESPACE")
        for name, env in (("health_port", "DAGLINE_HEALTH_PORT"), ("metrics_port", "DAGLINE_METRICS_PORT")):
            if not 0 <= getattr(self, name) <= 65535:
                raise InvalidInput(f"must be a port number (0-65535), got {getattr(self, name)}", field=env)
        if not -1 <= self.api_port <= 65535:
            raise InvalidInput(f"must be a port number (0-65535), or -1 for no API, got {self.api_port}",
                               field="DAGLINE_API_PORT")
        if self.api_url is not None and not re.match(r"^https?://[^\s/]+", self.api_url):
            raise InvalidInput(f"{self.api_url!r} is not an http(s) URL", field="DAGLINE_API_URL")
        if self.dagrun_history_limit < 0:
            raise InvalidInput(f"must be 0 or more, got {self.dagrun_history_limit}",
                               field="DAGLINE_DAGRUN_HISTORY_LIMIT")
        if not 0 < self.status_interval_s <= MAX_SETTING_SECONDS:  # NaN and infinities too
            raise InvalidInput(f"must be positive, at most {MAX_SETTING_SECONDS:,.0f} s, got {self.status_interval_s}",
                               field="DAGLINE_STATUS_INTERVAL")
        if not 0 < self.liveness_timeout_s <= MAX_SETTING_SECONDS:
            raise InvalidInput(f"must be positive, at most {MAX_SETTING_SECONDS:,.0f} s, got "
                               f"{self.liveness_timeout_s}", field="DAGLINE_LIVENESS_TIMEOUT")
        for name, env in (("watch_timeout_s", "DAGLINE_WATCH_TIMEOUT"),
                          ("watch_inactivity_timeout_s", "DAGLINE_WATCH_INACTIVITY_TIMEOUT"),
                          ("watch_connect_timeout_s", "DAGLINE_WATCH_CONNECT_TIMEOUT"),
                          ("list_interval_s", "DAGLINE_LIST_INTERVAL")):
            if not 0 < getattr(self, name) <= MAX_SETTING_SECONDS:
                raise InvalidInput(f"must be positive, at most {MAX_SETTING_SECONDS:,.0f} s, got "
                                   f"{getattr(self, name)}", field=env)
        registry.kind(self.executor, field="DAGLINE_EXECUTOR")  # a known name, or an error listing them
        if self.log_format not in ("text", "json"):
            raise InvalidInput(f"must be text or json, got {self.log_format!r}", field="DAGLINE_LOG_FORMAT")
        for name, slots in self.platform_pools:
            if not isinstance(name, str) or not _POOL_NAME.fullmatch(name):
                raise InvalidInput(f"{name!r} is not a pool name", field="DAGLINE_PLATFORM_POOLS")
            if isinstance(slots, bool) or not isinstance(slots, int) or slots < 0:
                raise InvalidInput(f"pool {name!r}: slots must be a whole number, 0 or more, got {slots!r}",
                                   field="DAGLINE_PLATFORM_POOLS")
        if self.parallelism < 1:
            raise InvalidInput(f"must be at least 1, got {self.parallelism}", field="DAGLINE_PARALLELISM")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides) -> OperatorSettings:
        """The settings from `DAGLINE_*` variables; `overrides` (command-line options) win."""
        env = os.environ if environ is None else environ

        def text(name: str) -> str | None:
            value = env.get(name)
            return value.strip() if value is not None and value.strip() else None

        def number(name: str, kind: type):
            raw = text(name)
            if raw is None:
                return None
            try:
                return kind(raw)
            except ValueError:
                what = "an integer" if kind is int else "a number"
                raise InvalidInput(f"must be {what}, got {raw!r}", field=name) from None

        values = {
            "db_url": text("DAGLINE_DB_URL"),
            "namespace": text("DAGLINE_NAMESPACE"),
            "health_port": number("DAGLINE_HEALTH_PORT", int),
            "metrics_port": number("DAGLINE_METRICS_PORT", int),
            "dagrun_history_limit": number("DAGLINE_DAGRUN_HISTORY_LIMIT", int),
            "status_interval_s": number("DAGLINE_STATUS_INTERVAL", float),
            "liveness_timeout_s": number("DAGLINE_LIVENESS_TIMEOUT", float),
            "watch_timeout_s": number("DAGLINE_WATCH_TIMEOUT", float),
            "watch_inactivity_timeout_s": number("DAGLINE_WATCH_INACTIVITY_TIMEOUT", float),
            "watch_connect_timeout_s": number("DAGLINE_WATCH_CONNECT_TIMEOUT", float),
            "list_interval_s": number("DAGLINE_LIST_INTERVAL", float),
            "executor": text("DAGLINE_EXECUTOR"),
            "parallelism": number("DAGLINE_PARALLELISM", int),
            "log_format": text("DAGLINE_LOG_FORMAT"),
            "api_port": number("DAGLINE_API_PORT", int),
            "api_url": text("DAGLINE_API_URL"),
            "spark_allowed_conf": text(ALLOWED_CONF_SETTING),
            "platform_pools": _pools(text("DAGLINE_PLATFORM_POOLS")),

        }
        values.update({key: value for key, value in overrides.items() if value is not None})
        return cls(**{key: value for key, value in values.items() if value is not None})


def _pools(raw: str | None) -> tuple[tuple[str, int], ...] | None:
    """`DAGLINE_PLATFORM_POOLS`: a JSON object of pool name -> slots."""
    if raw is None:
        return None
    try:
        found = json.loads(raw)
    except ValueError:
        raise InvalidInput(f"must be a JSON object of pool name -> slots, got {raw[:100]!r}",
                           field="DAGLINE_PLATFORM_POOLS") from None
    if not isinstance(found, dict):
        raise InvalidInput("must be a JSON object of pool name -> slots", field="DAGLINE_PLATFORM_POOLS")
    return tuple(sorted(found.items()))
