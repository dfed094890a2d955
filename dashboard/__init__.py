"""The dashboard, the loopwatch CLI and the serve process."""
