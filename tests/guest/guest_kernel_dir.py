# SPDX-License-Identifier: Apache-2.0
"""Finds the guest kernel that tools/build-guest-kernel.sh built."""

import os
import pathlib

BUILD_HINT = "run tools/build-guest-kernel.sh"


def cache_dir() -> pathlib.Path:
    base = os.environ.get("DSEC_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "dsec-vmm")
    return pathlib.Path(base) / "guest-kernel"


def find_kernel_dir() -> pathlib.Path:
    """The directory with vmlinux, bzImage and .config.

    DSEC_GUEST_KERNEL_DIR wins; otherwise the `current` symlink of the cache.
    Raises FileNotFoundError naming the build command when there is none.
    """
    explicit = os.environ.get("DSEC_GUEST_KERNEL_DIR")
    candidate = pathlib.Path(explicit) if explicit else cache_dir() / "current"
    for name in ("vmlinux", "bzImage", ".config"):
        if not (candidate / name).is_file():
            raise FileNotFoundError(
                f"no guest kernel at {candidate} ({name} missing): {BUILD_HINT}")
    return candidate.resolve()
