"""What the HTTP API allows: anonymous reads, and the size limits of a request.

Defaults: a request body of at most 2 MiB (`DAGLINE_API_MAX_BODY_BYTES`) and at most 1,000 signals in
one batch (`DAGLINE_API_MAX_BATCH`); a single signal's value is at most 64 KiB of JSON whatever the
body limit. Anything larger is answered 413 before anything is stored. The web UI reads task logs from
`log_folder` (`--log-folder`, else `$DAGLINE_LOG_FOLDER`, else `./logs`).

The web UI's own: `DAGLINE_UI_SECRET` signs its CSRF values (ADR 61; at least 32 characters; unset,
a secret stored in the database at first use, which every replica shares), and at most
`DAGLINE_UI_MAX_EVENT_STREAMS` (100) live event streams are open at once,
`DAGLINE_UI_MAX_EVENT_STREAMS_PER_CLIENT` (8) per client; beyond, 429 with `Retry-After` (ADR 62).

The platform's `DAGLINE_SIGNAL_EXPORTS` (`domain.signal_exports`) is read too: a sent signal's "no DAG
listens" warning counts the rules of other namespaces it is exported to, as the scheduler acts.
"""

from __future__ import annotations

import dataclasses
import os

from dagline.domain.signal_exports import NO_EXPORTS, SignalExports
from dagline.errors import InvalidInput

DEFAULT_PORT = 8793


@dataclasses.dataclass(frozen=True)
class ApiSettings:
    anonymous_read: bool = False       # GET without a token (writes always need one)
    max_body_bytes: int = 2 * 1024 * 1024
    max_batch: int = 1000
    log_folder: str | None = None      # where the web UI reads task logs (default: $DAGLINE_LOG_FOLDER, ./logs)
    ui_secret: str | None = None       # signs the web UI's CSRF values (None: one shared in the database)
    max_event_streams: int = 100       # live event streams open at once (the web UI's pages)
    max_event_streams_per_client: int = 8  # of them, per client (a sign-in token, else an address)
    signal_exports: SignalExports = NO_EXPORTS  # `DAGLINE_SIGNAL_EXPORTS`: the warning of a sent signal

    def __post_init__(self):
        if self.ui_secret is not None and len(self.ui_secret) < 32:
            raise InvalidInput("must be at least 32 characters (e.g. `openssl rand -base64 32`)",
                               field="DAGLINE_UI_SECRET")
        if self.max_event_streams < 1:
            raise InvalidInput("must be at least 1", field="DAGLINE_UI_MAX_EVENT_STREAMS")
        if self.max_event_streams_per_client < 1:
            raise InvalidInput("must be at least 1", field="DAGLINE_UI_MAX_EVENT_STREAMS_PER_CLIENT")
        if self.max_body_bytes < 64 * 1024 + 1024:
            raise InvalidInput("must leave room for one 64 KiB value (at least 66560)",
                               field="DAGLINE_API_MAX_BODY_BYTES")
        if self.max_batch < 1:
            raise InvalidInput("must be at least 1", field="DAGLINE_API_MAX_BATCH")

    @classmethod
    def from_env(cls, environ=None, **overrides) -> ApiSettings:
        env = os.environ if environ is None else environ
        values = {}
        for field, name in (("max_body_bytes", "DAGLINE_API_MAX_BODY_BYTES"), ("max_batch", "DAGLINE_API_MAX_BATCH"),
                            ("max_event_streams", "DAGLINE_UI_MAX_EVENT_STREAMS"),
                            ("max_event_streams_per_client", "DAGLINE_UI_MAX_EVENT_STREAMS_PER_CLIENT")):
            raw = env.get(name)
            if raw:
                try:
                    values[field] = int(raw)
                except ValueError:
                    raise InvalidInput(f"must be an integer, got {raw!r}", field=name) from None
        from dagline.scheduler.settings import exports_from_env

        values["signal_exports"] = exports_from_env(env)
        if env.get("DAGLINE_UI_SECRET"):
            values["ui_secret"] = env["DAGLINE_UI_SECRET"]
        if env.get("DAGLINE_API_ANONYMOUS_READ", "").lower() in ("1", "true", "yes"):
            values["anonymous_read"] = True
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
