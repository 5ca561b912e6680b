"""The HTTP API (and the web UI, `dagline.web`, on the same app): `create_app(database, settings)` builds the
FastAPI application; `dagline api` serves it on uvicorn, and every operator replica serves it too
(`dagline.k8s.runtime`). It sits above the scheduler layer and below `dagline.k8s` and the command
line: it uses only the stored-state services (`signal_store`, `api_tokens`)."""

from dagline.api.app import create_app
from dagline.api.settings import ApiSettings

__all__ = ["ApiSettings", "create_app"]
