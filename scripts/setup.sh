#!/usr/bin/env bash
# Installs everything mtcore needs into .venv/ at the repository root. Idempotent: a second call
# finds the stamp matching the current requirements and installs nothing.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv"
stamp="$venv/.mtcore-setup"
want=$(cat "$root/scripts/setup.sh" "$root/scripts/build_kenlm.sh" "$root"/requirements/*.txt \
    "$root/pyproject.toml" | sha256sum | cut -d' ' -f1)
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    exit 0
fi
echo "mtcore setup: installing into $venv" >&2
python=${MTCORE_PYTHON:-python3.11}
[[ -x "$venv/bin/python" ]] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q)
"${pip[@]}" pip==25.1.1 setuptools==80.9.0 wheel==0.45.1
# torch first and alone with its pinned version: pip then takes the local CPU wheel instead of
# pulling a multi-GB CUDA build as a dependency of something else.
"${pip[@]}" torch==2.13.0 numpy==2.2.6 cython==3.1.2
# fairseq-fixed builds its Cython extensions against the torch and numpy above. --no-deps keeps
# out torchaudio (a CUDA build that breaks transformers); its real requirements are in base.txt.
"${pip[@]}" --no-build-isolation --no-deps fairseq-fixed==0.12.3.1
"${pip[@]}" -r "$root/requirements/base.txt" -r "$root/requirements/dev.txt"
# unbabel-comet's declared numpy<2 / protobuf<5 pins would downgrade the stack above; its real
# requirements are listed in requirements/comet.txt and installed as they are.
"${pip[@]}" --no-deps -r "$root/requirements/comet.txt"
"$venv/bin/python" -m pip uninstall -y -q torchaudio 2>/dev/null || true
# fastText's trainer, for the tests that train a small language-ID model: beside the venv, not
# in it, since its module (fasttext) would shadow fasttext-predict's, which the filters load.
"${pip[@]}" --no-deps --upgrade --target "$venv/fasttext-train" fasttext-numpy2-wheel==0.9.2
bash "$root/scripts/build_kenlm.sh" "$venv"
# The Debian packages the tests use (Chromium, a one-node Slurm), installed before anything
# runs: NT5's default corpus is the system's gettext catalogs, and these packages bring their
# own (GTK, AT-SPI, man-db among them), so `make nt5` run before `make test` trained on other
# data than after it.
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    bash "$root/scripts/chromium_local.sh" install
    bash "$root/scripts/slurm_local.sh" install
fi
"${pip[@]}" --no-deps --no-build-isolation -e "$root"
echo "$want" > "$stamp"
echo "mtcore setup: done" >&2
