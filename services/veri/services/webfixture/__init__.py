"""webfixture: the URL-extraction demo's stand-in for the web.

`pages.py` generates every page and task deterministically from its index; `server.py` serves the
pages (`veri serve webfixture`); `cli.py` also writes the demo dataset (`veri data url-extract`).
"""
