"""Builds kvstore._kvstore with the project's CMake build, for the interpreter running pip.

    pip install . --no-build-isolation

The CMake tree is build-pip/<python tag> (RelWithDebInfo, the project's default
and tested build type; no tests or benchmarks; ccache when installed). KVSTORE_CMAKE_BUILD_DIR=<dir> reuses an already configured tree
instead (the ctest of this file does), which must have been configured for the
same interpreter.
"""

import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("KVSTORE_CMAKE_BUILD_DIR")
        if not build_dir:
            tag = sys.implementation.cache_tag  # e.g. cpython-311
            build_dir = os.path.join(ROOT, "build-pip", tag)
            if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
                self._configure(build_dir)
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "_kvstore",
                               "--parallel", str(os.cpu_count() or 1)])
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        built = os.path.join(build_dir, "python", "kvstore", "_kvstore" + suffix)
        if not os.path.exists(built):
            raise RuntimeError(f"{built} was not built: is {build_dir} configured for {sys.executable}?")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)
        if shutil.which("strip"):  # the debug info of RelWithDebInfo is most of the file
            # -S: --strip-debug in GNU strip, and what macOS's strip understands
            subprocess.check_call(["strip", "-S", target])

    @staticmethod
    def _configure(build_dir):
        args = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                "-DKVSTORE_PYTHON=ON", "-DKVSTORE_BUILD_TESTS=OFF", "-DKVSTORE_BUILD_BENCH=OFF",
                f"-DPython3_EXECUTABLE={sys.executable}"]
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        if shutil.which("ccache"):
            args += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
        subprocess.check_call(args)


setup(
    ext_modules=[Extension("kvstore._kvstore", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": os.path.join("build-pip", "setuptools")}},
)
