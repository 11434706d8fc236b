"""The Keras 3 multi-backend track: each backend in its own process, the numbers compared."""
