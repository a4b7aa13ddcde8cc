"""A user's runner that reports its stages the way ours does (remote.events), for the stage line's tests."""
from remote.events import EventWriter, RunnerStage

events = EventWriter("events.jsonl")   # launched in its run dir, with the bundle on PYTHONPATH
events.stage(RunnerStage.LOADING, detail="staged-model")
events.emit("start", method="staged")
events.stage(RunnerStage.WARMUP, detail="staged")
events.stage(RunnerStage.DECODING)
for done in (1, 2):
    events.emit("progress", method="staged", done=done, total=2, tokens_per_s=10.0)
events.close()
print("staged runner done", flush=True)
