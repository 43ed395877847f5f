"""Process limits the local store depends on."""

from __future__ import annotations

import logging
import resource
from pathlib import Path

log = logging.getLogger(__name__)

_NR_OPEN = Path("/proc/sys/fs/nr_open")


def raise_open_files_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (an unlimited hard limit: to the
    kernel's ``fs.nr_open``), as Kafka's packaging advises; returns the soft limit now in
    force. Called once by the composition root before the store opens; never fails the
    start (a refusal is logged and the old limit kept)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            target = int(_NR_OPEN.read_text())
        except (OSError, ValueError):
            target = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("store.fd_limit.not_raised soft=%d hard=%d error=%s", soft, hard, exc)
            return soft
        soft = target
    log.info("store.fd_limit soft=%d hard=%d", soft, hard)
    return soft
