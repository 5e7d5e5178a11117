"""llmtap for Python servers: in-process payload capture with llmtap's C++ capture core.

``llmtap.asgi.CaptureMiddleware`` records the requests that reach an ASGI application (vLLM,
SGLang, any FastAPI or Starlette app) exactly as ``llmtap proxy`` records them in front of it:
the same ``NIM_CAPTURE_ENABLE`` / ``NIM_CAPTURE_ARGS``, the same files, manifest, rotation and
outcomes sidecar, written by the same core (``llmtap._native``).
"""

from llmtap._native import Capture  # noqa: F401

__all__ = ["Capture"]
