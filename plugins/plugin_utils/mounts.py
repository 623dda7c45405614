"""Free space on a host, from Ansible's mounts facts."""


def free_bytes(path, mounts):
    """Free bytes of the filesystem holding path, from Ansible's mounts facts (longest matching mount point)."""
    best = None
    for mount in mounts or []:
        point = mount.get("mount", "")
        inside = path == point or path.startswith(point.rstrip("/") + "/") or point == "/"
        if inside and (best is None or len(point) > len(best["mount"])):
            best = mount
    return (best["size_available"], best["mount"]) if best else (None, None)
