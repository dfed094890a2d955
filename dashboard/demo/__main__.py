"""``python -m loopwatch.dashboard.demo agent ...``: one agent of the demo fleet."""

import sys

from .runner import agent_main

if len(sys.argv) > 1 and sys.argv[1] == "agent":
    sys.exit(agent_main(sys.argv[2:]))
print("usage: python -m loopwatch.dashboard.demo agent ... (use `loopwatch demo`)")
sys.exit(2)
