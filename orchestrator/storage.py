"""Where job checkpoints live: a local (or shared) path, or an fsspec URL such as ``s3://b/p``.

The control plane only names locations (one folder per job, handed to the workers as a string)
and deletes a job's folder when retention removes the job; the workers read and write them
(:mod:`workers.checkpoint`). fsspec is imported only to delete a URL's folder.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

__all__ = ["StorageLocation"]


@dataclass(frozen=True)
class StorageLocation:
    """A folder in local or remote storage, joined with ``/`` like a :class:`~pathlib.Path`.

    Attributes:
        uri: an absolute local path, or a URL with a scheme (``s3://bucket/prefix``).
    """

    uri: str

    @property
    def is_url(self) -> bool:
        """Whether this is a URL (an fsspec filesystem) rather than a local path."""
        return "://" in self.uri

    def __truediv__(self, name: str) -> StorageLocation:
        if self.is_url:
            return StorageLocation(f"{self.uri.rstrip('/')}/{name}")
        return StorageLocation(str(Path(self.uri) / name))

    def __str__(self) -> str:
        return self.uri

    def remove(self) -> bool:
        """Delete this folder and everything in it; whether it existed."""
        if not self.is_url:
            path = Path(self.uri)
            if not path.exists():
                return False
            shutil.rmtree(path)
            return True
        import fsspec

        fs, root = fsspec.core.url_to_fs(self.uri)
        if not fs.exists(root):
            return False
        fs.rm(root, recursive=True)
        return True
