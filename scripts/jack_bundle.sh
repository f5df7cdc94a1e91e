#!/usr/bin/env bash
# Bundles, into .jack/ (git-ignored), a JACK server with its dummy backend and PortAudio for the GPU
# machine, which has neither and no network: the live audio tests run there against a real audio
# server on the CUDA backend. Copies this machine's jackd, jack_lsp, their driver plugins and every
# shared library they need beyond glibc/libstdc++ (Debian 12 builds; the GPU machine's newer glibc
# runs them). On the GPU machine scripts/gpu_install.sh puts them on the search paths.
#   apt-get install jackd2 libportaudio2 && scripts/jack_bundle.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/.jack"
LIBDIR=/usr/lib/x86_64-linux-gnu
for f in /usr/bin/jackd /usr/bin/jack_lsp "$LIBDIR/jack/jack_dummy.so" "$LIBDIR/libportaudio.so.2"; do
    [[ -e "$f" ]] || { echo "error: $f not found (apt-get install jackd2 libportaudio2)" >&2; exit 1; }
done
rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib/jack" "$OUT/lib/fallback"
cp /usr/bin/jackd /usr/bin/jack_lsp "$OUT/bin/"
cp "$LIBDIR/jack/jack_dummy.so" "$OUT/lib/jack/"
skip='^(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux-x86-64|linux-vdso)\.'
# JACK's and PortAudio's own libraries go first on the search path; common system libraries only
# where the GPU machine lacks them (gpu_install.sh), so they never shadow its newer copies.
own='^(libjack|libjackserver|libportaudio|libasound|libopus|libdb-)'
for f in /usr/bin/jackd /usr/bin/jack_lsp "$LIBDIR/jack/jack_dummy.so" "$LIBDIR/libportaudio.so.2" \
         "$LIBDIR/libjack.so.0"; do
    ldd "$f" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
    name=$(basename "$lib")
    if [[ "$name" =~ $skip ]]; then continue; fi
    if [[ "$name" =~ $own ]]; then cp -L "$lib" "$OUT/lib/$name"; else cp -L "$lib" "$OUT/lib/fallback/$name"; fi
done
cp -L "$LIBDIR/libportaudio.so.2" "$LIBDIR/libjack.so.0" "$OUT/lib/"
ln -sf libportaudio.so.2 "$OUT/lib/libportaudio.so"
# unversioned names: ctypes.util.find_library (JACK-Client, sounddevice) links with -ljack/-lportaudio
ln -sf libjack.so.0 "$OUT/lib/libjack.so"
# ALSA's configuration: without alsa.conf PortAudio's ALSA host API asserts at Pa_Initialize
# (BuildDeviceList) and takes the process down; gpu_install.sh points ALSA_CONFIG_DIR here.
mkdir -p "$OUT/share/alsa"
cp -r /usr/share/alsa/alsa.conf /usr/share/alsa/cards /usr/share/alsa/pcm "$OUT/share/alsa/"
echo "== $(du -sh "$OUT" | cut -f1) in $OUT:"
ls "$OUT/lib" "$OUT/lib/fallback"
