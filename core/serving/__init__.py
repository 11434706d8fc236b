"""The course's one model service (FastAPI + uvicorn, loopback by default): http.py is the kit
every model kind is built from (strict request models, request ids, body limits, the access
log, JSON errors, verify-and-warm before ready, the Server); byte_lm/ serves a byte LM's
prefill/decode/generate endpoints (the capstone's serve command); predict/ serves a batched
classifier exported with jax.export (the deployment lessons)."""
