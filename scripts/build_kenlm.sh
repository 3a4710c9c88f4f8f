#!/usr/bin/env bash
# Builds KenLM's lmplz and build_binary from the PyPI kenlm sdist into VENV/bin. Needs cmake,
# a C++ compiler, Boost and zlib (installed with apt-get when missing and we are root).
set -euo pipefail
venv=$1
version=0.2.0
if [[ -x "$venv/bin/lmplz" && -x "$venv/bin/build_binary" ]]; then
    exit 0
fi
if [[ ! -e /usr/include/boost/program_options.hpp || ! -e /usr/include/zlib.h ]]; then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            cmake g++ libboost-program-options-dev libboost-system-dev libboost-thread-dev \
            libboost-test-dev zlib1g-dev libbz2-dev liblzma-dev >/dev/null
    else
        echo "build_kenlm: need Boost and zlib headers (apt-get install" \
            "libboost-program-options-dev libboost-system-dev libboost-thread-dev zlib1g-dev)" >&2
        exit 1
    fi
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Fetch the sdist itself: `pip download` of it would build the whole package to read metadata.
"$venv/bin/python" - "$version" "$work" <<'PY'
import hashlib, re, sys, urllib.request
version, dest = sys.argv[1], sys.argv[2]
page = urllib.request.urlopen("https://pypi.org/simple/kenlm/", timeout=60).read().decode()
url, digest = re.search(rf'href="([^"#]*/kenlm-{re.escape(version)}\.tar\.gz)#sha256=([0-9a-f]+)"', page).groups()
data = urllib.request.urlopen(url, timeout=300).read()
if hashlib.sha256(data).hexdigest() != digest:
    sys.exit(f"build_kenlm: sha256 mismatch for {url}")
open(f"{dest}/kenlm-{version}.tar.gz", "wb").write(data)
PY
tar -xzf "$work"/kenlm-*.tar.gz -C "$work"
src=$(find "$work" -maxdepth 1 -type d -name 'kenlm-*' | head -n1)
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DKENLM_MAX_ORDER=6 >/dev/null
cmake --build "$work/build" --target lmplz build_binary -j "$(nproc)" >/dev/null
cp "$work/build/bin/lmplz" "$work/build/bin/build_binary" "$venv/bin/"
