"""The HTTP client learns what it needs of the model (vocabulary, EOS, context length) without torch: a
benchmark client should not pay seconds of import, nor need torch installed, to talk to a server."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[3]

CLIENT = """
import json, sys
from llmbench.backends.openai import OpenAIBackend
from llmbench.config.load import parse_config
from tests.llmbench.sse_server import SSEServer

config = {"model": {"preset": "llama3-8b"}, "engine": {"max_model_len": 4096}}
with SSEServer() as server:
    backend = OpenAIBackend()
    backend.start(parse_config(config, ["backend.type=openai", f"backend.url={server.url}"]))
    backend.close()
info = backend.model_info
print(json.dumps([info.vocab_size, info.eos_token_id, info.max_model_len, "torch" in sys.modules]))
"""


def test_the_openai_backend_starts_without_importing_torch():
    result = subprocess.run(
        [sys.executable, "-c", CLIENT], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == [128256, 128001, 4096, False]
