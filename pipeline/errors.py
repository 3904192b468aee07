"""Errors raised by the pipeline. One base class; each subclass names what and where."""

from __future__ import annotations

__all__ = ["PipelineError", "RunDatasetError", "JobInputError", "SparkSetupError"]


class PipelineError(Exception):
    """Base: the pipeline could not do what was asked."""


class RunDatasetError(PipelineError):
    """A run directory does not meet the run-dataset contract (docs/run-dataset.md).

    Per-line problems in the JSON-lines files never raise: those lines go to
    the quarantine table. This is for the run as a whole (missing meta.json,
    an invalid topology.json, a path that is not a run directory, ...).
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


class JobInputError(PipelineError):
    """A job was given a DataFrame that lacks a column it needs, or a bad parameter."""

    def __init__(self, job: str, reason: str) -> None:
        super().__init__(f"{job}: {reason}")
        self.job, self.reason = job, reason


class SparkSetupError(PipelineError):
    """Spark could not be started (no Java, bad master URL, ...)."""
