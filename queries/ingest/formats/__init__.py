"""Recorded trace files and coding-agent logs read by ``loopwatch import`` (docs/import.md)."""
