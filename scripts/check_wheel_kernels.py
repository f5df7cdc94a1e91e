"""Check that a pygpukit-dsp wheel ships a compiled image of every kernel for every architecture.

    python scripts/check_wheel_kernels.py .wheels/pygpukit_dsp-*.whl

Reads pygpukit_dsp/_kernels/manifest.json in the wheel and checks, for every native/ops/kernels/*.cu
of this checkout, a CUBIN for each of sm_80, sm_86, sm_89, sm_90 and the compute_90 PTX, each file
present with the size and SHA-256 the manifest gives. Exit 1 with what is missing (the GPU machine
has no network: a wheel without its kernels would compile them there, at first use).
"""
from __future__ import annotations

import hashlib
import json
import sys
import zipfile
from pathlib import Path

ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "compute_90")
KERNELS = Path(__file__).resolve().parents[1] / "native" / "ops" / "kernels"


def check(wheel: str) -> list[str]:
    problems: list[str] = []
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        manifest_name = "pygpukit_dsp/_kernels/manifest.json"
        if manifest_name not in names:
            return [f"{wheel}: no {manifest_name}"]
        manifest = json.loads(z.read(manifest_name))
        if not manifest.get("images"):
            return [f"{wheel}: ships no kernel images ({manifest.get('reason', '')})"]
        images = {(i["kernel"], i["arch"]): i for i in manifest["images"]}
        for kernel in sorted(p.stem for p in KERNELS.glob("*.cu")):
            for arch in ARCHS:
                image = images.get((kernel, arch))
                if image is None:
                    problems.append(f"{kernel} {arch}: not in the manifest")
                    continue
                path = f"pygpukit_dsp/_kernels/{image['file']}"
                if path not in names:
                    problems.append(f"{kernel} {arch}: {path} missing")
                    continue
                data = z.read(path)
                if len(data) != image["bytes"] or hashlib.sha256(data).hexdigest() != image["sha256"]:
                    problems.append(f"{kernel} {arch}: {path} does not match the manifest")
    return problems


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    failed = False
    for wheel in argv:
        problems = check(wheel)
        if problems:
            failed = True
            print(f"{wheel}: {len(problems)} problem(s)", file=sys.stderr)
            for p in problems:
                print(f"  {p}", file=sys.stderr)
        else:
            with zipfile.ZipFile(wheel) as z:
                m = json.loads(z.read("pygpukit_dsp/_kernels/manifest.json"))
            print(f"{wheel}: {len(m['images'])} kernel images (NVRTC {m['nvrtc']}: {' '.join(m['archs'])} "
                  f"+ PTX {' '.join(m['ptx'])})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
