"""pip install ./python — builds _tokfeed with CMake (the whole tree's
configure step: the client needs proto/ and shm/), then installs the package.

The build needs what the C++ build needs (Debian: cmake, pybind11-dev,
libboost-dev, msgpack-cxx, ...). Set TOKFEED_CMAKE_ARGS for extra -D options.
"""
import os
import shlex
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        os.makedirs(build, exist_ok=True)
        args = [f"-DPython3_EXECUTABLE={sys.executable}", "-DTOKFEED_BUILD_TESTS=OFF", "-DTOKFEED_BUILD_BENCH=OFF",
                "-DCMAKE_BUILD_TYPE=Release"] + shlex.split(os.environ.get("TOKFEED_CMAKE_ARGS", ""))
        subprocess.check_call(["cmake", "-S", ROOT, "-B", build] + args)
        subprocess.check_call(["cmake", "--build", build, "--target", "_tokfeed", "-j", os.environ.get("JOBS", "2")])
        out_dir = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        os.makedirs(out_dir, exist_ok=True)
        built = os.path.join(build, "python", "tokfeed")
        for f in os.listdir(built):
            if f.startswith("_tokfeed") and f.endswith(".so"):
                self.copy_file(os.path.join(built, f), self.get_ext_fullpath(ext.name))


setup(
    name="tokfeed",
    version="0.1.0",
    description="Client for the tokfeed data-loader daemon: batches as zero-copy torch tensors",
    packages=["tokfeed"],
    ext_modules=[CMakeExtension("tokfeed._tokfeed")],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    zip_safe=False,
)
