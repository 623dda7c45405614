"""Commands the twin runs on this machine, failing with the command's own words."""
import os
import subprocess


class TwinError(RuntimeError):
    pass


def log(message):
    print("twin: %s" % message, flush=True)


def run(*args, check=True, env=None, input=None):
    result = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                            env=dict(os.environ, **(env or {})), input=input)
    if check and result.returncode != 0:
        raise TwinError("%s failed (exit %d): %s" % (" ".join(args), result.returncode,
                                                      (result.stderr or result.stdout or "").strip()[-2000:]))
    return result


def docker(*args, check=True, input=None):
    # The legacy builder needs no buildx plugin and no network for FROM an image that is already local.
    return run("docker", *args, check=check, env={"DOCKER_BUILDKIT": "0"}, input=input)
