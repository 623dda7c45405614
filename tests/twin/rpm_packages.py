"""Turn a Debian twin root into an RPM distribution's: run inside the root (chroot), with the root's own Python.

The twin's openEuler, Kylin and UOS hosts install what a real site installs from its RPM mirror: docker-engine,
haproxy, node_exporter, ... For each such package this script builds an RPM, under the distribution's name and
file layout (RPM_PACKAGES), from the files of the Debian packages the root already holds (the same binaries as on
the twin's Debian hosts), writes the RPMs and their repodata to REPO_DIR for the twin to serve over HTTP, then
removes those Debian packages, apt and dpkg from the root: what remains is a host with rpm and dnf, on which only
the repository installs them.

    python3 rpm_packages.py   (inside the root; writes /srv/twin-rpm-repo)
"""
import grp
import os
import pathlib
import pwd
import re
import shutil
import stat
import subprocess
import sys

REPO_DIR = pathlib.Path("/srv/twin-rpm-repo")
WORK = pathlib.Path("/tmp/twin-rpm")
# Docker 18.09, as openEuler's and Kylin's docker-engine is, predates Docker's firewalld integration (20.10, moby
# libnetwork #2548): it neither puts its bridge into a firewalld zone nor restores its rules after a firewalld
# reload (openEuler's docs: restart Docker after firewalld). The engine here is 20.10, which would do both over
# D-Bus; without the system bus it does neither, as 18.09.
DOCKER_18_09 = ('\n# The twin: this engine stands for Docker 18.09 (docker-engine), which knows nothing of firewalld.\n'
                'export DBUS_SYSTEM_BUS_ADDRESS=unix:path=/run/twin-no-dbus\n')
# Where the packages' init scripts log (Debian's prometheus package makes it, which these do not depend on).
LOG_FOLDER = ["/var/log/prometheus"]
# name -> what it is made of: the Debian packages whose files it holds, paths renamed to the RPM layout, text
# replaced in files (after renaming), files added, folders added, and the accounts (user, group) its
# %pre makes besides the owners of its files. Names and layouts: openEuler's docker-engine (which bundles
# containerd and runc) and haproxy; the exporters and Prometheus as the prometheus-rpm repository packages them
# for EL (node_exporter, prometheus2, alertmanager, blackbox_exporter; /etc/default/<name> holding <NAME>_OPTS,
# "options": the variable and its packaged value),
# since openEuler and Kylin ship none of them.
RPM_PACKAGES = {
    "docker-engine": {"debs": ["docker.io", "containerd", "runc", "tini"], "summary": "Docker engine (18.09 role)",
                      "append": {"/etc/default/docker": DOCKER_18_09}, "accounts": [("root", "docker")]},
    "haproxy": {"debs": ["haproxy"], "summary": "HAProxy load balancer", "accounts": [("haproxy", "haproxy")]},
    "node_exporter": {"folders": LOG_FOLDER, "debs": ["prometheus-node-exporter"],
                      "summary": "Prometheus node exporter",
                      "rename": {"prometheus-node-exporter": "node_exporter"}, "options": ("NODE_EXPORTER_OPTS", "")},
    "prometheus2": {"debs": ["prometheus"], "summary": "Prometheus monitoring system"},
    "alertmanager": {"folders": LOG_FOLDER, "debs": ["prometheus-alertmanager"], "summary": "Prometheus Alertmanager",
                     "rename": {"prometheus-alertmanager": "alertmanager"}, "options": ("ALERTMANAGER_OPTS", "")},
    "blackbox_exporter": {"folders": LOG_FOLDER, "debs": ["prometheus-blackbox-exporter"],
                          "summary": "Prometheus blackbox exporter",
                          "rename": {"prometheus-blackbox-exporter": "blackbox_exporter"},
                          "options": ("BLACKBOX_EXPORTER_OPTS", "--config.file=/etc/prometheus/blackbox.yml")},
}
# Left out of the RPMs: documentation, as --nodocs installs.
SKIPPED = re.compile(r"^/usr/share/(doc|man|lintian|bash-completion|zsh)/")
# What an RPM host has no use for once its packages are RPMs.
DEBIAN_TOOLS = ["/usr/bin/" + name for name in (
    "apt", "apt-get", "apt-cache", "apt-mark", "apt-config", "apt-key", "dpkg", "dpkg-query", "dpkg-deb",
    "dpkg-divert", "dpkg-split", "dpkg-statoverride", "dpkg-trigger", "dpkg-maintscript-helper")]


def run(*argv, **kwargs):
    return subprocess.run(argv, check=True, stdout=subprocess.PIPE, universal_newlines=True, **kwargs).stdout


def rpm_version(debian_version):
    """An RPM Version of a Debian one: no epoch, no '-' (the Debian revision goes), and only [A-Za-z0-9._]."""
    upstream = debian_version.split(":", 1)[-1].rsplit("-", 1)[0]
    return re.sub(r"[^A-Za-z0-9._]", ".", upstream)


def renamed(path, renames):
    for old, new in renames.items():
        path = path.replace(old, new)
    return path


def stage(name, spec, root):
    """Copy the Debian packages' files into root under their RPM paths; (entries, owners, version)."""
    renames = spec.get("rename", {})
    version = rpm_version(run("dpkg-query", "-W", "-f=${Version}", spec["debs"][0]))
    paths = []
    for deb in spec["debs"]:
        paths += [line for line in run("dpkg", "-L", deb).splitlines()
                  if line not in ("/.", "") and not SKIPPED.match(line)]
    entries, owners = [], set()
    # Each path through the root's own folder links (/lib is usr/lib on a merged /usr), as rpm would place it.
    canonical = set(os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path)) for path in paths)
    for source in sorted(canonical):
        if not os.path.lexists(source) or (os.path.islink(source) and os.path.isdir(source)):
            continue  # a file a maintainer script or an admin removed, or a link of the root's layout
        target = renamed(source, renames)
        info = os.lstat(source)
        destination = root / target.lstrip("/")
        if stat.S_ISDIR(info.st_mode):
            destination.mkdir(parents=True, exist_ok=True)
        else:
            destination.parent.mkdir(parents=True, exist_ok=True)
            if stat.S_ISLNK(info.st_mode):
                os.symlink(renamed(os.readlink(source), renames), destination)
            else:
                shutil.copy2(source, destination)
                if renames and not info.st_size > 1 << 20:  # text files: the scripts and defaults name themselves
                    data = destination.read_bytes()
                    if b"\0" not in data:
                        text = renamed(data.decode("utf-8", "replace"), renames)
                        if spec.get("options"):
                            text = text.replace("-- $ARGS", "-- $%s" % spec["options"][0])
                        destination.write_text(text)
        user, group = pwd.getpwuid(info.st_uid).pw_name, grp.getgrgid(info.st_gid).gr_name
        owners.add((user, group))
        entries.append((target, info.st_mode, user, group))
    if spec.get("options"):
        defaults = "/etc/default/%s" % name
        (root / defaults.lstrip("/")).write_text("# Arguments of %s (the service passes them as they are).\n%s=\"%s\"\n"
                                                 % ((name,) + spec["options"]))
        entries = [entry for entry in entries if entry[0] != defaults] + [(defaults, 0o100644, "root", "root")]
    for path in spec.get("folders", ()):
        (root / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
        # As the root has it, so that every package holding it agrees with the one whose files it holds.
        info = os.stat(path)
        entries.append((path, info.st_mode, pwd.getpwuid(info.st_uid).pw_name, grp.getgrgid(info.st_gid).gr_name))
    for path, text in spec.get("append", {}).items():
        with open(root / path.lstrip("/"), "a") as stream:
            stream.write(text)
    return entries, owners, version


def spec_text(name, spec, entries, owners, version, stage_dir, base_dirs):
    """The spec: the staged files as they are, their owners made first (%pre), no dependencies computed."""
    lines = ["Name: %s" % name, "Version: %s" % version, "Release: 1.twin", "Summary: %s" % spec["summary"],
             "License: see the Debian package", "AutoReqProv: no",
             "%description", "%s, packaged by the twin from the Debian package's files." % spec["summary"],
             "%install", "cp -a %s/. %%{buildroot}/" % stage_dir, "%pre"]
    for user, group in sorted(owners):
        if group != "root":
            lines.append("getent group %s >/dev/null || groupadd --system %s" % (group, group))
        if user != "root":
            lines.append("getent passwd %s >/dev/null || useradd --system --no-create-home --shell /usr/sbin/nologin "
                         "--gid %s %s" % (user, group, user))
    lines += ["exit 0", "%files"]
    for path, mode, user, group in entries:
        attr = "%%attr(%04o,%s,%s)" % (stat.S_IMODE(mode), user, group)
        if stat.S_ISDIR(mode):
            if path not in base_dirs:
                lines.append("%s %%dir \"%s\"" % (attr, path))
        elif stat.S_ISLNK(mode):
            lines.append("\"%s\"" % path)
        elif path.startswith("/etc/"):
            lines.append("%s %%config(noreplace) \"%s\"" % (attr, path))
        else:
            lines.append("%s \"%s\"" % (attr, path))
    return "\n".join(lines) + "\n"


def install_base_system():
    """Record in the root's rpm database that the base system is installed, as a distribution's own packages do: rpm
    requires the interpreter of every package's scriptlets (/bin/sh), and the root's files are known to dpkg only."""
    folder = WORK / "base-system"
    spec_file = folder / "base-system.spec"
    folder.mkdir(parents=True)
    spec_file.write_text("Name: twin-base-system\nVersion: 1\nRelease: 1.twin\nSummary: the base system\n"
                         "License: none\nBuildArch: noarch\nProvides: /bin/sh, /bin/bash, /usr/bin/sh, /usr/bin/bash\n"
                         "%description\nThe root's base system, installed before rpm was.\n%files\n")
    run("rpmbuild", "-bb", "--quiet", "--define", "_topdir %s" % (folder / "top"), str(spec_file))
    run("rpm", "-i", "--justdb", *[str(path) for path in (folder / "top" / "RPMS").rglob("*.rpm")])


def main():
    base_dirs = set(pathlib.Path(sys.argv[1]).read_text().split("\n")) if len(sys.argv) > 1 else set()
    shutil.rmtree(WORK, ignore_errors=True)
    install_base_system()
    packages = REPO_DIR / "Packages"
    packages.mkdir(parents=True, exist_ok=True)
    for name, spec in sorted(RPM_PACKAGES.items()):
        stage_dir = WORK / name / "stage"
        entries, owners, version = stage(name, spec, stage_dir)
        spec_file = WORK / name / ("%s.spec" % name)
        owners |= set(spec.get("accounts", ()))
        spec_file.write_text(spec_text(name, spec, entries, owners, version, stage_dir, base_dirs))
        # Uncompressed payload and no post-processing (stripping, build-id links): these are a test's packages.
        run("rpmbuild", "-bb", "--quiet", "--define", "_topdir %s" % (WORK / name / "top"),
            "--define", "_binary_payload w0.ufdio", "--define", "__os_install_post %{nil}",
            "--define", "_build_id_links none", "--define", "debug_package %{nil}", str(spec_file))
        for built in (WORK / name / "top" / "RPMS").rglob("*.rpm"):
            shutil.move(str(built), str(packages / built.name))
    run("createrepo_c", "--quiet", str(REPO_DIR))
    debs = [deb for spec in RPM_PACKAGES.values() for deb in spec["debs"]]
    subprocess.run(["dpkg", "--purge", "--force-depends"] + debs, check=True, stdout=subprocess.DEVNULL,
                   env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    # firewalld brought systemd, whose /sbin/init would make Ansible take systemd for the host's service manager; a
    # twin host's init is the twin's (host/init.sh), which runs the packages' init scripts.
    for tool in DEBIAN_TOOLS + ["/usr/sbin/init"]:
        if os.path.lexists(tool):
            os.unlink(tool)
    shutil.rmtree(WORK)


if __name__ == "__main__":
    main()
