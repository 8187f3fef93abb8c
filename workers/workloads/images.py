"""``images``: the small conv net of ``cnn`` trained on compressed image files read from disk.

The one built-in whose samples cost what real ones do: each ``__getitem__`` opens a file,
reads it and decodes it (PNG through ``zlib``, or ``xz``: :mod:`workers.workloads.codec`), so
the harness's loader knobs (worker processes, prefetch, the RAM cache) matter as they do for an
image folder. The dataset is written once from the seed, under ``root`` (default: a private
folder of this user in the system's temporary directory, or ``$ORCH_DATASETS``), into a folder
named by everything that defines it; a complete folder is reused, a partial one never is
(written beside, renamed into place). Images are a class's smooth template plus noise, so the
task is learnable. Samples are ``uint8`` images and labels; the loss scales them to [-1, 1] on
the device (a quarter of the bytes to load, cache and copy).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import uuid
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F
from torch.utils.data import Dataset

from workers.workloads.base import Batch, Workload, WorkloadError, require_positive, take_args
from workers.workloads.cnn import ConvNet
from workers.workloads.codec import CODECS, decode, encode
from workers.workloads.data import dataset_generator, sample_generator

DEFAULTS: dict[str, Any] = {
    "images": 1024,
    "image_size": 64,
    "classes": 10,
    "channels": 16,
    "n_layer": 2,
    "codec": "png",
    "root": "",
}
MAX_IMAGES = 1_000_000
_DONE = "COMPLETE"


class CompressedImages(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Image files ``000000.<codec>`` ... in ``folder`` and their labels (``labels.bin``).

    Picklable (a folder, a count and the labels), so loader workers started by ``spawn`` as
    well as by ``fork`` read it.
    """

    def __init__(self, folder: Path, count: int, codec: str) -> None:
        self.folder = folder
        self.count = count
        self.codec = codec
        self.labels = torch.frombuffer(
            bytearray((folder / "labels.bin").read_bytes()), dtype=torch.uint8
        )
        if len(self.labels) != count:
            raise WorkloadError(f"workload 'images': {folder} holds {len(self.labels)} labels")

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image = decode((self.folder / f"{index:06d}.{self.codec}").read_bytes())
        return image, self.labels[index].long()


def default_root() -> Path:
    """``$ORCH_DATASETS``, else ``orch-datasets-<uid>`` in the system's temporary directory."""
    env = os.environ.get("ORCH_DATASETS")
    if env:
        return Path(env)
    return Path(tempfile.gettempdir()) / f"orch-datasets-{os.getuid()}"


def _private_root(root: Path) -> Path:
    """``root``, created 0700; refused when another user owns it or others may write in it (a
    planted dataset would be trained on)."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = root.stat()
    if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise WorkloadError(
            f"workload 'images': {root} must be a folder of this user that others cannot "
            "write to (set args.root or $ORCH_DATASETS)"
        )
    return root


def _image(seed: int, index: int, templates: torch.Tensor) -> tuple[torch.Tensor, int]:
    gen = sample_generator(seed, index)
    label = int(torch.randint(len(templates), (), generator=gen))
    noise = torch.randn(templates.shape[1:], generator=gen) * 24
    return (templates[label] + noise).clamp(0, 255).to(torch.uint8), label


def write_dataset(folder: Path, seed: int, a: dict[str, Any]) -> None:
    """Write the dataset of ``seed`` and arguments ``a`` into ``folder`` unless it is there:
    into a folder beside, then renamed into place (a concurrent writer's copy, identical,
    wins the rename and ours is removed)."""
    if (folder / _DONE).exists():
        return
    size, classes = a["image_size"], a["classes"]
    # a class template: a random 4x4 grid of colours, upsampled smoothly (compressible, as
    # photographs are; pure noise would be stored uncompressed)
    coarse = torch.rand(classes, 3, 4, 4, generator=dataset_generator(seed)) * 200 + 28
    templates = F.interpolate(coarse, size=(size, size), mode="bilinear", align_corners=False)
    work = folder.parent / f".{folder.name}.{uuid.uuid4().hex}"
    work.mkdir(mode=0o700)
    try:
        labels = bytearray()
        for i in range(a["images"]):
            image, label = _image(seed, i, templates)
            (work / f"{i:06d}.{a['codec']}").write_bytes(encode(image, a["codec"]))
            labels.append(label)
        (work / "labels.bin").write_bytes(bytes(labels))
        (work / _DONE).write_text("")
        try:
            work.rename(folder)
        except OSError:  # another writer finished first: its copy is the same data
            if not (folder / _DONE).exists():
                raise
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


def image_loss(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    """Mean cross-entropy, the ``uint8`` images scaled to [-1, 1] where they are (the device)."""
    x, y = batch
    return F.cross_entropy(model(x.float().div_(127.5).sub_(1.0)), y)


def build(args: dict[str, Any], seed: int) -> Workload:
    """Build the ``images`` workload (arguments: images, image_size, classes, channels,
    n_layer, codec ``png`` or ``xz``, root)."""
    a = take_args("images", args, DEFAULTS)
    require_positive("images", a, ["images", "image_size", "classes", "channels", "n_layer"])
    if a["codec"] not in CODECS:
        raise WorkloadError(
            f"workload 'images': argument 'codec' must be one of {', '.join(CODECS)}, "
            f"got {a['codec']!r}"
        )
    if a["images"] > MAX_IMAGES or a["classes"] > 255 or a["image_size"] > 1024:
        raise WorkloadError(
            f"workload 'images': at most {MAX_IMAGES} images, 255 classes, image_size 1024"
        )
    if a["image_size"] % 2 ** a["n_layer"]:
        raise WorkloadError(
            f"workload 'images': image_size {a['image_size']} must be divisible by "
            f"2**n_layer ({2 ** a['n_layer']})"
        )
    root = _private_root(Path(a["root"]) if a["root"] else default_root())
    name = f"images-{a['codec']}-n{a['images']}-s{a['image_size']}-c{a['classes']}-seed{seed}"
    write_dataset(root / name, seed, a)
    model = ConvNet(a["channels"], a["n_layer"], a["classes"], a["image_size"])
    return Workload(
        model=model,
        loss=image_loss,
        dataset=CompressedImages(root / name, a["images"], a["codec"]),
        blocks=list(model.blocks),
    )
