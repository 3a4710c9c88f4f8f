#!/usr/bin/env bash
# Installs mtcore on a GPU machine without a package index, from the folder that
# scripts/gpu_wheels.sh filled (default .whl/), into the interpreter that holds CUDA torch
# ($PYTHON, default python3): the wheels, fairseq's two Cython modules compiled for that
# interpreter, then mtcore itself (docs/scale.md, "Training on GPUs"). Idempotent.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
wheels=$(cd "${1:-$root/.whl}" && pwd)
python=${PYTHON:-python3}
pip=("$python" -m pip install --disable-pip-version-check --no-input -q --no-index --no-deps)
"${pip[@]}" --no-compile "$wheels"/*.whl
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
cp "$wheels"/fairseq_cython/*.pyx "$build/"
site=$("$python" -c "import fairseq, os; print(os.path.dirname(os.path.dirname(fairseq.__file__)))")
# As fairseq's setup.py builds them (C++, numpy's headers), placed inside the installed package.
(cd "$build" && "$python" - "$site" <<'PY'
import sys

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

modules = [
    Extension(
        f"fairseq.data.{name}",
        [f"{name}.pyx"],
        language="c++",
        include_dirs=[numpy.get_include()],
        extra_compile_args=["-std=c++11", "-O3"],
    )
    for name in ("data_utils_fast", "token_block_utils_fast")
]
setup(
    name="fairseq-cython",
    ext_modules=cythonize(modules, language_level=3, quiet=True),
    script_args=["-q", "build_ext", "--build-lib", sys.argv[1], "--parallel", "2"],
)
PY
)
"${pip[@]}" --no-build-isolation --ignore-requires-python "$root"
"$python" -c "import fairseq.data.data_utils_fast, mtcore_plugins, pydantic; print('mtcore installed')"
