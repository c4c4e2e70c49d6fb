"""The service: the facade over the store, the renderer and the archive."""
