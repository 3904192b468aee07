"""Build the zip that ``spark-submit --py-files`` ships to the executors.

    python -m pipeline.package [OUT.zip]      # default dist/snekbed-pipeline.zip

The zip holds the ``pipeline`` package and the shared leaf it imports, ``contract``
(the run-dataset contract; pure Python: its other dependencies, pydantic, networkx
and matplotlib, are used on the driver only). Executors only need pyspark itself.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

__all__ = ["PACKAGES", "build_zip"]

#: The packages the zip holds: the pipeline and the shared leaf it imports.
PACKAGES = ("contract", "pipeline")


def build_zip(out: str | Path = "dist/snekbed-pipeline.zip") -> Path:
    """Write the zip of the ``PACKAGES`` (their ``.py`` files) to ``out``; return its path."""
    repo = Path(__file__).resolve().parent.parent
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for package in PACKAGES:
            for path in sorted((repo / package).rglob("*.py")):
                zf.write(path, str(path.relative_to(repo)))
    return out


if __name__ == "__main__":
    print(build_zip(*sys.argv[1:2]))
