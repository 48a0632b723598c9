"""Files that appear whole or not at all: write to a temporary name, then rename.

A reader (or a run killed half-way) never sees half a file, and writers of
the same file at once never mix their bytes.
"""

import contextlib
import os
import shutil
import tempfile


@contextlib.contextmanager
def replacing(path, folder=False):
    """Yields a temporary path beside ``path``; on success it replaces ``path``.

    Write the file (or with ``folder``, make the folder) at the yielded path.
    On any failure the temporary file or folder is removed and ``path`` is
    left as it was. A folder replaces an existing ``path`` folder (deleted
    just before the rename).
    """
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    prefix = os.path.basename(path) + "."
    if folder:   # a unique name, made by the caller (writers such as SavedModel's insist)
        temporary = tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=parent)
        os.rmdir(temporary)
    else:
        fd, temporary = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=parent)
        os.close(fd)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)   # as open() would make it, not mkstemp's 0600
    try:
        yield temporary
        if folder and os.path.isdir(path):
            shutil.rmtree(path)
        os.replace(temporary, path)
    except BaseException:
        if os.path.isdir(temporary):
            shutil.rmtree(temporary)
        elif os.path.exists(temporary):
            os.remove(temporary)
        raise
