"""Ascend release versions (driver 25.5.2, 24.1.rc2.2; firmware 7.8.0.7.220) in release order."""
import re


def version_key(version):
    """Order Ascend versions: numbers numerically, an rc before the release it leads to (25.5.rc1 < 25.5.0)."""
    key = []
    for token in str(version).lower().split("."):
        rc = re.match(r"^rc(\d+)$", token)
        if token.isdigit():
            key.append((1, int(token), ""))
        elif rc:
            key.append((0, int(rc.group(1)), ""))
        else:
            key.append((-1, 0, token))
    return key
