#!/usr/bin/env bash
# Builds, into .wheels/ (git-ignored), everything the GPU machine needs to run pygpukit-dsp
# that it does not already have (it has numpy, scipy, pyyaml, pytest, cupy, torch, matplotlib):
#   1. pygpukit-dsp      cp312 wheel (scikit-build-core; no CUDA toolkit needed), with every kernel
#                        compiled in (NVRTC 13.0 from the nvidia-cuda-nvrtc wheel, a build
#                        requirement; checked by scripts/check_wheel_kernels.py: the GPU machine has
#                        no network and should compile nothing at first use)
#   2. pygpukit-dsp-core abi3 wheel of rust/pygpukit-python (maturin), when that crate exists
#   3. runtime dependencies as cp312 / py3 manylinux wheels: pydantic, pydantic-core,
#      annotated-types, typing-inspection, typing-extensions, soundfile, cffi, pycparser; and for the
#      tests: sounddevice and JACK-Client (the live audio tests; scripts/jack_bundle.sh brings the
#      JACK server and PortAudio into .jack/), hypothesis, sortedcontainers; the 'net' and 'sigmf'
#      extras (also in the test extra): pyzmq (its wheel bundles libzmq), sigmf and what sigmf needs:
#      jsonschema, jsonschema-specifications, referencing, rpds-py, defusedxml, attrs (typing-extensions
#      and numpy are already there)
# Then on the GPU machine: `source scripts/gpu_install.sh`.
#
# Usage: scripts/build_wheels.sh            (PYTHON312=/path/to/python3.12 to override)
#        BEFORE_REF=main scripts/build_wheels.sh   also builds that commit's pygpukit-dsp wheel into
#        .wheels-before/ (carry it too): gpu_run.sh's first-block section measures it as "before"
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/.wheels"
PY312="${PYTHON312:-$HOME/.pyenv/versions/3.12.1/bin/python3.12}"
# (attrs is no longer listed: hypothesis stopped depending on it, so pip resolves no attrs wheel)
DEPS=(pydantic pydantic_core annotated_types typing_inspection typing_extensions soundfile cffi pycparser
      sounddevice JACK_Client hypothesis attrs sortedcontainers
      pyzmq sigmf jsonschema jsonschema_specifications referencing rpds_py defusedxml
      aiohttp aiohappyeyeballs aiosignal frozenlist multidict propcache yarl idna)

if [[ ! -x "$PY312" ]]; then
    echo "error: Python 3.12 not found at $PY312 (set PYTHON312=...)" >&2
    exit 1
fi
mkdir -p "$OUT"
rm -f "$OUT"/*.whl
start=$(date +%s)

echo "== pygpukit-dsp (cp312)"
"$PY312" -m pip wheel --no-deps --wheel-dir "$OUT" "$ROOT"
"$PY312" "$ROOT/scripts/check_wheel_kernels.py" "$OUT"/pygpukit_dsp-*.whl

if [[ -n "${BEFORE_REF:-}" ]]; then
    echo "== pygpukit-dsp at $BEFORE_REF (cp312, into .wheels-before/)"
    before_src="$(mktemp -d)"
    git -C "$ROOT" archive "$BEFORE_REF" | tar -x -C "$before_src"
    mkdir -p "$ROOT/.wheels-before"
    rm -f "$ROOT/.wheels-before"/*.whl
    "$PY312" -m pip wheel --no-deps --wheel-dir "$ROOT/.wheels-before" "$before_src"
    rm -rf "$before_src"
fi

CRATE="$ROOT/rust/pygpukit-python"
if [[ -f "$CRATE/pyproject.toml" || -f "$CRATE/Cargo.toml" ]]; then
    echo "== pygpukit-dsp-core (abi3, maturin)"
    MATURIN="$(command -v maturin || true)"
    if [[ -z "$MATURIN" && -x "$ROOT/.venv/bin/maturin" ]]; then MATURIN="$ROOT/.venv/bin/maturin"; fi
    if [[ -z "$MATURIN" ]]; then
        echo "error: maturin not found (pip install maturin)" >&2
        exit 1
    fi
    # Plain linux_x86_64 tag: built on glibc 2.36, installed by file name on Ubuntu 24.04.
    manifest="$CRATE/Cargo.toml"
    "$MATURIN" build --release --manifest-path "$manifest" --interpreter "$PY312" \
        --compatibility linux --out "$OUT"
else
    echo "== pygpukit-dsp-core: skipped (rust/pygpukit-python does not exist yet)"
fi

echo "== runtime dependencies (cp312 / py3, manylinux)"
resolved="$(mktemp -d)"
trap 'rm -rf "$resolved"' EXIT
# Resolved together (with dependencies) so pydantic gets the exact pydantic-core it pins; only
# the packages the GPU machine lacks are kept (numpy, which soundfile pulls in, is not).
"$PY312" -m pip download --quiet --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --dest "$resolved" pydantic soundfile sounddevice JACK-Client hypothesis \
    pyzmq sigmf aiohttp
shopt -s nocaseglob  # wheel names are normalised to lower case by newer tools (jack_client-0.5.7-...)
for name in "${DEPS[@]}"; do
    # wheel file names are normalised differently by different releases (JACK_Client, jack_client)
    found=($(find "$resolved" -maxdepth 1 -iname "${name}-*.whl"))
    if [[ ${#found[@]} -eq 0 ]]; then
        echo "error: no wheel for $name was resolved" >&2
        exit 1
    fi
    cp "${found[@]}" "$OUT/"
done

echo "== done in $(( $(date +%s) - start )) s:"
ls -1 "$OUT"
