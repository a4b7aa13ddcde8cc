"""remote.downloads: a run's first load from the hub says how its download moves, and says nothing while it does not
(files written into a real hub-cache layout, as huggingface_hub's HTTP and Xet transfers write them)."""
from __future__ import annotations

import threading

from remote.downloads import HubWatch, watching


def _blobs(cache, repo):
    folder = cache / f"models--{repo.replace('/', '--')}" / "blobs"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_a_watch_says_the_bytes_that_arrived_and_nothing_while_none_do(tmp_path):
    (_blobs(tmp_path, "org/cached") / "aa11").write_bytes(b"x" * 1000)      # there before the run: not counted
    watch = HubWatch(["org/cached", "org/fresh", None, str(tmp_path), "demo-qwen3"], cache=tmp_path)
    assert watch.label == "org/cached, org/fresh"                           # local dirs and shipped names skipped
    assert watch.poll() is None
    part = _blobs(tmp_path, "org/fresh") / "bb22.0123abcd.incomplete"
    with open(part, "wb") as f:
        f.truncate(250_000_000)                                              # sparse: its size is what counts
    line = watch.poll()
    assert line is not None and line.startswith("org/cached, org/fresh: downloading, 0.2 GB so far, ")
    assert line.endswith(" MB/s")
    assert watch.poll() is None                                              # nothing new since: silent
    part.rename(part.parent / "bb22")                                        # the transfer completes
    assert watch.poll() is None and watch.downloaded == 250_000_000


def test_watching_hands_lines_to_say_from_its_thread_and_stops_with_the_load(tmp_path):
    said, heard = [], threading.Event()

    def say(line):
        said.append(line)
        heard.set()

    with watching(["org/model"], say, every=0.01, cache=tmp_path) as watch:
        with open(_blobs(tmp_path, "org/model") / "cc33.incomplete", "wb") as f:
            f.truncate(5_000_000)
        assert heard.wait(60), "no download line within 60 s"
    assert said[0].startswith("org/model: downloading, 5 MB so far")
    threads = [t for t in threading.enumerate() if t.name == "hub-download-watch"]
    assert not threads and watch.downloaded == 5_000_000


def test_nothing_is_watched_without_a_hub_id(tmp_path):
    with watching([None, "demo-qwen3", str(tmp_path)], lambda line: None, cache=tmp_path) as watch:
        assert watch is None
        assert not [t for t in threading.enumerate() if t.name == "hub-download-watch"]
