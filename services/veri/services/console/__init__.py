"""veri's console: a read-only web view of the job archive (`veri serve console`, the compose `console` service).

    settings.py     where the job folders are
    jobs.py         the job folders under <state>/jobs: summaries (status, model, step k of n, reward trend)
    protocol.py     the archive page's query (facets, filters, sort, page) parsed from a request
    serving.py      `ConsoleService`: every question the pages and the JSON API ask, over `ArchiveIndex`
    trajectory.py   one rollout span by span: messages, tool calls, final answer, verdicts, harness log
    tokens.py       the token view of a rollout's training row: trained vs masked, logprobs, spans, breaks
    decoder.py      token ids -> text, with the job's tokenizer (tokenizer.json)
    logs.py         train.log as server-sent events
    downloads.py    JSONL of rollout records (what `veri debug` reads)
    api_router.py   /api/... JSON;  pages.py  the HTML pages;  errors.py  404s that say what exists
    app.py          `create_app(settings)`;  cli.py  `veri serve console`

Only GET routes exist; every file is found through `ArchiveLayout`, so a request can never name a path
outside a job folder.
"""
