"""Files written whole or not at all (:func:`atomic_open`).

Content goes to a temporary file beside the target, is flushed to disk and
renamed over the target once complete; a failed write leaves the previous
file. A symbolic link is written through, a device, FIFO or socket written to
as named, a read-only file refused. The temporary file is created with the
result's mode (the old file's, or ``0o666`` less the umask the kernel applies).
"""

import contextlib
import os
import secrets
import stat
from pathlib import Path


def _create_beside(target, mode):
    """A new file beside ``target`` created with ``mode``: ``(fd, path)``."""
    while True:
        name = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), name
        except FileExistsError:
            continue


@contextlib.contextmanager
def atomic_open(path, mode="w", encoding="utf-8"):
    """Open a temporary file that replaces ``path`` when the block ends without error.

    Parameters
    ----------
    path : str or os.PathLike
        A file (a folder: IsADirectoryError; read-only: PermissionError).
    mode : {"w", "wb"}
    encoding : str
        For text mode.

    Yields
    ------
    file object
    """
    encoding = None if "b" in mode else encoding
    try:
        st = os.stat(path)  # through links: what the path names
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(f"{path} is a folder: name a file to write.")
    if st is not None and not stat.S_ISREG(st.st_mode):
        with open(path, mode, encoding=encoding) as handle:  # a device, FIFO or socket
            yield handle
        return
    if st is not None and not st.st_mode & stat.S_IWUSR:
        raise PermissionError(
            f"{path} is read-only: structboost does not replace it; make it writable "
            "(chmod u+w) or write elsewhere."
        )
    target = Path(os.path.realpath(path))  # a link is written through, not replaced
    fd, temporary = _create_beside(target, 0o666 if st is None else 0o600)
    try:
        with open(fd, mode, encoding=encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        if st is not None:
            os.chmod(temporary, stat.S_IMODE(st.st_mode))
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def atomic_write_text(path, text, encoding="utf-8"):
    """Write ``text`` to ``path`` through :func:`atomic_open`."""
    with atomic_open(path, "w", encoding=encoding) as handle:
        handle.write(text)
