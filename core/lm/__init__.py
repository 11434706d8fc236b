"""Language models: attention, the byte Transformer with its KV cache, tokenizer, corpus,
generation, masked-LM data."""
