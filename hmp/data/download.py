"""Downloads the benchmark scenes: ``python -m hmp.data.download --dataset=indian_pines``.

Each file is fetched into ``<name>.part`` next to its final place, resuming
an interrupted ``.part`` with an HTTP Range request, then checked against its
SHA-256 and only then renamed to its final name, so a file under the final
name is always complete and verified. Any failure prints one line starting
with ``hmp.data.download: error:`` and exits with status 1 (2 for bad flags).
Only the standard library's urllib is used.
"""

import hashlib
import http.client
import os
import pathlib
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from absl import flags

from hmp.data.catalog import EHU_BASE_URL, SCENES, default_data_dir, scene_spec

ALL_SCENES = "all"
PART_SUFFIX = ".part"
CHUNK_BYTES = 1 << 16


class DownloadError(RuntimeError):
    """A download that could not be completed or verified; the message is one line."""


def sha256_of(path):
    """Hex SHA-256 digest of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download_file(url, destination, sha256=None, *, timeout=30.0, report=None):
    """Fetches ``url`` to ``destination`` via a resumable ``.part`` file.

    Args:
      url: http(s) URL.
      destination: final path; it only appears once the file is complete and
        its digest matches ``sha256``.
      sha256: expected hex digest, or None to accept any content.
      timeout: seconds to wait for the server.
      report: callable(bytes_done, bytes_total_or_None) for progress output.

    Returns:
      The SHA-256 hex digest of the downloaded file.

    Raises:
      DownloadError: server unreachable, HTTP error, connection lost (the
        ``.part`` is kept so that the next run resumes) or digest mismatch
        (the ``.part`` is deleted).
    """
    destination = pathlib.Path(destination)
    part = destination.with_name(destination.name + PART_SUFFIX)
    _fetch_into(url, part, timeout, report or (lambda done, total: None))
    digest = sha256_of(part)
    if sha256 is not None and digest != sha256.lower():
        part.unlink()
        raise DownloadError(
            f"{destination.name}: SHA-256 mismatch, expected {sha256} but got {digest}; "
            f"the download was discarded")
    os.replace(part, destination)
    return digest


def _fetch_into(url, part, timeout, report):
    """Appends the missing bytes of ``url`` to ``part`` (or rewrites it if resuming fails)."""
    offset = part.stat().st_size if part.exists() else 0
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                          timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code == 416 and offset:  # nothing left to fetch: the .part is complete
            return
        raise DownloadError(f"{url}: HTTP error {error.code} {error.reason}") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise DownloadError(f"cannot reach {url} ({reason}); are you offline?") from None
    with response:
        if offset and not _resumes_at(response, offset):
            offset = 0
        length = response.headers.get("Content-Length")
        total = offset + int(length) if length is not None else None
        done = offset
        try:
            with open(part, "ab" if offset else "wb") as out:
                for chunk in iter(lambda: response.read(CHUNK_BYTES), b""):
                    out.write(chunk)
                    done += len(chunk)
                    report(done, total)
        except (OSError, http.client.HTTPException) as error:
            raise DownloadError(
                f"{url}: connection lost after {done} bytes ({error}); "
                f"run again to resume from {part}") from None
    if total is not None and done < total:
        raise DownloadError(
            f"{url}: connection closed after {done} of {total} bytes; "
            f"run again to resume from {part}")


def _resumes_at(response, offset):
    """Whether the server honoured our Range request starting at ``offset``."""
    content_range = response.headers.get("Content-Range", "")
    return response.status == 206 and content_range.startswith(f"bytes {offset}-")


def download_scene(name, data_dir, base_url=EHU_BASE_URL, *, timeout=30.0, out=None):
    """Downloads the cube and ground-truth files of scene ``name`` into ``data_dir``.

    Files already present with the right digest are kept. A present file
    with a wrong digest is an error (it is never overwritten silently).

    Progress and digests are printed to ``out`` (default: standard error).

    Returns:
      The paths of the scene's files.
    """
    out = out or sys.stderr
    spec = scene_spec(name)
    data_dir = pathlib.Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for scene_file in (spec.cube, spec.labels):
        destination = data_dir / scene_file.file_name
        if destination.exists():
            _check_present(destination, scene_file.sha256, out)
        else:
            url = f"{base_url.rstrip('/')}/{scene_file.url_path}"
            print(f"{scene_file.file_name}: downloading {url}", file=out)
            digest = download_file(url, destination, scene_file.sha256, timeout=timeout,
                                   report=_progress_printer(scene_file.file_name, out))
            verdict = "verified" if scene_file.sha256 else "no known checksum, computed"
            print(f"\n{scene_file.file_name}: SHA-256 {digest} ({verdict})", file=out)
        paths.append(destination)
    return paths


def _check_present(path, expected, out):
    digest = sha256_of(path)
    if expected is not None and digest != expected:
        raise DownloadError(
            f"{path} exists but its SHA-256 is {digest}, expected {expected}; "
            f"delete it and run again")
    print(f"{path.name}: already present, SHA-256 {digest}", file=out)


def _progress_printer(label, out, interval_seconds=0.5):
    """Returns a report(done, total) callable that rewrites one progress line."""
    last_print = [0.0]

    def report(done, total):
        now = time.monotonic()
        if now - last_print[0] < interval_seconds and done != total:
            return
        last_print[0] = now
        share = f" ({100 * done / total:.0f}%)" if total else ""
        size = f"{done / 1e6:.1f}" + (f"/{total / 1e6:.1f}" if total else "")
        print(f"\r{label}: {size} MB{share}", end="", file=out, flush=True)

    return report


PROG = "hmp.data.download"
HELP_FLAGS = ("-h", "--help", "--helpshort", "--helpfull", "-help")
URL_SCHEMES = ("http", "https", "file")


def _flag_values():
    """This command's flags, in a private FlagValues (no global flag clashes)."""
    values = flags.FlagValues()
    flags.DEFINE_enum("dataset", None, [*SCENES, ALL_SCENES], "Scene to download.",
                      flag_values=values)
    flags.DEFINE_string("data_dir", str(default_data_dir()), "Folder to download into.",
                        flag_values=values)
    flags.DEFINE_string("base_url", EHU_BASE_URL,
                        "Folder URL the files are fetched from (default: the EHU GIC wiki).",
                        flag_values=values)
    flags.DEFINE_float("timeout", 30.0, "Seconds to wait for the server (> 0).",
                       flag_values=values)
    flags.mark_flag_as_required("dataset", flag_values=values)
    return values


def _checked(values):
    """Errors of flag values the parser cannot judge, as one line (None if fine)."""
    scheme = urllib.parse.urlsplit(values.base_url).scheme
    if scheme not in URL_SCHEMES:
        return (f"--base_url={values.base_url}: not a URL; allowed: one starting with "
                + ", ".join(f"{s}://" for s in URL_SCHEMES))
    if not values.timeout > 0 or values.timeout == float("inf"):
        return f"--timeout={values.timeout:g}: must be a number of seconds > 0"
    return None


def _fail(message, status):
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


def main(argv=None):
    """Runs the download command; returns the process exit status."""
    argv = list(sys.argv if argv is None else argv)
    values = _flag_values()
    if any(arg in HELP_FLAGS for arg in argv[1:]):
        print(f"python -m {PROG} --dataset=NAME [--data_dir=DIR]\n\n{__doc__}\n"
              + values.get_help())
        return 0
    try:
        values(argv)
    except flags.Error as error:
        return _fail(error, 2)
    problem = _checked(values)
    if problem:
        return _fail(problem, 2)
    names = list(SCENES) if values.dataset == ALL_SCENES else [values.dataset]
    folder = pathlib.Path(values.data_dir)
    made = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return _fail(f"--data_dir={values.data_dir}: cannot make the folder: "
                     f"{error.strerror}", 2)
    try:
        for name in names:
            download_scene(name, values.data_dir, values.base_url, timeout=values.timeout)
    except DownloadError as error:
        if made and not any(folder.iterdir()):   # leave no empty folder behind
            folder.rmdir()
        print(file=sys.stderr)   # end the progress line
        return _fail(error, 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
