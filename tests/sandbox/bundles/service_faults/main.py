"""The harness of the service faults (docs/reliability.md): a few model calls through the capture proxy, a pause
apart, so a step is long enough to kill a service in its middle. Each call is retried the way the
OpenAI SDK retries (a connection refused or cut, a 5xx; `x-stainless-retry-count` says which try),
for up to RETRY_S seconds: a proxy or policy restart is waited out. Every answered call is counted in
VERI_OUTPUT_DIR/calls, so a span lost by a restart shows."""
import http.client
import json
import os
import pathlib
import time
import urllib.error
import urllib.request

RETRY_S = 90.0
task = json.loads(os.environ["VERI_TASK"])
out = pathlib.Path(os.environ["VERI_OUTPUT_DIR"])
url = os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions"
headers = {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"}


def call(messages: list) -> str:
    body = json.dumps({"model": os.environ["VERI_POLICY_MODEL"], "messages": messages}).encode()
    deadline, tries = time.monotonic() + RETRY_S, 0
    while True:
        request = urllib.request.Request(url, body, {**headers, "x-stainless-retry-count": str(tries)})
        try:
            with urllib.request.urlopen(request, timeout=120) as reply:
                return json.load(reply)["choices"][0]["message"]["content"] or ""
        except urllib.error.HTTPError as error:
            if error.code < 500 or time.monotonic() > deadline:
                raise
            print(f"call {len(messages) // 2}: {error.code}, retrying", flush=True)
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError,
                json.JSONDecodeError) as error:  # refused, cut off mid-answer: as the SDK's transport errors
            if time.monotonic() > deadline:
                raise
            print(f"call {len(messages) // 2}: {error}, retrying", flush=True)
        tries += 1
        time.sleep(min(0.5 * 2 ** tries, 4.0))


messages = [{"role": "user", "content": task["prompt"]}]
answer = ""
for index in range(task["calls"]):
    if index:
        time.sleep(task["pause_s"])
        messages.append({"role": "user", "content": "Go on."})
    answer = call(messages)
    messages.append({"role": "assistant", "content": answer})
    (out / "calls").write_text(str(index + 1))
(out / "answer.txt").write_text(answer)
print("answer:", answer[:80], flush=True)
