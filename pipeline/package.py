"""Build the zip that ``spark-submit --py-files`` ships to the executors.

    python -m pipeline.package [OUT.zip]      # default dist/snekbed-pipeline.zip

The zip holds the ``pipeline`` package (pure Python; its other dependencies,
pydantic, networkx and matplotlib, are used on the driver only). Executors only
need pyspark itself.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

__all__ = ["build_zip"]


def build_zip(out: str | Path = "dist/snekbed-pipeline.zip") -> Path:
    """Write the zip of the ``pipeline`` package to ``out``; return its path."""
    root = Path(__file__).resolve().parent
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(root.rglob("*.py")):
            zf.write(path, str(Path("pipeline") / path.relative_to(root)))
    return out


if __name__ == "__main__":
    print(build_zip(*sys.argv[1:2]))
