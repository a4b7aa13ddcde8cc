"""A user's runner that reports a metric every 0.1 s for a minute and then ends: never silent unless something
stops it (its stall tests stop it with SIGSTOP)."""
import json
import time

for step in range(600):
    print(json.dumps({"metric": "loss", "value": 1.0 / (step + 1), "step": step}), flush=True)
    time.sleep(0.1)
print("steady worker done", flush=True)
