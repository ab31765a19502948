"""A damaged on-disk kernel cache is read as a miss, never an error (``_config.njit``)."""

import os
import subprocess
import sys
import textwrap

KERNEL = textwrap.dedent(
    """
    from structboost._config import njit

    @njit(cache=True)
    def plus_one(x):
        return x + 1

    print(plus_one(41))
    """
)


def _run(folder, cache):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, str(folder / "kernel.py")], capture_output=True, text=True, env=env,
        timeout=300,
    )  # fmt: skip


def test_truncated_cache_files_are_compiled_again_and_rewritten(tmp_path):
    (tmp_path / "kernel.py").write_text(KERNEL)
    cache = tmp_path / "cache"
    assert _run(tmp_path, cache).stdout == "42\n"
    files = sorted(p for p in cache.rglob("*") if p.suffix in (".nbi", ".nbc"))
    assert {p.suffix for p in files} == {".nbi", ".nbc"}
    for suffix in (".nbc", ".nbi"):  # a damaged data file, then a damaged index
        for path in files:
            if path.exists() and path.suffix == suffix:
                path.write_bytes(path.read_bytes()[:10])
        run = _run(tmp_path, cache)
        assert (run.returncode, run.stdout) == (0, "42\n"), run.stderr[-500:]
    assert all(p.stat().st_size > 10 for p in cache.rglob("*.nbi"))
