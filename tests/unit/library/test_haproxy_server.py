"""library/haproxy_server.py without an HAProxy: a socket that is missing or no socket, options it cannot use,
refused before the socket is used, and a socket that trickles its answer, cut off at the timeout. The module
against a real HAProxy: tests/local/test_gateway_haproxy.py."""
import os
import shutil
import socket
import tempfile
import threading
import time

import pytest
from module_runs import run_module

from conftest import GATEWAY_BACKEND as BACKEND


def test_a_missing_socket_asks_whether_haproxy_runs_with_an_admin_socket(tmp_path):
    missing = str(tmp_path / "admin.sock")
    result = run_module("haproxy_server", socket=missing, backend=BACKEND, server="a:b", state="drain")
    assert result["failed"] is True
    assert ("socket %s: No such file or directory: is HAProxy running with `stats socket %s level admin`"
            % (missing, missing)) in result["msg"]
    (tmp_path / "file").write_text("")
    result = run_module("haproxy_server", socket=str(tmp_path / "file"), backend=BACKEND, server="a:b",
                        state="ready")
    assert result["failed"] is True and "not a socket" in result["msg"]


@pytest.mark.parametrize("args,expected", [
    ({"backend": "a/b", "server": "s", "state": "drain"}, "backend 'a/b': expected an HAProxy name"),
    ({"backend": "b", "server": "s\n", "state": "drain"}, "server 's\\n': expected an HAProxy name"),
    ({"backend": "b", "server": "s\nset server b/t state maint", "state": "drain"}, "expected an HAProxy name"),
    ({"backend": "bé", "server": "s", "state": "drain"}, "backend 'bé': expected an HAProxy name (ASCII letters"),
    ({"backend": "b", "server": " ", "state": "drain"}, "server is empty"),
    ({"backend": "b", "server": "s", "state": "drain", "timeout": 0}, "timeout: 0 is not allowed"),
    ({"backend": "b", "server": "s", "state": "ready", "wait_idle": True}, "wait_idle: waits for a server with no "
                                                                           "new requests, but state is ready"),
    ({"backend": "b", "server": "s", "state": "maint", "wait_up": True}, "wait_up: waits for a server that takes "
                                                                         "requests, but state is maint"),
])
def test_options_it_cannot_use_are_refused_before_the_socket_is_used(tmp_path, args, expected):
    result = run_module("haproxy_server", socket=str(tmp_path / "none.sock"), **args)
    assert result["failed"] is True and expected in result["msg"] and "Fix:" in result["msg"]


@pytest.fixture
def trickling_socket():
    """A UNIX socket that answers every command a byte every 2 s, for 12 s at most (each read well within the 10 s
    a command's answer may take); its path is short, as a socket's must be."""
    folder = tempfile.mkdtemp(prefix="haproxy-", dir="/tmp")
    path = os.path.join(folder, "admin.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(4)
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                connection, _address = listener.accept()
            except socket.timeout:
                continue
            with connection:
                connection.recv(1024)
                for byte in b"# pxna":
                    if stop.wait(2):
                        return
                    try:
                        connection.sendall(bytes([byte]))
                    except OSError:
                        break

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        stop.set()
        thread.join(5)
        listener.close()
        shutil.rmtree(folder)


def test_a_socket_that_trickles_its_answer_is_cut_off_at_the_timeout(trickling_socket):
    started = time.monotonic()
    result = run_module("haproxy_server", socket=trickling_socket, backend=BACKEND, server="a:b", state="drain",
                        wait_idle=True, timeout=3)
    elapsed = time.monotonic() - started
    assert result["failed"] is True
    assert ("%s/a:b: the time ran out (timeout: 3 s, the whole call) while waiting for HAProxy's answer to 'show "
            "stat' on socket %s" % (BACKEND, trickling_socket)) in result["msg"] and "Fix:" in result["msg"], result
    assert elapsed < 9, "the module took %.1f s with timeout 3" % elapsed
