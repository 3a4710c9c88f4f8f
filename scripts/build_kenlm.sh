#!/usr/bin/env bash
# Builds KenLM's lmplz and build_binary from the PyPI kenlm sdist into VENV/bin, and its Python
# module (`import kenlm`) into VENV's site-packages. Needs cmake, a C++ compiler, Boost and zlib
# (installed with apt-get when missing and we are root).
#
# The module is the sdist's pre-generated Cython output (python/kenlm.cpp) linked against the
# static libraries of the same parallel cmake build: `pip install kenlm` would compile every
# source again, single-threaded (15+ minutes on two cores).
set -euo pipefail
venv=$(cd "$1" && pwd)
version=0.2.0
max_order=6
python="$venv/bin/python"
if [[ -x "$venv/bin/lmplz" && -x "$venv/bin/build_binary" ]] \
    && "$python" -c "import kenlm" 2>/dev/null; then
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
"$python" - "$version" "$work" <<'PY'
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
build="$work/build"
# PIC everywhere so that the static kenlm/kenlm_util libraries link into the shared module.
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKENLM_MAX_ORDER=$max_order \
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_CXX_FLAGS=-w >/dev/null
cmake --build "$build" --target lmplz build_binary kenlm kenlm_util -j "$(nproc)" >/dev/null
cp "$build/bin/lmplz" "$build/bin/build_binary" "$venv/bin/"

# The compression libraries cmake found are the ones kenlm_util was compiled to use.
libs=()
for prefix in ZLIB BZIP2 LIBLZMA; do
    # <PREFIX>_LIBRARY_RELEASE in current cmake, <PREFIX>_LIBRARY in older ones.
    value=$(sed -n -E "s/^${prefix}_LIBRARY(_RELEASE)?:[A-Z]*=//p" "$build/CMakeCache.txt" \
        | grep -v NOTFOUND | head -n1 || true)
    if [[ -n "$value" ]]; then
        libs+=("$value")
    fi
done
read -r include suffix site < <("$python" -c \
    "import sysconfig as s; p = s.get_paths(); \
print(p['include'], s.get_config_var('EXT_SUFFIX'), p['platlib'])")
module="$work/kenlm$suffix"
# kenlm.cpp and score_sentence.cc compile in parallel; -w: Cython's generated code is noisy.
g++ -O3 -DNDEBUG -DKENLM_MAX_ORDER=$max_order -std=c++11 -fPIC -w -I"$src" -I"$include" \
    -c "$src/python/kenlm.cpp" -o "$work/kenlm.o" &
g++ -O3 -DNDEBUG -DKENLM_MAX_ORDER=$max_order -std=c++11 -fPIC -w -I"$src" \
    -c "$src/python/score_sentence.cc" -o "$work/score_sentence.o"
wait $!
g++ -shared -o "$module" "$work/kenlm.o" "$work/score_sentence.o" \
    "$build/lib/libkenlm.a" "$build/lib/libkenlm_util.a" "${libs[@]}" -lpthread -lrt
# Import it from the build directory before installing it.
if ! (cd "$work" && "$python" -c "import kenlm"); then
    echo "build_kenlm: the kenlm module was built but does not import" >&2
    exit 1
fi
install -m 0755 "$module" "$site/"
# Minimal metadata so that pip sees kenlm as installed (pip list, pip uninstall).
dist="$site/kenlm-$version.dist-info"
mkdir -p "$dist"
printf 'Metadata-Version: 2.1\nName: kenlm\nVersion: %s\n' "$version" >"$dist/METADATA"
echo "build_kenlm.sh" >"$dist/INSTALLER"
printf 'kenlm%s,,\nkenlm-%s.dist-info/METADATA,,\nkenlm-%s.dist-info/INSTALLER,,\nkenlm-%s.dist-info/RECORD,,\n' \
    "$suffix" "$version" "$version" "$version" >"$dist/RECORD"
