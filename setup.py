"""The optional compiled kernel (``simulacra.core._ckernel``); everything else is in pyproject.toml.

``pip install`` builds the C extension when a C compiler and the Python headers
are present and installs the pure-Python kernel otherwise: a failed build never
fails the install. Either way it prints one line saying which kernel it
installed (pip shows it with ``-v``; ``python -c "import simulacra.core as c;
print(c.KERNEL)"`` says it at any time). ``SIMULACRA_BUILD_KERNEL=0`` skips the
build.
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:
    from setuptools.errors import CCompilerError
except ImportError:  # setuptools < 59
    from distutils.errors import CCompilerError

KERNEL = Extension("simulacra.core._ckernel", ["src/simulacra/core/_ckernel.c"])


def _say(line: str) -> None:
    print(f"simulacra: {line}", file=sys.stderr, flush=True)


class OptionalBuildExt(build_ext):
    """build_ext that falls back to the pure-Python kernel instead of failing."""

    def run(self) -> None:
        """Build, or say why the pure-Python kernel is installed instead."""
        try:
            super().run()
        except Exception as exc:  # no compiler at all, and the like
            _say(f"kernel: pure Python, because the compiled one did not build ({exc})")

    def build_extension(self, ext: Extension) -> None:
        """Build the kernel extension; a compiler error is one line, not a failure."""
        try:
            super().build_extension(ext)
        except CCompilerError:  # its output is above
            _say("kernel: pure Python, because the C compiler failed on the compiled one (above)")
            return
        except Exception as exc:  # no compiler, a missing Python.h, ...
            text = str(exc).strip()
            first = text.splitlines()[0][:120] if text else type(exc).__name__
            _say(f"kernel: pure Python, because the compiled one did not build ({first})")
            return
        _say("kernel: compiled (simulacra.core._ckernel built)")


skip = os.environ.get("SIMULACRA_BUILD_KERNEL", "1") == "0"
if skip and {"bdist_wheel", "editable_wheel", "build", "build_ext", "install"} & {*sys.argv}:
    _say("kernel: pure Python, because SIMULACRA_BUILD_KERNEL=0")
setup(
    ext_modules=[] if skip else [KERNEL],
    cmdclass={"build_ext": OptionalBuildExt},
)
