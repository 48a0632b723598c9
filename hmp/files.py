"""Writing a file atomically: a reader never sees half a file; replacing a set of files
in a folder only once the new set is whole; checking, before any work, that an output
folder or file can be made; and reading an .npz file that may be damaged.

Used by every writer of a run's files (JSON reports, saved splits), so a kill
in the middle of a write leaves the old file or none, never a broken one.
"""

import contextlib
import json
import os
import shutil
import tempfile
import zipfile

import numpy as np

from hmp.errors import InvalidInput

_UMASK = os.umask(0)
os.umask(_UMASK)   # read once: new files get the mode any file of this process gets


@contextlib.contextmanager
def atomic_path(path, suffix=".tmp"):
    """Yields a temporary path beside ``path``; on success it replaces ``path``.

    Writers of the same file at once (e.g. two runs sharing a cache) never mix
    their bytes: each writes its own ``<name>.<random><suffix>``. The temporary
    file is removed when the block fails. ``suffix`` lets writers that insist on
    an extension (``numpy.savez`` appends ``.npz`` otherwise) keep theirs.
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=suffix,
                                     dir=folder)
    os.close(fd)
    try:
        yield temporary
        os.chmod(temporary, 0o666 & ~_UMASK)   # mkstemp's file is private (0600)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


@contextlib.contextmanager
def replacing_entries(folder, entries):
    """Yields a path (not yet made) to write a folder of new entries in; on success they
    replace the set ``entries`` (names) in ``folder`` (made if need be): those of the set
    there go, one of the set the new ones lack included, other files there are kept; on
    failure ``folder`` is left as it was (a folder made for it removed again). The new
    entries are written in ``folder``, on its filesystem (it may be a mount point of its
    own, which a move from elsewhere could not reach); a failed move undoes the moves
    before it."""
    made = not os.path.isdir(folder)
    staging = None
    try:
        try:
            os.makedirs(folder, exist_ok=True)
            staging = tempfile.mkdtemp(prefix="." + os.path.basename(os.path.abspath(folder))
                                       + ".", suffix=".tmp", dir=folder)
        except OSError as error:
            raise OSError("cannot write in %s: %s" % (folder, error.strerror)) from None
        new = os.path.join(staging, "new")
        yield new
        _swap_entries(new, folder, entries, os.path.join(staging, "earlier"))
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if made and os.path.isdir(folder) and not os.listdir(folder):
            os.rmdir(folder)


def _swap_entries(new, folder, entries, aside):
    """Moves ``entries`` of ``folder`` into ``aside`` (made here), then every entry of
    folder ``new`` into ``folder``; when a move fails, the moves before it are undone."""
    os.mkdir(aside)
    moves = [(os.path.join(folder, name), os.path.join(aside, name)) for name in entries
             if os.path.lexists(os.path.join(folder, name))]
    moves += [(os.path.join(new, name), os.path.join(folder, name))
              for name in sorted(os.listdir(new))]
    done = []
    try:
        for source, target in moves:
            os.replace(source, target)
            done.append((source, target))
    except BaseException:
        for source, target in reversed(done):
            os.replace(target, source)
        raise


def read_json_file(path, what):
    """The JSON in the file ``path`` that the user named; an InvalidInput saying ``what``
    it is (e.g. "plan file p.json") and why it cannot be read, or that it is not JSON."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise InvalidInput(f"{what} cannot be read ({e.strerror or e})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InvalidInput(f"{what} is not JSON ({e})") from None


def write_json(path, payload):
    """Writes ``payload`` as JSON atomically (numpy values become plain numbers and lists)."""
    with atomic_path(path) as temporary, open(temporary, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=2, default=_plain)


def read_npz(path):
    """{name: array} of the .npz file ``path``, or None when numpy cannot read it as one
    of plain arrays: not a zip (numpy takes it for a pickle), empty, cut short, a lone
    .npy array, object arrays. Each reader words its own error."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            return {name: stored[name] for name in stored.files}
    except (ValueError, EOFError, zipfile.BadZipFile, TypeError):   # TypeError: an array, no `with`
        return None


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def check_folder_can_be_made(path):
    """InvalidInput unless ``path`` is a folder or can be made one: its nearest existing
    ancestor is a folder this process may write. Makes nothing."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise InvalidInput("%s is not a folder" % existing)
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InvalidInput("%s is not writable" % existing)


def check_file_can_be_written(path):
    """InvalidInput unless ``path`` can be written as a file: it is not a folder, and its
    folder is one or can be made (:func:`check_folder_can_be_made`). Makes nothing."""
    if os.path.isdir(path):
        raise InvalidInput("%s is a folder; give a file's path" % path)
    check_folder_can_be_made(os.path.dirname(os.path.abspath(path)))
