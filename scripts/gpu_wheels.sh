#!/usr/bin/env bash
# Gathers, on a machine with PyPI, what mtcore needs on a GPU machine that has no package index
# and whose image already holds CUDA torch, numpy, numba, Cython, sentencepiece, sacrebleu,
# regex, PyYAML, click, tqdm, pluggy and scikit-learn (the device image of docs/scale.md,
# "Training on GPUs"): wheels for the target's Python into DIR (default .whl/), and fairseq as
# a pure-Python wheel plus the sources of its two Cython modules, which scripts/gpu_install.sh
# compiles there (fairseq has no wheel for any Python; its C++ extensions, libnat and libbase,
# serve models mtcore does not train). Needs this checkout's .venv (scripts/setup.sh) for the
# fairseq build. Usage: bash scripts/gpu_wheels.sh [DIR] (MTCORE_GPU_PYTHON=3.12 by default).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$(mkdir -p "${1:-$root/.whl}" && cd "${1:-$root/.whl}" && pwd)
version=${MTCORE_GPU_PYTHON:-3.12}
pip=("$root/.venv/bin/python" -m pip)
quiet=(--disable-pip-version-check --no-input -q)
platforms=()
for tag in manylinux_2_28 manylinux_2_27 manylinux_2_17 manylinux2014 manylinux1; do
    platforms+=(--platform "${tag}_x86_64")
done
# The versions requirements/base.txt pins, or the ones pydantic's pin needs.
"${pip[@]}" download "${quiet[@]}" --no-deps --only-binary=:all: --python-version "$version" \
    --implementation cp "${platforms[@]}" -d "$out" \
    pydantic==2.11.7 pydantic-core==2.33.2 annotated-types==0.7.0 typing-inspection==0.4.1 \
    hydra-core==1.3.2 omegaconf==2.3.0 bitarray==3.4.2
"${pip[@]}" wheel "${quiet[@]}" --no-deps -w "$out" antlr4-python3-runtime==4.9.3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"${pip[@]}" download "${quiet[@]}" --no-deps --no-build-isolation --no-binary :all: \
    -d "$work" fairseq-fixed==0.12.3.1
tar xzf "$work"/fairseq_fixed-0.12.3.1.tar.gz -C "$work"
# READTHEDOCS is fairseq's own switch for a build without extensions.
READTHEDOCS=1 "${pip[@]}" wheel "${quiet[@]}" --no-deps --no-build-isolation -w "$out" \
    "$work/fairseq_fixed-0.12.3.1"
mkdir -p "$out/fairseq_cython"
cp "$work"/fairseq_fixed-0.12.3.1/fairseq/data/{data_utils_fast,token_block_utils_fast}.pyx \
    "$out/fairseq_cython/"
du -sh "$out"
