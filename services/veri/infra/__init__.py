"""Plumbing every service shares, with no knowledge of training: the JSON client between services (http.py),
logging (logging.py, quiet.py), gunicorn (gunicorn.py), settings as flags (settings_cli.py), metrics routes
(metrics.py), asyncio helpers (aio.py)."""
