"""The serving layer: `llmbench serve`'s OpenAI-compatible HTTP server over the bundled engine
(api_server.py), its tokenizer and incremental detokenizer, and the thread that drives the engine in
process or its core over ZeroMQ (engine_loop.py)."""
