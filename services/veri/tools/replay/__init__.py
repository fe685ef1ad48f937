"""Record and replay a rollout: GPU-free regression tests of rendering, bridging, spans and masks.

    veri replay record --proxy URL --rollout ID --out FILE     one recording file (a session opened with
                                                               record_requests, or a proxy run with
                                                               --record-requests)
    veri replay run FILE --model DIR                           replays it through an in-process proxy
    veri replay run FILE --proxy URL                           ... or through a running proxy whose policy
                                                               is `veri replay policy FILE`
    veri replay policy FILE --port P                           that policy: answers with the recorded
                                                               completions
    veri replay record ... --record rollout-K.json             a Harbor task's rollout: its task, status
                                                               and verifier result from its record

A recording (`recording.py`) holds the harness's requests exactly as sent (in arrival order), the
spans they produced, the episode (training row, env_mask, verdicts), and the reward with its
functions' source when known. A replay (`runner.py`) sends the same requests, in the order they
were answered, to a proxy whose policy (`policy.py`) answers every call with the recorded completion
ids and logprobs, then `diff.py` compares the new spans, episode and reward with the recorded ones: any difference is a
change in what veri would train on.

A Harbor task's recording (`veri replay record --record rollout-K.json`, `sources.py`) also keeps the
task's row and its verifier's result: the replay judges the episode (verifier_* rules) and scores the
reward (the built-in verifier reward, the `verifier` input of other functions) from that recorded result.
The task's tests are not run again.
"""
