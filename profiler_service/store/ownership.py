"""A store's one owner: the process that writes it and recovers what a stopped service left in
flight. Any other process (the CLI's `compare`, `capture`, a second `serve` by mistake) that ran
that recovery would mark the owner's captures in flight `interrupted` and move them to `failed/`.

The owner holds an exclusive `flock` on `STORE/.owner` for its whole life and writes there who
it is; the kernel drops the lock when the process dies however it dies, so the next owner knows
that what it finds in `.staging/` was left by a stopped service. Readers look without taking the
lock for more than a moment (`live_owner`). `flock` holds across processes on one host, and
across pods on a volume whose filesystem forwards it (local disks, most CSI block volumes; NFS
since Linux 2.6.12, as a POSIX lock).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from profiler_service.errors import StoreOwned
from profiler_service.models import utcnow

__all__ = ["OWNER_FILE", "OwnerRecord", "StoreOwnership", "live_owner"]

log = logging.getLogger(__name__)

OWNER_FILE = ".owner"
# A reader's look holds a shared lock for microseconds; an owner starting meanwhile waits it out.
_ACQUIRE_WAIT_S = 2.0


@dataclass(frozen=True)
class OwnerRecord:
    """Who owns a store, as its owner wrote it in `STORE/.owner`."""

    pid: int
    host: str
    command: str
    since: str
    url: str | None = None

    @classmethod
    def of_this_process(cls, url: str | None) -> OwnerRecord:
        argv = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else "python"
        return cls(
            pid=os.getpid(),
            host=socket.gethostname(),
            command=argv[:200],
            since=utcnow().isoformat(timespec="seconds"),
            url=url,
        )

    def describe(self) -> str:
        where = f", answering at {self.url}" if self.url else ""
        return f"`{self.command}` (pid {self.pid} on {self.host}, since {self.since}{where})"

    @classmethod
    def parse(cls, text: str) -> OwnerRecord | None:
        try:
            fields = json.loads(text)
            return cls(**{k: fields[k] for k in cls.__dataclass_fields__ if k in fields})
        except (ValueError, TypeError):
            return None  # being written by an owner that has just started


def live_owner(root: Path) -> OwnerRecord | None:
    """The owner of the store at `root` if a live process holds it now; None when none does (a
    record left by a process that died owns nothing). An owner whose record is not readable yet
    is described as an unknown process."""
    try:
        fd = os.open(Path(root) / OWNER_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 4096, 0).decode(errors="replace")
            return OwnerRecord.parse(text) or OwnerRecord(0, "?", "an unknown process", "?")
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def owned_error(root: Path, owner: OwnerRecord | None) -> StoreOwned:
    """What a process that may not write the store is told: who owns it, and what to do."""
    who = owner.describe() if owner else "another process (it has not said which yet)"
    ask = (
        f"ask that service instead (`curl -X POST '{owner.url}/profile?duration=5s'`, or "
        f"`--url {owner.url}` for `compare`)"
        if owner and owner.url
        else "ask the service that owns it"
    )
    return StoreOwned(
        f"the snapshot store {root} is owned by {who}: only its owner writes it and recovers "
        f"what a stopped service left in flight. Use a store of your own, {ask}, or stop it first",
        owner=owner.describe() if owner else None,
    )


class StoreOwnership:
    """The owner's side: `acquire` at open, `release` at close (or the process's end)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.path = self.root / OWNER_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, url: str | None = None) -> None:
        """Own the store, or raise StoreOwned naming the process that does. A store where the
        file cannot be created (a read-only or full volume) is opened unowned: nothing can be
        written or recovered there anyway, and its reads still answer."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno not in (errno.EROFS, errno.EACCES, errno.ENOSPC, errno.EDQUOT):
                raise
            log.warning("cannot lock %s (%s): the store is opened without an owner", self.path,
                        exc.strerror)  # fmt: skip
            return
        deadline = time.monotonic() + _ACQUIRE_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    owner = OwnerRecord.parse(os.pread(fd, 4096, 0).decode(errors="replace"))
                    os.close(fd)
                    raise owned_error(self.root, owner) from None
                time.sleep(0.05)  # a reader's look holds it for moments
        record = json.dumps(asdict(OwnerRecord.of_this_process(url))).encode()
        with contextlib.suppress(OSError):  # a full disk: owned all the same, just unnamed
            os.ftruncate(fd, 0)
            os.pwrite(fd, record, 0)
        self._fd = fd

    def release(self) -> None:
        """Say nobody owns the store, then let go (a crash lets go without saying)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)
