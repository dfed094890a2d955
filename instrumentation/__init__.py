"""Limits, stop reasons, the loop guard and the reference loop."""
