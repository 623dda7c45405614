"""library/haproxy_server.py without an HAProxy: a socket that is missing or no socket, and options it cannot use,
refused before the socket is used. The module against a real HAProxy: tests/local/test_gateway_haproxy.py."""
import pytest
from module_runs import run_module

BACKEND = "vllm_instances"  # roles/gateway/vars/main.yml


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
