"""The download command against a local HTTP server on 127.0.0.1 (never any other host)."""

import dataclasses
import hashlib
import http.server
import socket
import threading

import numpy as np
import pytest
import scipy.io

from hmp.data import catalog, load_scene
from hmp.data.download import DownloadError, download_file, main

PAYLOAD = bytes(range(256)) * 400  # 102400 bytes


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves ``server.files`` (path -> bytes), honouring ``Range: bytes=N-`` like real servers."""

    def do_GET(self):
        server = self.server
        server.range_headers.append(self.headers.get("Range"))
        body = server.files.get(self.path)
        if body is None:
            self.send_error(404, "Not Found")
            return
        start = 0
        requested = self.headers.get("Range")
        if requested and server.honour_range:
            start = int(requested.split("=")[1].split("-")[0])
            if start >= len(body):
                self.send_error(416, "Range Not Satisfiable")
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        sent = body[start:start + server.cut_after] if server.cut_after else body[start:]
        server.cut_after = None
        server.bytes_sent += len(sent)
        self.wfile.write(sent)

    def log_message(self, *args):
        pass


@pytest.fixture
def server(monkeypatch):
    for variable in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.files, httpd.range_headers, httpd.bytes_sent = {"/f.bin": PAYLOAD}, [], 0
    httpd.honour_range, httpd.cut_after = True, None
    httpd.base_url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def closed_loopback_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_full_download_is_verified_and_renamed(server, tmp_path):
    reports = []
    digest = download_file(f"{server.base_url}/f.bin", tmp_path / "f.bin", sha256(PAYLOAD),
                           report=lambda done, total: reports.append((done, total)))
    assert (tmp_path / "f.bin").read_bytes() == PAYLOAD and digest == sha256(PAYLOAD)
    assert not (tmp_path / "f.bin.part").exists()
    assert reports[-1] == (len(PAYLOAD), len(PAYLOAD))


def test_partial_download_resumes_with_a_range_request(server, tmp_path):
    (tmp_path / "f.bin.part").write_bytes(PAYLOAD[:30000])
    download_file(f"{server.base_url}/f.bin", tmp_path / "f.bin", sha256(PAYLOAD))
    assert (tmp_path / "f.bin").read_bytes() == PAYLOAD
    assert server.range_headers == ["bytes=30000-"]
    assert server.bytes_sent == len(PAYLOAD) - 30000


def test_dropped_connection_keeps_the_part_file_and_the_next_run_resumes(server, tmp_path):
    server.cut_after = 50000
    with pytest.raises(DownloadError, match="connection closed after 50000 of 102400 bytes"):
        download_file(f"{server.base_url}/f.bin", tmp_path / "f.bin", sha256(PAYLOAD))
    assert not (tmp_path / "f.bin").exists()
    assert (tmp_path / "f.bin.part").stat().st_size == 50000
    download_file(f"{server.base_url}/f.bin", tmp_path / "f.bin", sha256(PAYLOAD))
    assert (tmp_path / "f.bin").read_bytes() == PAYLOAD
    assert server.range_headers == [None, "bytes=50000-"]


def test_server_ignoring_range_restarts_the_file_cleanly(server, tmp_path):
    server.honour_range = False
    (tmp_path / "f.bin.part").write_bytes(b"stale bytes")
    download_file(f"{server.base_url}/f.bin", tmp_path / "f.bin", sha256(PAYLOAD))
    assert (tmp_path / "f.bin").read_bytes() == PAYLOAD


def test_complete_part_file_is_finished_without_refetching(server, tmp_path):
    (tmp_path / "f.bin.part").write_bytes(PAYLOAD)
    download_file(f"{server.base_url}/f.bin", tmp_path / "f.bin", sha256(PAYLOAD))
    assert (tmp_path / "f.bin").read_bytes() == PAYLOAD and server.bytes_sent == 0


def test_checksum_mismatch_is_refused_and_nothing_is_kept(server, tmp_path):
    wrong = sha256(b"something else")
    with pytest.raises(DownloadError, match=f"expected {wrong} but got {sha256(PAYLOAD)}"):
        download_file(f"{server.base_url}/f.bin", tmp_path / "f.bin", wrong)
    assert list(tmp_path.iterdir()) == []


def test_http_error_is_reported(server, tmp_path):
    with pytest.raises(DownloadError, match="HTTP error 404"):
        download_file(f"{server.base_url}/missing.bin", tmp_path / "x")


def test_unreachable_server_gives_one_clear_line_and_exit_status_1(tmp_path, capsys):
    base_url = f"http://127.0.0.1:{closed_loopback_port()}"
    status = main(["download", "--dataset=paviau", f"--data_dir={tmp_path}",
                   f"--base_url={base_url}", "--timeout=5"])
    assert status == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert errors[-1].startswith(
        f"hmp.data.download: error: cannot reach {base_url}/e/ee/PaviaU.mat")
    assert not (tmp_path / "PaviaU.mat").exists()


def test_unknown_dataset_flag_is_refused(tmp_path, capsys):
    assert main(["download", "--dataset=houston", f"--data_dir={tmp_path}"]) == 2
    assert "houston" in capsys.readouterr().err


def test_a_data_dir_that_cannot_be_made_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "a_file").write_text("")
    assert main(["download", "--dataset=paviau", f"--data_dir={tmp_path / 'a_file' / 'd'}"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"hmp.data.download: error: --data_dir={tmp_path / 'a_file' / 'd'}: cannot make the "
        "folder: Not a directory"]


def test_command_downloads_a_scene_that_then_loads(server, tmp_path, monkeypatch, capsys):
    spec = catalog.SCENES["indian_pines"]
    files = {}
    for scene_file, array in ((spec.cube, np.ones((4, 3, 2))), (spec.labels, np.eye(4, 3))):
        path = tmp_path / "served" / scene_file.file_name
        path.parent.mkdir(exist_ok=True)
        scipy.io.savemat(path, {scene_file.key: array})
        files[scene_file] = path.read_bytes()
    server.files = {f"/{scene_file.url_path}": data for scene_file, data in files.items()}
    monkeypatch.setitem(catalog.SCENES, "indian_pines", dataclasses.replace(
        spec, cube=dataclasses.replace(spec.cube, sha256=sha256(files[spec.cube])),
        labels=dataclasses.replace(spec.labels, sha256=None)))
    argv = ["download", "--dataset=indian_pines", f"--data_dir={tmp_path / 'data'}",
            f"--base_url={server.base_url}"]
    assert main(argv) == 0
    output = capsys.readouterr().err
    assert f"SHA-256 {sha256(files[spec.labels])} (no known checksum, computed)" in output
    assert load_scene("indian_pines", tmp_path / "data").cube.shape == (4, 3, 2)
    assert main(argv) == 0
    assert "already present" in capsys.readouterr().err


def test_help_is_printed_with_status_0(capsys):
    assert main(["download", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("python -m hmp.data.download --dataset=NAME") and "--base_url" in out


@pytest.mark.parametrize("flag, message", [
    ("--base_url=notaurl", "--base_url=notaurl: not a URL; allowed: one starting with "
                           "http://, https://, file://"),
    ("--timeout=-1", "--timeout=-1: must be a number of seconds > 0"),
    ("--timeout=0", "--timeout=0: must be a number of seconds > 0"),
])
def test_bad_url_or_timeout_is_one_line_and_makes_no_folder(tmp_path, capsys, flag, message):
    assert main(["download", "--dataset=paviau", f"--data_dir={tmp_path / 'd'}", flag]) == 2
    assert capsys.readouterr().err.splitlines() == ["hmp.data.download: error: " + message]
    assert not (tmp_path / "d").exists()


def test_a_failed_download_leaves_no_empty_folder(tmp_path, capsys):
    base_url = f"http://127.0.0.1:{closed_loopback_port()}"
    assert main(["download", "--dataset=paviau", f"--data_dir={tmp_path / 'new'}",
                 f"--base_url={base_url}", "--timeout=5"]) == 1
    assert not (tmp_path / "new").exists()
