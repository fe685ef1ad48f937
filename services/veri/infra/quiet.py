"""Library noise off the console, into the job's `logs/libraries.log`.

transformers, TRL, accelerate, PEFT and the HF hub print deprecation `FutureWarning`s, TRL's
experimental-feature notice and progress bars ("Loading weights", "Writing model shards") around
veri's step lines. While `quiet_libraries(path)` is open:
  - Python warnings (`logging.captureWarnings`) and those libraries' loggers go to `path` only;
    their ERRORs still reach stderr too, since a real problem must be seen;
  - transformers' and the hub's progress bars are off (their documented switches): a bar in a file
    is noise too.
Everything is put back on exit, so an in-process caller (a test) keeps its own logging.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from io import TextIOWrapper
from pathlib import Path

from veri.infra.logging import service_formatter

LIBRARY_LOGGERS = ("py.warnings", "transformers", "trl", "accelerate", "peft", "huggingface_hub", "torch")


@contextmanager
def quiet_libraries(log_file: Path) -> Iterator[None]:
    import huggingface_hub.utils
    import transformers.utils.logging as hf_logging

    to_file = _FileOnFirstRecord(log_file, encoding="utf-8", delay=True)
    to_file.setFormatter(service_formatter("trainer"))  # one JSON line per record, as the services log
    problems = logging.StreamHandler(sys.stderr)
    problems.setLevel(logging.ERROR)
    problems.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    loggers = [logging.getLogger(name) for name in LIBRARY_LOGGERS]
    saved = [(logger, list(logger.handlers), logger.propagate) for logger in loggers]
    bars = hf_logging.is_progress_bar_enabled(), huggingface_hub.utils.are_progress_bars_disabled()

    hf_logging.disable_default_handler()  # transformers' own stderr handler
    hf_logging.disable_progress_bar()
    huggingface_hub.utils.disable_progress_bars()
    logging.captureWarnings(True)
    for logger in loggers:
        logger.handlers = [to_file, problems]
        logger.propagate = False
    try:
        yield
    finally:
        logging.captureWarnings(False)
        for logger, handlers, propagate in saved:
            logger.handlers, logger.propagate = handlers, propagate
        hf_logging.enable_default_handler()
        if bars[0]:
            hf_logging.enable_progress_bar()
        if not bars[1]:
            huggingface_hub.utils.enable_progress_bars()
        to_file.close()


class _FileOnFirstRecord(logging.FileHandler):
    """Creates its folder and file at the first record, so a job refused before it starts leaves none."""

    def _open(self) -> TextIOWrapper:
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()
