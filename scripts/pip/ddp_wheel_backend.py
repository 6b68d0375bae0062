"""ddplaunch's PEP 517 build backend (pyproject.toml): meson-python, whose
wheel wheel_bundle.py then lays out for any prefix and, by default, fills with
the shared libraries a fresh machine lacks (a manylinux wheel).

One setting of its own, taken out before meson-python sees the rest:
  -Cbundle-libs=false   keep the system's shared libraries (the RUNPATHs are
                        still set): a wheel for this machine only, smaller.
Every other -C setting is meson-python's (-Csetup-args=-Dcuda=disabled, ...).
No editable installs: the programs are compiled files in the venv's bin/.
"""
import os

import mesonpy
# The hooks meson-python answers as it is; build_wheel below wraps its own.
from mesonpy import build_sdist, get_requires_for_build_sdist, get_requires_for_build_wheel

import wheel_bundle

__all__ = ["build_sdist", "build_wheel", "get_requires_for_build_sdist",
           "get_requires_for_build_wheel"]

SETTING = "bundle-libs"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    settings = dict(config_settings or {})
    value = str(settings.pop(SETTING, "true")).lower()
    if value not in ("true", "false", "1", "0", "yes", "no"):
        raise ValueError("%s=%s: use true or false" % (SETTING, value))
    name = mesonpy.build_wheel(wheel_directory, settings or None, metadata_directory)
    try:
        return wheel_bundle.repair(os.path.join(wheel_directory, name), wheel_directory,
                                   bundle=value in ("true", "1", "yes"))
    except wheel_bundle.BundleError as e:
        raise SystemExit("ddplaunch wheel: %s" % e) from None
