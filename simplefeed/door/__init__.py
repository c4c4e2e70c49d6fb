"""The door: the checks on what producers send, before anything is stored."""
