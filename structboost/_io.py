"""Files written whole or not at all.

Every file structboost writes (model files, the CLI's tagged output and
plots) goes through :func:`atomic_open`: the content is written to a
temporary file in the target's folder, flushed to disk, and renamed over
the target (``os.replace``, atomic on POSIX and Windows) only once complete.
A failed write (a full disk, an exception while writing, a killed process)
leaves the previous file intact and no partial one.
"""

import contextlib
import os
import tempfile
from pathlib import Path


def _new_file_mode(target):
    """The mode the target keeps (if it exists) or a new file gets under the umask."""
    try:
        return os.stat(target).st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@contextlib.contextmanager
def atomic_open(path, mode="w", encoding="utf-8"):
    """Open a temporary file that replaces ``path`` when the block ends without error.

    Parameters
    ----------
    path : str or os.PathLike
    mode : {"w", "wb"}
    encoding : str
        For text mode.

    Yields
    ------
    file object
    """
    target = Path(path)
    handle = tempfile.NamedTemporaryFile(
        mode=mode,
        encoding=None if "b" in mode else encoding,
        dir=target.parent,
        prefix=f".{target.name}.",
        suffix=".tmp",
        delete=False,
    )
    try:
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(handle.name, _new_file_mode(target))
        os.replace(handle.name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(handle.name)
        raise


def atomic_write_text(path, text, encoding="utf-8"):
    """Write ``text`` to ``path`` through :func:`atomic_open`."""
    with atomic_open(path, "w", encoding=encoding) as handle:
        handle.write(text)
