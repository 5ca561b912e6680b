"""What the HTTP API allows: anonymous reads, and the size limits of a request.

Defaults: a request body of at most 2 MiB (`DAGLINE_API_MAX_BODY_BYTES`) and at most 1,000 signals in
one batch (`DAGLINE_API_MAX_BATCH`); a single signal's value is at most 64 KiB of JSON whatever the
body limit. Anything larger is answered 413 before anything is stored. The web UI reads task logs from
`log_folder` (`--log-folder`, else `$DAGLINE_LOG_FOLDER`, else `./logs`).
"""

from __future__ import annotations

import dataclasses
import os

from dagline.errors import InvalidInput

DEFAULT_PORT = 8793


@dataclasses.dataclass(frozen=True)
class ApiSettings:
    anonymous_read: bool = False       # GET without a token (writes always need one)
    max_body_bytes: int = 2 * 1024 * 1024
    max_batch: int = 1000
    log_folder: str | None = None      # where the web UI reads task logs (default: $DAGLINE_LOG_FOLDER, ./logs)

    def __post_init__(self):
        if self.max_body_bytes < 64 * 1024 + 1024:
            raise InvalidInput("must leave room for one 64 KiB value (at least 66560)",
                               field="DAGLINE_API_MAX_BODY_BYTES")
        if self.max_batch < 1:
            raise InvalidInput("must be at least 1", field="DAGLINE_API_MAX_BATCH")

    @classmethod
    def from_env(cls, environ=None, **overrides) -> ApiSettings:
        env = os.environ if environ is None else environ
        values = {}
        for field, name in (("max_body_bytes", "DAGLINE_API_MAX_BODY_BYTES"), ("max_batch", "DAGLINE_API_MAX_BATCH")):
            raw = env.get(name)
            if raw:
                try:
                    values[field] = int(raw)
                except ValueError:
                    raise InvalidInput(f"must be an integer, got {raw!r}", field=name) from None
        if env.get("DAGLINE_API_ANONYMOUS_READ", "").lower() in ("1", "true", "yes"):
            values["anonymous_read"] = True
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
