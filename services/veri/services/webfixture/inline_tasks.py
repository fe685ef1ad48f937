"""The easy variant of the URL-extraction task, for small models (the CPU demo's SmolLM2-135M).

Same pages, same targets, but nothing to fetch: the prompt itself lists four of the page's links
(the target and three others, in a fixed shuffled order), as `- <label>: <url>` lines, and asks for
the one with the target's label. A 135M model copies the right URL about a third of the time at
temperature 0.8 (it often invents a plausible one instead): hard enough to learn, easy enough to
sometimes solve. The rows keep the columns of the full task (`expected_url`, `label`, `kind`,
`page`, `url`), so the same reward functions score both.
"""

from __future__ import annotations

import json
import random

from veri.services.webfixture.pages import NUM_PAGES, SEED, page_spec, page_url

LINKS_SHOWN = 4


def inline_task(index: int, base: str | None = None) -> dict[str, object]:
    spec = page_spec(index)
    rng = random.Random(f"{SEED}:inline:{index}")
    others = [link for link in spec.links if link != spec.target]
    links = [*rng.sample(others, min(LINKS_SHOWN - 1, len(others))), spec.target]
    rng.shuffle(links)
    listing = "\n".join(f"- {link.label}: {link.url}" for link in links)
    prompt = (f"The links on {spec.site.company}'s home page:\n{listing}\n\n"
              f'What is the URL of the link labelled "{spec.target.label}"?')
    return {"prompt": prompt, "url": page_url(index, base), "expected_url": spec.target.url,
            "label": spec.target.label, "kind": spec.target.kind, "page": index}


def inline_dataset_text(count: int = NUM_PAGES, base: str | None = None) -> str:
    """The inline dataset as JSONL text (`veri data url-extract --inline`)."""
    return "".join(json.dumps(inline_task(index, base)) + "\n" for index in range(count))
