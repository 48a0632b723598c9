"""The one exception class hmp raises for input it refuses.

Validators (of flags, files, scenes, meshes, plans, speeds, ...) raise
:class:`InvalidInput`, a ``ValueError``; the command-line programs turn it,
and only it, into one line that names the flags concerned (exit code 2).
Any other exception is a bug or a failure of the system, and keeps its
traceback.
"""


class InvalidInput(ValueError):
    """Input that hmp refuses (a flag value, a file, a scene, a mesh...); the message says why."""
