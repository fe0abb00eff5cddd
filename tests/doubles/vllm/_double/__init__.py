"""Internals of the timed vLLM 0.33.0 double (no counterpart in the real package)."""
