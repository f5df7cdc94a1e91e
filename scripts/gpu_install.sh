# Source this first on the GPU machine (from the repository root), after scripts/build_wheels.sh
# has filled .wheels/ on the build machine:
#     source scripts/gpu_install.sh
# Installs every wheel in .wheels/ into /tmp/site without touching the machine's Python, puts
# /tmp/site on PYTHONPATH, and links the built native module into the source tree so that
# `python -m pytest` (which puts the checkout first on sys.path) finds it too.
# GK_PYTHON picks the interpreter (default: python3).

_gk_python="${GK_PYTHON:-python3}"
_gk_site=/tmp/site

if ! ls .wheels/*.whl >/dev/null 2>&1; then
    echo "gpu_install: no wheels in $(pwd)/.wheels; run scripts/build_wheels.sh first" >&2
    return 1 2>/dev/null || exit 1
fi

"$_gk_python" -m pip install -q --no-index --no-deps --no-compile --upgrade \
    --target "$_gk_site" .wheels/*.whl || { return 1 2>/dev/null || exit 1; }
export PYTHONPATH="$_gk_site${PYTHONPATH:+:$PYTHONPATH}"

for _gk_so in "$_gk_site"/pygpukit_dsp/_native.*.so; do
    [ -e "$_gk_so" ] && ln -sf "$_gk_so" pygpukit_dsp/
done
unset _gk_so _gk_site _gk_python

# The JACK server and PortAudio bundled by scripts/jack_bundle.sh (carried as .jack): the live
# audio tests meet a real audio server on the CUDA backend too.
if [ -d .jack/bin ]; then
    _gk_jack="$(pwd)/.jack"
    for _gk_lib in "$_gk_jack"/lib/fallback/*; do  # only what this machine lacks
        ldconfig -p | grep -q "$(basename "$_gk_lib")" || cp "$_gk_lib" "$_gk_jack/lib/"
    done
    export PATH="$_gk_jack/bin:$PATH" JACK_DRIVER_DIR="$_gk_jack/lib/jack"
    export LD_LIBRARY_PATH="$_gk_jack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LIBRARY_PATH="$_gk_jack/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"  # ctypes.util.find_library('portaudio')
    # no ALSA configuration there: PortAudio would abort in Pa_Initialize (sounddevice's import)
    [ -e /usr/share/alsa/alsa.conf ] || export ALSA_CONFIG_DIR="$_gk_jack/share/alsa"
    unset _gk_jack _gk_lib
fi
